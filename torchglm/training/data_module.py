"""The Lightning data module: source -> validated tensors -> split -> standardize -> batches.

Batches are index slices of in-memory tensors (:class:`TensorBatches`); the
dataloaders Lightning asks for are those re-iterable slices themselves, so an
epoch costs one ``randperm`` and one gather per batch, never per-sample
``__getitem__`` + collate (``bench/sgd_epoch.py`` measures the difference).
For an SGD fit in step blocks the task sets :attr:`GLMDataModule.steps_per_block`
and the training dataloader yields :class:`~torchglm.data.batches.BatchBlock` s of
that many batches (the same batches, in the same order).

The parts it is made of, each in its own module: what is read (:mod:`.sources`),
the split (:mod:`.splits`), the targets and their classes (:mod:`.labels`), a file
streamed from disk (:mod:`.streamed`), the standardization (:mod:`.features`) and
the fingerprint (:mod:`.fingerprint`).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
import pytorch_lightning as pl
import torch

from .._validation import check_classes, check_positive, fail
from ..families import Family
from ..data.batches import BatchBlocks, TensorBatches
from ..data.out_of_core import StreamedBatches, parse_size
from .features import FeatureSpec, standardize
from .fingerprint import data_fingerprint
from .in_memory import memory_splits
from .labels import Targets
from .placement import Placement
from .sources import Columns, read_source
from .splits import Split, shard
from .streamed import TrimmedPasses, streamed_source, streams

__all__ = ["GLMDataModule"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


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
        self.splitting = Split(val_fraction, test_fraction, split_seed)
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
        #: every row's target and weight in file order, for the target gate (:meth:`check_targets`)
        self.targets: Targets | None = None
        self._generator = torch.Generator().manual_seed(shuffle_seed)
        self.steps_per_block = 1
        self.placement = Placement()

    @property
    def classes(self) -> list | None:
        """The original class labels, code ``k`` standing for ``classes[k]`` (``None``:
        the labels are the codes themselves, or the data are not classes)."""
        return None if self.targets is None else self.targets.classes

    # -- loading and validation -------------------------------------------------
    def _columns(self) -> Columns:
        return Columns(
            self.source,
            self.target,
            self.features,
            self.weight_column,
            self.offset_column,
            self.dataset_options,
        )

    def _parts(self, n: int) -> dict[str, torch.Tensor]:
        """Row indices of the train/val/test splits of ``n`` rows (:meth:`.Split.parts`)."""
        return self.splitting.parts(n)

    def _train_rows(self, n: int) -> np.ndarray:
        return self._parts(n)["train"].numpy()

    def setup(self, stage: str | None = None) -> None:
        """Read, validate, split and standardize the data (once; later calls are no-ops).

        Raises:
            InputError: non-finite features or targets, mismatched lengths, an empty split.
        """
        if self._splits:
            return
        if streams(self.source, self.memory_budget):
            self._setup_streamed()
        else:
            self._setup_loaded()
        if self.task == "classification" or self.n_classes is not None:
            self.check_labels(self.n_classes)
        elif self.task == "regression":
            self.check_regression()

    def _setup_loaded(self) -> None:
        """:meth:`setup` of data read into memory (:func:`.in_memory.memory_splits`)."""
        data = read_source(self._columns(), self.feature_spec, self.task, self.n_classes, self._train_rows)
        self.task, self.n_classes, self.n_dropped = data.task, data.n_classes, data.n_dropped
        self.feature_names = data.feature_names
        split = memory_splits(data, self.splitting, self.standardize, self.dtype)
        self.feature_mean, self.feature_scale = split.mean, split.scale
        self._splits, self._extras = split.splits, split.extras
        self.targets = Targets(split.y, split.weight, data.classes)

    def _setup_streamed(self) -> None:
        """:meth:`setup` for a file streamed from disk (:func:`.streamed.streamed_source`:
        a ``.npy`` or a CSV/TSV/Parquet table): the splits read their rows from the file
        when a pass asks; the targets, weights, offsets and the split's row numbers stay
        in memory."""
        source = streamed_source(
            self._columns(),
            self.feature_spec,
            self.splitting,
            standardize=self.standardize,
            dtype=self.dtype,
            memory_budget=self.memory_budget,
        )
        self.feature_mean, self.feature_scale = source.mean, source.scale
        self.feature_names, self.n_dropped = source.names, source.n_dropped
        self.streamed, self._digest = True, source.digest
        self._splits, self._extras = {}, {}
        for k, rows in source.rows.items():
            self._splits[k] = (source.x[k], source.y[rows])
            self._extras[k] = tuple(
                None if t is None else t[rows].to(self.dtype) for t in (source.weight, source.offset)
            )
        self.targets = Targets(source.y, source.weight, source.classes)

    def close(self) -> None:
        """Remove the temporary file of a streamed table's encoded rows
        (:class:`~torchglm.data.out_of_core.TemporaryNpy`; ``train.py`` calls this when
        a run ends, whether it succeeded or not). The streamed splits cannot be read
        afterwards; nothing else changes, and a second call does nothing."""
        for x, _ in self._splits.values():
            keep = getattr(x, "keep", None)
            if keep is not None:
                keep.remove()

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
        the categorical one, :meth:`.Targets.check_labels`) and at least two classes in
        training.

        Raises:
            InputError: non-integer labels, a label outside the declared classes,
                or a training split holding a single class.
        """
        self._require_setup()
        n_classes, code = self.targets.check_labels(self.task, self.n_classes, n_classes, family)
        if code is not None:
            self._splits = {k: (x, code(y)) for k, (x, y) in self._splits.items()}
        # a class present in the data can still be missing from the rows fitted
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
        self.targets.check_regression(self.task, family, self.dtype)
        self._splits = {k: (x, y.to(self.dtype)) for k, (x, y) in self._splits.items()}
        self.task = "regression"

    def class_count(self) -> int:
        """The number of classes of the data: the declared ``n_classes``, else the number
        of distinct labels (what a ``SoftmaxRegression`` without ``n_classes`` gets)."""
        self._require_setup()
        return self.targets.class_count(self.n_classes)

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

    @property
    def resident_device(self) -> torch.device | None:
        """The device the batches are gathered on (``None``: where the tensors are, the
        CPU), set by :meth:`keep_on` for a fit and cleared by :meth:`teardown`."""
        return self.placement.device

    def keep_on(self, device: torch.device | str) -> bool:
        """Gather the batches on ``device`` for a fit (:meth:`.Placement.keep_on`): on a
        CUDA device that holds every split (this process's shard), moved once.

        Returns:
            Whether the batches are gathered on ``device`` (``False``: they stay on
            the CPU and Lightning moves each batch).
        """
        self._require_setup()
        tensors = [t for s in self._splits.values() for t in s] + [
            t for e in self._extras.values() for t in e if t is not None
        ]
        return self.placement.keep_on(device, tensors, self.streamed)

    def teardown(self, stage: str) -> None:
        """Release the splits' device copies (:meth:`keep_on`) at the end of a fit."""
        self.placement.clear()

    def _tensors(self, name: str) -> tuple[torch.Tensor | None, ...]:
        """``(x, y, weight, offset)`` of this process's shard of one split, on
        :attr:`resident_device` when set (moved once per fit)."""
        return self.placement.tensors(name, lambda: self._shard(name))

    def _shard(self, name: str) -> tuple[torch.Tensor | None, ...]:
        x, y = self.split(name)
        weight, offset = self._extras[name]
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            idx = shard(x.shape[0], trainer.global_rank, trainer.world_size)
            x = x.subset(int(idx[0]), int(idx[-1]) + 1) if self.streamed and len(idx) else x[idx]
            y = y[idx]
            weight, offset = (None if t is None else t[idx] for t in (weight, offset))
        return x, y, weight, offset

    def _batches(self, name: str, batch_size: int | None, shuffle: bool) -> TensorBatches | StreamedBatches:
        x, y, weight, offset = self._tensors(name)
        if self.streamed:
            return TrimmedPasses(StreamedBatches(x, y, weight, offset, batch_size=batch_size or 65536))
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
        """What identifies the data of a fit (:func:`.fingerprint.data_fingerprint`),
        stored in its checkpoints so that ``--resume`` refuses other data."""
        self._require_setup()
        return data_fingerprint(self._splits, self._extras, self._digest if self.streamed else None)

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
