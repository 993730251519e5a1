"""The Lightning data module: source -> validated tensors -> split -> standardize -> batches.

Batches are index slices of in-memory tensors (:class:`TensorBatches`); the
dataloaders Lightning asks for are those re-iterable slices themselves, so an
epoch costs one ``randperm`` and one gather per batch, never per-sample
``__getitem__`` + collate (``bench/sgd_epoch.py`` measures the difference).
For an SGD fit in step blocks the task sets :attr:`GLMDataModule.steps_per_block`
and the training dataloader yields :class:`~torchglm.data.batches.BatchBlock` s of
that many batches (the same batches, in the same order).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import pytorch_lightning as pl
import torch

from .._validation import (
    check_classes,
    check_finite,
    check_magnitude,
    check_positive,
    check_targets,
    check_weight,
    fail,
)
from ..families import Family, get_family
from ..data.batches import BatchBlocks, TensorBatches
from ..data.datasets import load_dataset
from ..data.out_of_core import StreamedBatches, StreamedRows, _NpyFile, file_bytes, parse_size
from ..data.files import SUFFIXES, TABLE_SUFFIXES, read_frame, read_table
from ..distributed import shard_range
from .features import (
    FeatureSpec,
    LabelCodes,
    StreamedStandardization,
    numeric_column,
    standardization,
    standardize,
)
from .streamed_table import StreamedSource, stream_table, table_roles

__all__ = ["GLMDataModule", "shard"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
#: The splits stay on a CUDA device for a fit when together they take at most this
#: fraction of its free memory (:meth:`GLMDataModule.keep_on`).
RESIDENT_FRACTION = 0.5


def shard(n: int, rank: int, world_size: int) -> torch.Tensor:
    """Row indices of ``rank``'s shard of ``n`` rows: the contiguous range of
    :func:`torchglm.distributed.shard_range` (the one sharding rule, also the
    out-of-core readers'), disjoint shards whose union is every row, so a sum over
    batches all-reduced across ranks is the full sum."""
    start, stop = shard_range(n, rank, world_size)
    return torch.arange(start, stop)


class GLMDataModule(pl.LightningDataModule):
    """Tabular data for torchglm models.

    Args:
        source: a built-in dataset name (:data:`torchglm.data.DATASETS`) or a
            path to a ``.csv``/``.tsv``/``.parquet`` table (named columns, text
            categories and missing cells allowed: :func:`~torchglm.data.files.read_frame`)
            or a numeric ``.npz``/``.npy`` file; the suffix picks the reader.
        target: the target column of a file (name; index for a plain ``.npy``).
            Class labels may be anything (``1``/``2``, ``"spam"``/``"ham"``): the sorted
            distinct labels are the classes (``classes``, stored with the model, and
            ``torchglm predict`` writes them back), unless they are already the codes
            ``0..n_classes-1``.
        features: feature columns to keep (default: all but the target).
        task: ``"classification"`` or ``"regression"``; ``None`` takes it from the
            built-in dataset, or from the model's family when the task builds it.
        n_classes: declared number of classes; labels must lie in ``0..n_classes-1``.
        val_fraction: fraction of rows held out for validation (0 < f < 1).
        test_fraction: fraction of rows held out for testing (0 < f < 1).
        split_seed: seed of the train/val/test permutation.
        standardize: subtract the training split's column means and divide by its
            standard deviations (constant columns are left unscaled).
        batch_size: training rows per batch; ``None`` is one batch of all rows.
        eval_batch_size: rows per validation/test/predict batch.
        shuffle: reshuffle the training rows every epoch.
        shuffle_seed: seed of the shuffling generator.
        dtype: ``"float64"`` or ``"float32"``: the dtype of features (and of the model).
        dataset_options: keyword arguments for a built-in dataset's loader.
        weight: a file's column of sample weights (frequency weights: 2 counts a row
            twice; for the binomial family the numbers of trials). Built-in
            datasets bring their own when they have them.
        offset: a file's column added to eta with coefficient 1 (e.g. log exposure
            of a Poisson rate); built-in datasets bring their own.
        categorical: a table's categorical columns, one-hot encoded (treatment
            contrasts, the first sorted level the reference; :class:`~.features.FeatureSpec`).
        memory_budget: bytes (or a size such as ``"2GB"``): a plain 2-D ``.npy``
            file or a ``.csv``/``.tsv``/``.parquet`` table (a Parquet file's
            uncompressed size) larger than this is not loaded but streamed
            (:mod:`torchglm.data.out_of_core`; a table's categories, missing cells and
            labels through :mod:`~.streamed_table`, with the same results): the
            targets and the split's row indices stay in memory, each pass reads
            the features ``batch_size`` rows at a time (default 65,536; a table is
            parsed a chunk at a time), so memory stays at about one batch. For the
            pass-based solvers (``sgd`` needs shuffled in-memory rows) and models
            without a basis. ``.npz`` files are always loaded (the in-memory path
            holds about three float64 copies of the features).
        missing: what a missing (empty or ``NA``) cell of a used column does:
            ``"error"`` (naming the rows), ``"drop"`` the row, or impute the training
            rows' ``"mean"`` / ``"most_frequent"`` value (stored with the model).

    Attributes:
        steps_per_block: training batches per item of :meth:`train_dataloader`:
            1 yields :class:`~torchglm.data.batches.Batch` es, ``k > 1`` yields
            blocks of ``k`` (set by :class:`~torchglm.training.GLMTask` when it fits
            SGD in step blocks; not a config option of the data).
        resident_device: the device the batches are gathered on (``None``: where the
            tensors are, the CPU), set by :meth:`keep_on` for a fit and cleared by
            :meth:`teardown`.

    Raises:
        InputError: on a bad argument here, and from :meth:`setup` on a bad file,
            NaN/inf, mismatched lengths or an empty split.

    Example:
        >>> dm = GLMDataModule("breast_cancer", batch_size=64)
        >>> dm.setup("fit"); dm.n_features
        30
    """

    def __init__(
        self,
        source: str,
        target: str | int | None = None,
        features: Sequence[str] | None = None,
        task: Literal["classification", "regression"] | None = None,
        n_classes: int | None = None,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        standardize: bool = True,
        batch_size: int | None = 64,
        eval_batch_size: int = 8192,
        shuffle: bool = True,
        shuffle_seed: int = 0,
        dtype: Literal["float32", "float64"] = "float64",
        dataset_options: dict[str, Any] | None = None,
        weight: str | None = None,
        offset: str | None = None,
        categorical: list[str] | None = None,
        missing: Literal["error", "drop", "mean", "most_frequent"] = "error",
        memory_budget: int | str = "1GB",
    ):
        super().__init__()
        if batch_size is not None:
            check_positive("batch_size", batch_size)
        check_positive("eval_batch_size", eval_batch_size)
        for name, f in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 < f < 1:
                raise fail(name, "a fraction strictly between 0 and 1", f)
        if val_fraction + test_fraction >= 1:
            raise fail(
                "val_fraction + test_fraction",
                "less than 1 (rows must remain for training)",
                val_fraction + test_fraction,
            )
        if n_classes is not None and n_classes < 2:
            raise fail("n_classes", "an integer >= 2", n_classes)
        if dtype not in _DTYPES:
            raise fail("dtype", f"one of {list(_DTYPES)}", repr(dtype))
        self.source, self.target, self.features = source, target, features
        self.task, self.n_classes = task, n_classes
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.standardize = standardize
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.shuffle, self.shuffle_seed = shuffle, shuffle_seed
        self.dtype = _DTYPES[dtype]
        self.dataset_options = dict(dataset_options or {})
        self.weight_column, self.offset_column = weight, offset
        # checked here (a bad policy or column list fails before any file is read)
        self.feature_spec = FeatureSpec(list(categorical or []), missing)
        #: the original class labels, code k standing for classes[k] (None: the labels
        #: are the codes themselves, or the data are not classes)
        self.classes: list | None = None
        self.n_dropped = 0
        self.memory_budget = parse_size(memory_budget)
        #: whether the features are streamed from the file (:meth:`setup`)
        self.streamed = False
        self._digest: str | None = None
        self._extras: dict[str, tuple[torch.Tensor | None, torch.Tensor | None]] = {}
        self.feature_names: list[str] = []
        self.feature_mean: torch.Tensor | None = None
        self.feature_scale: torch.Tensor | None = None
        self._splits: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        # every row's target and weight in file order, for the target gate
        # (check_targets): its messages then index rows as model.fit's do
        self._targets: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._generator = torch.Generator().manual_seed(shuffle_seed)
        self.steps_per_block = 1
        self.resident_device: torch.device | None = None
        self._resident: dict[str, tuple[torch.Tensor | None, ...]] = {}

    # -- loading and validation -------------------------------------------------
    def _read(
        self,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, str | None, int | None]:
        """``(x, y, weight, offset, task, n_classes)`` from the file or built-in dataset."""
        special = [c for c in (self.weight_column, self.offset_column) if c is not None]
        suffix = Path(self.source).suffix.lower()
        if suffix in (*SUFFIXES, *TABLE_SUFFIXES) or Path(self.source).exists():
            if self.dataset_options:
                raise fail("dataset_options", "no options for a data file", self.dataset_options)
            if suffix in TABLE_SUFFIXES:
                return self._read_frame()
            if self.feature_spec.categorical or self.feature_spec.missing != "error":
                raise fail(
                    "categorical/missing",
                    f"a .csv, .tsv or .parquet table for categorical columns or a missing-value policy (numeric {suffix} files have neither)",
                    repr(self.source),
                )
            table = read_table(self.source, self.target, None if special else self.features)
            names, x = table.feature_names, table.x
            columns = {}
            for role, col in (("weight", self.weight_column), ("offset", self.offset_column)):
                if col is not None:
                    if col not in names:
                        raise fail(role, f"a column of '{self.source}' ({names})", repr(col))
                    columns[role] = x[:, names.index(col)]
            if special:
                keep = (
                    list(self.features)
                    if self.features is not None
                    else [n for n in names if n not in special]
                )
                missing = [n for n in keep if n not in names or n in special]
                if missing:
                    raise fail(
                        "features", f"feature columns of '{self.source}' other than weight/offset", missing
                    )
                x = x[:, [names.index(n) for n in keep]]
                names = keep
            self.feature_names = names
            return (x, table.y, columns.get("weight"), columns.get("offset"), self.task, self.n_classes)
        if self.target is not None or self.features is not None or special or self.feature_spec.categorical:
            raise fail(
                "target/features/weight/offset/categorical",
                f"unset for the built-in dataset '{self.source}' (a data file must end in one of "
                f"{[*TABLE_SUFFIXES, '.npz', '.npy']})",
                (self.target, self.features, self.weight_column, self.offset_column),
            )
        ds = load_dataset(self.source, **self.dataset_options)
        self.feature_names = ds.feature_names
        if self.task is not None and self.task != ds.task:
            raise fail("task", f"'{ds.task}' for the built-in dataset '{self.source}'", repr(self.task))
        return (
            ds.x,
            ds.y,
            ds.weight,
            ds.offset,
            ds.task,
            self.n_classes if self.n_classes is not None else ds.n_classes,
        )

    def _read_frame(
        self,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, str | None, int | None]:
        """:meth:`_read` for a CSV/TSV/Parquet table: named columns through the
        :class:`~.features.FeatureSpec` (missing cells, categories), fitted on the
        training split's rows; text labels become codes (:attr:`classes`)."""
        where = f"data file '{self.source}'"
        frame = read_frame(self.source)
        target, special, features = table_roles(
            list(frame.columns),
            self.source,
            self.target,
            self.features,
            self.weight_column,
            self.offset_column,
        )
        reserved = [target, *special.values()]
        spec = self.feature_spec
        if spec.missing == "drop":
            drop = spec.check_missing(frame, features + reserved, where)
            if drop.all():
                raise fail(where, "rows without missing cells (data.missing: drop)", "none")
            if drop.any():
                frame = frame[~drop].reset_index(drop=True)
            self.n_dropped = int(drop.sum())
        else:
            # the target, weight and offset are never imputed
            FeatureSpec(missing="error").check_missing(frame, reserved, where)
            if spec.missing == "error":
                spec.check_missing(frame, features, where)
        labels = LabelCodes()
        labels.add(frame[target])
        y_num, classes = labels.result()
        if classes is not None:
            self.classes = classes
        # fill values come from the training split's rows (only then are they needed:
        # a file too short to split is refused after its cells are checked)
        imputes = spec.missing in ("mean", "most_frequent")
        spec.fit(frame, features, self._parts(len(frame))["train"].numpy() if imputes else None, where)
        x = spec.transform(frame, where)
        self.feature_names = spec.names
        columns = {r: numeric_column(frame[c], where, c) for r, c in special.items()}
        return (x, y_num, columns.get("weight"), columns.get("offset"), self.task, self.n_classes)

    def _parts(self, n: int) -> dict[str, torch.Tensor]:
        """Row indices of the train/val/test splits of ``n`` rows (``split_seed``).

        Raises:
            InputError: a split with no row.
        """
        n_val, n_test = round(self.val_fraction * n), round(self.test_fraction * n)
        n_train = n - n_val - n_test
        if min(n_val, n_test, n_train) < 1:
            raise fail("data", "at least one row in each of train/val/test", f"{n} rows in total")
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.split_seed))
        return {
            "train": perm[:n_train],
            "val": perm[n_train : n_train + n_val],
            "test": perm[n_train + n_val :],
        }

    def setup(self, stage: str | None = None) -> None:
        """Read, validate, split and standardize the data (once; later calls are no-ops).

        Raises:
            InputError: non-finite features or targets, mismatched lengths, an empty split.
        """
        if self._splits:
            return
        if self._streams():
            self._setup_streamed()
            return
        x_np, y_np, w_np, o_np, self.task, self.n_classes = self._read()
        x = torch.as_tensor(x_np, dtype=torch.float64)
        y = torch.as_tensor(np.asarray(y_np, dtype=np.float64))
        if x.dim() != 2 or x.shape[0] != y.shape[0]:
            raise fail("X/y", "the same number of samples", f"X={x.shape[0]}, y={y.shape[0]}")
        check_finite("X", x)
        check_finite("y", y)
        weight = None if w_np is None else torch.as_tensor(np.asarray(w_np, dtype=np.float64))
        offset = None if o_np is None else torch.as_tensor(np.asarray(o_np, dtype=np.float64))
        check_weight(weight, x.shape[0])
        if offset is not None:
            check_finite("offset", offset)
        parts = self._parts(x.shape[0])
        mean, scale = standardization(x[parts["train"]], self.standardize)
        self.feature_mean, self.feature_scale = mean, scale
        z = standardize(x, mean, scale, self.dtype)
        # Sums of squares of the design (Hessian, Gram matrix) must not overflow the
        # working dtype: checked here, before any solver sees an infinite Hessian.
        check_magnitude("X", z, remedy="standardize the features (data.standardize: true) or rescale them")
        self._splits = {k: (z[idx].contiguous(), y[idx]) for k, idx in parts.items()}
        self._extras = {
            k: tuple(None if t is None else t[idx].to(self.dtype) for t in (weight, offset))
            for k, idx in parts.items()
        }
        self._targets = (y, weight)
        if self.task == "classification" or self.n_classes is not None:
            self.check_labels(self.n_classes)
        elif self.task == "regression":
            self.check_regression()

    def _streams(self) -> bool:
        """A ``.npy`` or table file larger than ``memory_budget`` is streamed
        (:func:`~torchglm.data.out_of_core.file_bytes`: a Parquet file's uncompressed size)."""
        path = Path(self.source)
        suffix = path.suffix.lower()
        return (
            suffix in (".npy", *TABLE_SUFFIXES) and path.is_file() and file_bytes(path) > self.memory_budget
        )

    def _setup_streamed(self) -> None:
        """:meth:`setup` for a file streamed from disk: the splits read their rows from
        the file when a pass asks; the targets and the split's row indices stay in
        memory (:meth:`_streamed_source`)."""
        source = self._streamed_source()
        self.feature_mean, self.feature_scale = source.mean, source.scale
        self.feature_names, self.classes, self.n_dropped = source.names, source.classes, source.n_dropped
        self.streamed = True
        self._digest = source.digest
        self._splits, self._extras = {}, {}
        for k, rows in source.rows.items():
            self._splits[k] = (source.x[k], source.y[rows])
            self._extras[k] = tuple(
                None if t is None else t[rows].to(self.dtype) for t in (source.weight, source.offset)
            )
        self._targets = (source.y, source.weight)
        if self.task == "classification" or self.n_classes is not None:
            self.check_labels(self.n_classes)
        elif self.task == "regression":
            self.check_regression()

    def _streamed_source(self) -> StreamedSource:
        """The streamed file's splits and statistics: a table's through
        :func:`~.streamed_table.stream_table` (its features, weight, offset, categories and
        missing cells as in memory); a plain 2-D ``.npy``'s by :func:`_streamed_statistics`
        (the data options it cannot take are refused)."""
        if self.dataset_options:
            raise fail("dataset_options", "no options for a data file", self.dataset_options)
        if Path(self.source).suffix.lower() in TABLE_SUFFIXES:
            return stream_table(
                self.source,
                self.feature_spec,
                self._parts,
                target=self.target,
                features=self.features,
                weight=self.weight_column,
                offset=self.offset_column,
                standardize=self.standardize,
                dtype=self.dtype,
            )
        if self.features is not None or self.weight_column or self.offset_column:
            raise fail(
                "features/weight/offset",
                f"unset for a .npy file streamed from disk (larger than data.memory_budget={self.memory_budget})",
                (self.features, self.weight_column, self.offset_column),
            )
        if self.feature_spec.categorical or self.feature_spec.missing != "error":
            raise fail("categorical/missing", "a .csv, .tsv or .parquet table", repr(self.source))
        npy = _NpyFile(Path(self.source), "data file")
        if len(npy.shape) != 2 or npy.shape[1] < 2 or npy.dtype.names:
            raise fail(
                f"data file '{self.source}'",
                "a plain 2-D array with feature columns and a target column to stream",
                f"shape {npy.shape}, dtype {npy.dtype}",
            )
        n, width = npy.shape
        try:
            col = (width - 1) if self.target is None else int(self.target) % width
        except ValueError:
            raise fail("target", "a column index for a plain .npy array", repr(self.target)) from None
        columns = [j for j in range(width) if j != col]
        parts = self._parts(n)
        train = np.zeros(n, dtype=bool)
        train[parts["train"].numpy()] = True
        y, mean, scale, digest = _streamed_statistics(
            npy, col, columns, train, self.batch_size or 65536, self.standardize
        )
        yt = torch.from_numpy(y)
        check_finite("y", yt)
        rows = {k: np.sort(idx.numpy()) for k, idx in parts.items()}
        x = {k: StreamedRows(npy.path, r, columns, mean, scale, self.dtype) for k, r in rows.items()}
        names = [f"x{j}" for j in columns]
        return StreamedSource(x, rows, yt, None, None, mean, scale, names, None, 0, digest.hexdigest())

    def check_targets(self, family: Family, n_classes: int | None = None) -> None:
        """The model's target gate on every row: the checks ``model.fit`` applies to the
        same rows (:func:`~torchglm._validation.check_targets`, one message), then the
        targets in the model's form (int64 labels, or reals in the features' dtype).

        Raises:
            InputError: targets outside the family's support (negative Poisson counts,
                labels outside the model's classes, ...), a task mismatch, or a
                training split holding a single class.
        """
        if family.is_classifier:
            self.check_labels(n_classes, family)
        else:
            self.check_regression(family)

    def check_labels(self, n_classes: int | None, family: Family | None = None) -> None:
        """Check class labels against the declared number of classes and turn them into
        int64: every label in ``0..n_classes-1`` (``family``'s target check, by default
        the categorical one) and at least two classes in training.

        Raises:
            InputError: non-integer labels, a label outside the declared classes,
                or a training split holding a single class.
        """
        self._require_setup()
        if self.task == "regression":
            raise fail("task", "'classification' for a classifier", "'regression' data")
        y_all, weight = self._targets
        if n_classes is None:  # setup checked y finite
            n_classes = self.class_count()
        if self.n_classes is not None and n_classes != self.n_classes:
            raise fail("n_classes", f"{self.n_classes} (declared for the data)", f"{n_classes} (the model's)")
        self._encode_labels(n_classes)
        y_all, weight = self._targets
        family = get_family("categorical") if family is None else family
        # Every row through model.fit's gate (a single class or an empty declared class
        # in the data read as model.fit would say it), then the training split alone:
        # a class present in the data can still be missing from the rows fitted.
        check_targets(family, y_all, n_classes, weight, fitting=True)
        check_classes("y (train split)", self._splits["train"][1], self._extras["train"][0], n_classes)
        self._splits = {k: (x, y.long()) for k, (x, y) in self._splits.items()}
        self.task, self.n_classes = "classification", n_classes

    def check_regression(self, family: Family | None = None) -> None:
        """Declare the targets real-valued (float, in the features' dtype), checked by
        ``family``'s target gate when given (as ``model.fit`` checks them).

        Raises:
            InputError: the data were declared a classification task; targets outside
                ``family``'s support.
        """
        self._require_setup()
        if self.task == "classification":
            raise fail("task", "'regression' for a regression family", "'classification' data")
        if self.classes is not None and isinstance(self.classes[0], str):
            raise fail(
                "y",
                "numeric targets for a regression family",
                f"text labels such as {self.classes[:3]} (a classifier takes them as classes)",
            )
        if family is not None:
            y_all, weight = self._targets
            check_targets(family, y_all, None, weight, dtype=self.dtype)
        self._splits = {k: (x, y.to(self.dtype)) for k, (x, y) in self._splits.items()}
        self.task = "regression"

    def class_count(self) -> int:
        """The number of classes of the data: the declared ``n_classes``, else the number
        of distinct labels (what a ``SoftmaxRegression`` without ``n_classes`` gets)."""
        self._require_setup()
        if self.n_classes is not None:
            return self.n_classes
        if self.classes is not None:
            return len(self.classes)
        values = torch.unique(self._targets[0])
        if values.numel() >= 2:
            return int(values.numel())
        # a single label: at least two classes, so that the gate reports the single class
        return max(int(float(values.max())) + 1, 2)

    def _encode_labels(self, n_classes: int) -> None:
        """Turn numeric labels that are not the codes ``0..n_classes-1`` into codes:
        integer labels with exactly ``n_classes`` distinct values (``1``/``2``,
        ``-1``/``1``, ``3``/``5``/``7``) become the positions of their sorted values,
        kept in :attr:`classes` (scikit-learn's ``classes_``). Codes already in range
        (a declared class may be absent), non-integer labels and more distinct labels
        than classes are left to the target gate, which refuses the latter two.

        Raises:
            InputError: text labels of more classes than the model has.
        """
        y, weight = self._targets
        if self.classes is not None:
            if len(self.classes) > n_classes:
                raise fail(
                    "y",
                    f"labels of {n_classes} classes (the model's n_classes)",
                    f"{len(self.classes)} distinct labels {self.classes[:10]}",
                )
            return
        values = torch.unique(y)
        integers = bool((values == values.round()).all())
        in_range = bool(values.min() >= 0) and bool(values.max() < n_classes)
        if not integers or in_range or values.numel() != n_classes:
            return
        self.classes = [int(v) for v in values.tolist()]

        def code(t: torch.Tensor) -> torch.Tensor:
            return torch.searchsorted(values, t.to(values.dtype)).to(t.dtype)

        self._targets = (code(y), weight)
        self._splits = {k: (x, code(t)) for k, (x, t) in self._splits.items()}

    def _require_setup(self) -> None:
        if not self._splits:
            raise RuntimeError("GLMDataModule.setup() must run first")

    # -- tensors and batches ------------------------------------------------------
    @property
    def n_features(self) -> int:
        self._require_setup()
        return int(self._splits["train"][0].shape[1])

    def split(self, name: Literal["train", "val", "test"]) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(x, y)`` tensors of one split (standardized features)."""
        self._require_setup()
        return self._splits[name]

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the training split's standardization to raw features."""
        self._require_setup()
        return standardize(x, self.feature_mean, self.feature_scale, self.dtype)

    def keep_on(self, device: torch.device | str) -> bool:
        """Gather the batches on ``device`` for a fit: every split (this process's
        shard) is moved there once, when it is first batched, instead of each batch
        at every step. Done on a CUDA device when the splits together take at most
        :data:`RESIDENT_FRACTION` of its free memory; on a CPU they are there already.

        Returns:
            Whether the batches are gathered on ``device`` (``False``: they stay on
            the CPU and Lightning moves each batch).
        """
        self._require_setup()
        device = torch.device(device)
        self.resident_device, self._resident = None, {}
        if self.streamed:
            return device.type == "cpu"  # each batch is read, then moved
        if device.type == "cpu":
            return True
        if device.type != "cuda":
            return False
        tensors = [t for s in self._splits.values() for t in s] + [
            t for e in self._extras.values() for t in e if t is not None
        ]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        free, _ = torch.cuda.mem_get_info(device)
        if nbytes > RESIDENT_FRACTION * free:
            return False
        self.resident_device = device
        return True

    def teardown(self, stage: str) -> None:
        """Release the splits' device copies (:meth:`keep_on`) at the end of a fit."""
        self.resident_device, self._resident = None, {}

    def _tensors(self, name: str) -> tuple[torch.Tensor | None, ...]:
        """``(x, y, weight, offset)`` of this process's shard of one split, on
        :attr:`resident_device` when set (moved once per fit)."""
        if name in self._resident:
            return self._resident[name]
        x, y = self.split(name)
        weight, offset = self._extras[name]
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            idx = shard(x.shape[0], trainer.global_rank, trainer.world_size)
            x = x.subset(int(idx[0]), int(idx[-1]) + 1) if self.streamed and len(idx) else x[idx]
            y = y[idx]
            weight, offset = (None if t is None else t[idx] for t in (weight, offset))
        tensors = (x, y, weight, offset)
        if self.resident_device is not None:
            tensors = tuple(None if t is None else t.to(self.resident_device) for t in tensors)
            self._resident[name] = tensors
        return tensors

    def _batches(self, name: str, batch_size: int | None, shuffle: bool) -> TensorBatches | StreamedBatches:
        x, y, weight, offset = self._tensors(name)
        if self.streamed:
            return StreamedBatches(x, y, weight, offset, batch_size=batch_size or 65536)
        return TensorBatches(
            x,
            y,
            weight,
            offset,
            batch_size=batch_size,
            shuffle=shuffle,
            generator=self._generator if shuffle else None,
        )

    def train_batches(self, batch_size: int | None = None, shuffle: bool | None = None) -> TensorBatches:
        """Re-iterable training batches (for pass-based fitters and callbacks).

        Defaults: ``batch_size`` and ``shuffle`` of this module."""
        return self._batches(
            "train",
            self.batch_size if batch_size is None else batch_size,
            self.shuffle if shuffle is None else shuffle,
        )

    def val_batches(self) -> TensorBatches:
        return self._batches("val", self.eval_batch_size, False)

    def test_batches(self) -> TensorBatches:
        return self._batches("test", self.eval_batch_size, False)

    def train_dataloader(self) -> TensorBatches | BatchBlocks:
        batches = self.train_batches()
        return batches if self.steps_per_block == 1 else batches.blocks(self.steps_per_block)

    def val_dataloader(self) -> TensorBatches:
        return self.val_batches()

    def test_dataloader(self) -> TensorBatches:
        return self.test_batches()

    def predict_dataloader(self) -> TensorBatches:
        return self.test_batches()

    # -- resumable shuffling --------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The shuffling generator's state, saved in every checkpoint, so a run resumed
        from a checkpoint draws the same permutations as an uninterrupted run; and the
        name of the offset column, which ``torchglm predict`` reads from its input; the
        fitted :class:`~.features.FeatureSpec` (``None`` for numeric files and built-in
        datasets) and the class labels, which it applies and writes back. Plain data
        (checkpoints load with ``weights_only=True``)."""
        fitted = self.feature_spec.columns and not self.feature_spec.trivial
        return {
            "shuffle_generator": self._generator.get_state(),
            "offset_column": self.offset_column,
            "features": self.feature_spec.state() if fitted else None,
            "classes": None if self.classes is None else list(self.classes),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._generator.set_state(state_dict["shuffle_generator"])

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the data of a fit, stored in its checkpoints so that
        ``--resume`` refuses other data: the rows per split, the number of features
        and a BLAKE2b digest of every split's tensors as the model sees them (split,
        standardized, labels as integers; features, targets, weights and offsets).
        The same data read again give the same bytes, whatever file they come from.
        Plain ``str``/``int`` values (checkpoints load with ``weights_only=True``).
        """
        self._require_setup()
        if self.streamed:
            # the file's bytes (read at setup) and the split sizes: the same file gives the same digest
            return {
                "rows": {k: int(v[1].shape[0]) for k, v in self._splits.items()},
                "n_features": self.n_features,
                "digest": self._digest,
            }
        digest = hashlib.blake2b(digest_size=16)
        for name, (x, y) in self._splits.items():
            for t in (x, y, *self._extras[name]):
                if t is not None:
                    t = t.detach().cpu().contiguous()
                    digest.update(f"{name} {t.dtype} {tuple(t.shape)};".encode())
                    digest.update(t.numpy())  # the buffer itself, no copy
        return {
            "rows": {k: int(v[0].shape[0]) for k, v in self._splits.items()},
            "n_features": self.n_features,
            "digest": digest.hexdigest(),
        }

    def summary(self) -> dict[str, Any]:
        """Sizes and settings, for logs and ``metrics.json``."""
        self._require_setup()
        return {
            "source": self.source,
            "task": self.task,
            "n_classes": self.n_classes,
            **({"streamed": True} if self.streamed else {}),
            **({"classes": list(self.classes)} if self.classes is not None else {}),
            **({"rows_dropped": self.n_dropped} if self.n_dropped else {}),
            "n_features": self.n_features,
            **{f"n_{k}": int(v[0].shape[0]) for k, v in self._splits.items()},
        }


def _streamed_statistics(
    npy: _NpyFile, col: int, columns: list[int], train: np.ndarray, chunk: int, standardize: bool
):
    """Two passes over a streamed ``.npy``: its targets, the finiteness check, the data
    digest and the training rows' column maxima, then their moments
    (:class:`~.features.StreamedStandardization`, the statistics of
    :func:`~.features.standardization`)."""
    n = npy.shape[0]
    y = np.empty(n, dtype=np.float64)
    stats = StreamedStandardization(len(columns))
    digest = hashlib.blake2b(digest_size=16)
    with open(npy.path, "rb") as f:
        for i in range(0, n, chunk):
            block = npy.rows(f, i, min(i + chunk, n))
            digest.update(block.tobytes())
            x = np.ascontiguousarray(block[:, columns], dtype=np.float64)
            check_finite("X", torch.from_numpy(x), i)
            y[i : i + len(block)] = block[:, col]
            stats.add_max(x[train[i : i + len(block)]])
        if standardize:
            for i in range(0, n, chunk):
                block = npy.rows(f, i, min(i + chunk, n))
                stats.add_moments(np.asarray(block[:, columns], dtype=np.float64)[train[i : i + len(block)]])
    mean, scale = stats.result(standardize)
    return y, mean, scale, digest
