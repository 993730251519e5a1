"""``torchglm predict``: predictions of a run's model for the rows of a file.

    torchglm predict --run_dir RUN --input rows.csv --output preds.csv
    torchglm predict --ckpt_path RUN/model.ckpt --input rows.csv --output preds.npz

The model's features are found by **name** in files that name their columns (a
CSV header, NPZ column arrays, a structured ``.npy``; other columns such as the
target are ignored) and by **position** in files that do not (a CSV without a
header, an NPZ ``X`` array, a plain 2-D ``.npy``): then the file must have
exactly the model's number of columns. A CSV's first row is its header unless
every cell of it is a number (``--header``/``--no-header`` decide explicitly);
a UTF-8 byte-order mark is ignored.

A model trained with an offset column (``data.offset`` in the config) adds that
column to eta at prediction too: the input must name it (a CSV header, an NPZ
array, a structured ``.npy`` field), as the training file did.

Rows stream: a CSV is read ``CHUNK_ROWS`` rows at a time by the training reader
(:func:`torchglm.data.files.iter_csv`, one set of rules), a ``.npy`` through a
memory map a slice at a time, and each chunk's predictions are appended to a
temporary file renamed onto the output at the end, so memory stays flat in the
number of rows and a failure (a bad row in the millionth line) leaves no output.
An NPZ input is loaded whole (a zip member cannot be memory-mapped).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import shutil
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from .._validation import InputError, NotFittedError, check_finite, existing_file, fail, optional_import
from ..data.files import (
    CHUNK_ROWS,
    TABLE_SUFFIXES,
    csv_layout,
    frame_columns,
    iter_csv,
    iter_frames,
    read_table,
)
from ..data.out_of_core import npz_row_blocks
from .checkpoints import checkpoint_bytes, model_checkpoint_of, read_checkpoint

__all__ = ["check_trained", "predict", "predict_main", "read_features", "read_inputs", "iter_inputs"]


def _names(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    n = len(names)
    return f"[{shown}{', ...' if n > limit else ''}] ({n} column{'s' if n != 1 else ''})"


def read_features(path: str | Path, features: list[str], header: bool | None = None) -> np.ndarray:
    """The model's feature columns of a CSV/NPZ/NPY file as an ``(n, d)`` float64 array
    (:func:`read_inputs` without an offset column).

    Args:
        path: the file.
        features: the model's feature names, in the model's order.
        header: for a CSV, whether the first row names the columns (``None``: it
            does unless every cell of it is a number).

    Raises:
        InputError: a missing file or a directory; a named file without one of the
            model's columns; an unnamed file whose width is not the model's.
    """
    return read_inputs(path, features, None, header)[0]


def read_inputs(
    path: str | Path, features: list[str], offset: str | None = None, header: bool | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's feature columns ``(n, d)`` and, for a model trained with an offset,
    its offset column ``(n,)`` (float64), from a CSV/NPZ/NPY file.

    Args:
        path: the file.
        features: the model's feature names, in the model's order.
        offset: the name of the offset column the model was trained with, or ``None``.
        header: for a CSV, whether the first row names the columns (``None``: it
            does unless every cell of it is a number).

    Raises:
        InputError: as :func:`read_features`; and, with ``offset``, a file that does not
            name that column (a missing column, a CSV without a header, a plain ``.npy``).
    """
    chunks = list(iter_inputs(path, features, offset, header, chunk_rows=None))
    x = np.concatenate([c[0] for c in chunks])
    return x, None if offset is None else np.concatenate([c[1] for c in chunks])


def iter_inputs(
    path: str | Path,
    features: list[str],
    offset: str | None = None,
    header: bool | None = None,
    chunk_rows: int | None = CHUNK_ROWS,
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """:func:`read_inputs` ``chunk_rows`` rows at a time (``None``: all at once): the
    model's feature columns ``(m, d)`` and the offset column ``(m,)`` (or ``None``) of
    consecutive row blocks, at least one. The layout (header, names, widths) is checked
    before the first block is read.

    Raises:
        InputError: as :func:`read_inputs`; a bad row when its block is read.
    """
    path = existing_file("input", path, "data file")
    if path.suffix.lower() == ".csv":
        return _iter_csv(path, features, header, offset, chunk_rows)
    if path.suffix.lower() == ".npy":
        arr = _open_npy(path)
        if not arr.dtype.names:
            _check_plain_width(path, arr, features)
            if offset is not None:
                raise _missing_offset(path, offset, [])
            return _npy_blocks(arr, None, features, None, chunk_rows)
        missing = [n for n in features if n not in arr.dtype.names]
        if missing or (offset is not None and offset not in arr.dtype.names):
            # the data reader's message for a missing feature, ours for the offset
            if not missing:
                raise _missing_offset(path, offset, list(arr.dtype.names))
            read_table(path, features=features, require_target=False)
        return _npy_blocks(arr, path, features, offset, chunk_rows)
    if path.suffix.lower() == ".npz" and chunk_rows is not None:
        stream = _npz_stream(path, features, offset, chunk_rows)
        if stream is not None:
            return stream
    x = _read_array(path, features)
    o = None if offset is None else _read_offset_array(path, offset, x.shape[0])
    return _blocks(x, o, chunk_rows)


def _npz_stream(path: Path, features: list[str], offset: str | None, chunk_rows: int):
    """An NPZ's rows ``chunk_rows`` at a time, from its ``X`` (matched to the model's
    columns as :func:`~torchglm.data.files.read_table` does: by its ``x0, x1, ...``
    names, else by position) or from one array per feature; ``None`` for any other
    layout, which is read whole (and refused there with the reader's message)."""
    d = len(features)
    extra = {} if offset is None else {offset: ()}
    try:
        with zipfile.ZipFile(path) as zf:
            has_x = "X.npy" in zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return None
    if has_x:
        blocks = npz_row_blocks(path, {"X": (d,), **extra}, chunk_rows)
        names = [f"x{j}" for j in range(d)]
        index = [names.index(n) for n in features] if all(n in names for n in features) else list(range(d))

        def features_of(b):
            return b[0][:, index]
    elif d:
        blocks = npz_row_blocks(path, {**dict.fromkeys(features, ()), **extra}, chunk_rows)

        def features_of(b):
            return np.stack(b[:d], axis=1)
    else:
        return None
    if blocks is None:
        return None
    return (
        (
            np.asarray(features_of(b), dtype=np.float64),
            None if offset is None else np.asarray(b[-1], dtype=np.float64),
        )
        for b in blocks
    )


def _blocks(x: np.ndarray, o: np.ndarray | None, chunk_rows: int | None):
    step = chunk_rows or max(len(x), 1)
    for k in range(0, max(len(x), 1), step):
        yield x[k : k + step], None if o is None else o[k : k + step]


def _open_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:
        raise fail("input", "a readable .npy file", f"'{path}' ({type(err).__name__})") from None


def _check_plain_width(path: Path, x: np.ndarray, features: list[str]) -> None:
    d = len(features)
    if x.ndim != 2 or x.shape[1] != d:
        raise fail(
            "input",
            f"a 2-D array with the model's {d} feature columns {_names(features)} "
            "(an unnamed array is matched by position)",
            f"'{path}' of shape {x.shape}",
        )


def _npy_blocks(arr: np.ndarray, path, features, offset, chunk_rows):
    """Slices of a memory-mapped ``.npy``: only the block being predicted is read."""
    n = arr.shape[0]
    step = chunk_rows or max(n, 1)
    for k in range(0, max(n, 1), step):
        block = arr[k : k + step]
        if not arr.dtype.names:
            yield np.array(block, dtype=np.float64), None  # a copy of the block: the map stays read-only
            continue
        cols = [_numeric_field(path, block, name) for name in features]
        x = np.stack(cols, axis=1) if cols else np.empty((len(block), 0))
        yield x, None if offset is None else _numeric_field(path, block, offset)


def _numeric_field(path: Path, block: np.ndarray, name: str) -> np.ndarray:
    try:
        return np.asarray(block[name], dtype=np.float64)
    except (ValueError, TypeError):
        raise fail(
            f"input '{path}' column '{name}'", "numeric values", f"dtype {block[name].dtype}"
        ) from None


def _missing_offset(path: Path, offset: str, names: list[str] | None) -> InputError:
    got = f"'{path}' with columns {_names(names)}" if names else f"'{path}' (its columns have no names)"
    return fail(
        "input",
        f"the offset column '{offset}' the model was trained with (it is added to eta; "
        "the file must name it)",
        got,
    )


def _read_offset_array(path: Path, offset: str, n: int) -> np.ndarray:
    """The offset column of an NPZ (an array of that name) or a structured ``.npy``."""
    if path.suffix.lower() == ".npz":
        with np.load(path, allow_pickle=False) as z:
            names, col = list(z.files), (z[offset] if offset in z.files else None)
    else:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
        names = list(arr.dtype.names or [])
        col = arr[offset] if offset in names else None
    if col is None:
        raise _missing_offset(path, offset, names)
    try:
        col = np.asarray(col, dtype=np.float64)
    except (ValueError, TypeError):
        raise fail(
            f"input '{path}' offset column '{offset}'", "numeric values", f"dtype {col.dtype}"
        ) from None
    if col.shape != (n,):
        raise fail(f"input '{path}' offset column '{offset}'", f"one value per row, shape ({n},)", col.shape)
    return col


def _read_array(path: Path, features: list[str]) -> np.ndarray:
    d = len(features)
    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                x = z["X"] if "X" in z.files else None
        except (ValueError, OSError, EOFError, KeyError) as err:
            raise fail("input", "a readable .npz file", f"'{path}' ({type(err).__name__})") from None
        if x is not None and (x.ndim != 2 or x.shape[1] != d):
            raise fail(
                "input",
                f"an 'X' array with the model's {d} feature columns {_names(features)} "
                "(an unnamed array is matched by position)",
                f"'{path}' with X of shape {x.shape}",
            )
    # Named columns (or an NPZ 'X' of the right width): the data reader selects them.
    return read_table(path, features=features, require_target=False).x


def _iter_csv(path: Path, features: list[str], header: bool | None, offset: str | None, chunk_rows):
    layout = csv_layout(path, header, role="input")
    d = len(features)
    if layout.names is not None:
        names = layout.names
        missing = [n for n in features if n not in names]
        if missing:
            raise fail(
                "input",
                f"the model's feature columns {_names(features)} (by name; --no-header "
                "to match them by position)",
                f"'{path}' with columns {_names(names)}, missing {_names(missing)}",
            )
        if offset is not None and offset not in names:
            raise _missing_offset(path, offset, names)
        index = [names.index(n) for n in features]
        if offset is not None:
            index.append(names.index(offset))
    else:
        if offset is not None:
            raise _missing_offset(path, offset, None)
        if layout.width != d:
            raise fail(
                "input",
                f"the model's {d} feature columns {_names(features)} (a CSV without a "
                "header is matched by position)",
                f"'{path}' with {layout.width} columns",
            )
        index = list(range(d))
    return _csv_blocks(path, layout, index, d, offset is not None, chunk_rows)


def _csv_blocks(path, layout, index, d, has_offset, chunk_rows):
    for rows in iter_csv(path, layout, chunk_rows, role="input"):
        x = np.ascontiguousarray(rows[:, index])  # row-major, as the row-wise reader gave it
        yield (x[:, :d], x[:, d]) if has_offset else (x, None)


def predict(ckpt_path: str | Path, input: str | Path, output: str | Path, header: bool | None = None) -> Path:
    """Write predictions of a checkpointed model for the rows of a CSV/NPZ/NPY file.

    Features are standardized as in training; a model trained with an offset column
    adds the input's column of that name to eta (``eta = x W^T + b + offset``),
    unstandardized, as in training. A model trained on a table with categorical
    columns or imputed cells applies its stored encoding (:class:`~.features.FeatureSpec`).
    Classifiers get one probability column per class ``p_<class>`` (``p_0..p_{K-1}``
    for labels that were the codes) and ``label`` (the training file's labels);
    regression models get ``mean``. The output's suffix picks its format: ``.csv``,
    ``.tsv``, ``.parquet`` (columns) or ``.npz`` (arrays ``proba``/``label``, or
    ``mean``); it is written atomically.

    Raises:
        InputError: an unreadable checkpoint or input, a checkpoint that holds
            pickled objects or names classes loading it would import, an unfitted
            model or one with non-finite parameters (:func:`check_trained`),
            missing or extra unnamed columns, a missing offset column, NaN/inf, an
            output path that cannot be written.
    """
    from .data_module import GLMDataModule  # Lightning, only when predicting
    from .task import GLMTask

    # one clear error for a missing, truncated or foreign file, and never running
    # code: the bytes read once, checked, and loaded (weights_only=True)
    data = checkpoint_bytes(ckpt_path)
    ckpt = read_checkpoint(data, ckpt_path)
    # the data module's state names its offset column, its fitted feature spec and
    # the class labels (checkpoints before them: none)
    dm_state = ckpt.get(GLMDataModule.__qualname__) or {}
    offset_name = dm_state.get("offset_column")
    spec_state, classes = dm_state.get("features"), dm_state.get("classes")
    try:
        task = GLMTask.load_from_checkpoint(io.BytesIO(data), map_location="cpu")
    except (TypeError, KeyError, RuntimeError, ValueError, argparse.ArgumentError) as err:
        raise fail(
            "ckpt_path",
            "a checkpoint written by train.py (its config rebuilds the model)",
            f"'{ckpt_path}' ({type(err).__name__})",
        ) from None
    check_trained(task, ckpt_path)
    task.eval()
    out = Path(output)
    if out.is_dir():
        raise fail("output", "a file path", f"'{out}' (a directory)")
    suffix = out.suffix.lower()
    if suffix not in WRITERS:
        raise fail(
            "output", f"a file ending in one of {list(WRITERS)} (the suffix picks the format)", f"'{out}'"
        )
    if spec_state is not None:
        from .features import FeatureSpec

        blocks = iter_table_inputs(input, FeatureSpec.from_state(spec_state), offset_name, CHUNK_ROWS)
    else:
        blocks = iter_inputs(input, task.feature_names, offset_name, header, CHUNK_ROWS)
    # The first block is read (and checked) before anything is created.
    first = _predict_block(task, *next(blocks), offset_name, 0, classes)
    writer = WRITERS[suffix](out)
    try:
        try:
            writer.write(first)
            n_rows = len(next(iter(first.values())))
            for x_np, offset_np in blocks:
                block = _predict_block(task, x_np, offset_np, offset_name, n_rows, classes)
                writer.write(block)
                n_rows += len(x_np)
            writer.commit()
        finally:
            writer.discard()
    except OSError as err:
        raise fail("output", "a writable file path", f"'{out}' ({err.strerror})") from None
    return out


def iter_table_inputs(path, spec, offset: str | None, chunk_rows: int | None = CHUNK_ROWS):
    """The model's features and offset of a CSV/TSV/Parquet file's rows through the
    model's fitted :class:`~.features.FeatureSpec` (its categories and fill values),
    ``chunk_rows`` rows at a time. The columns are checked before the first block.

    Raises:
        InputError: another kind of file, a missing column, a missing cell where the
            model imputes nothing, text in a numeric column, a level unseen in training.
    """
    from .features import numeric_column

    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES and path.is_file():
        raise fail(
            "input",
            f"a {'/'.join(TABLE_SUFFIXES)} table with the model's columns {_names(spec.columns)} "
            "(the model was trained on a table with categories or imputed cells)",
            f"'{path}'",
        )
    names = frame_columns(path, "input")
    needed = spec.columns + ([offset] if offset is not None else [])
    missing = [n for n in needed if n not in names]
    if missing:
        if offset in missing and len(missing) == 1:
            raise _missing_offset(path, offset, names)
        raise fail(
            "input",
            f"the model's input columns {_names(spec.columns)} (by name)",
            f"'{path}' with columns {_names(names)}, missing {_names(missing)}",
        )
    return _table_blocks(path, spec, offset, chunk_rows, numeric_column)


def _table_blocks(path, spec, offset, chunk_rows, numeric_column):
    where = f"input '{path}'"
    for frame in iter_frames(path, "input", chunk_rows):
        first = int(frame.index[0])
        x = spec.transform(frame, where, first)
        o = None if offset is None else numeric_column(frame[offset], where, offset, first)
        yield x, o


def _predict_block(
    task, x_np: np.ndarray, offset_np, offset_name, first_row: int, classes: list | None = None
) -> dict[str, np.ndarray]:
    """The output columns for one block of rows: ``p_<class>`` and ``label``
    (classifiers; the training file's own labels when they were not the codes
    ``0..K-1``: ``classes``) or ``mean``, checked as in training (``first_row``: the
    block's first row in the input, for the messages)."""
    x = torch.as_tensor(x_np, dtype=torch.float64)
    check_finite("X", x, first_row)
    offset = None
    if offset_np is not None:
        offset = torch.as_tensor(offset_np, dtype=torch.float64)
        check_finite(f"offset column '{offset_name}'", offset, first_row)
        offset = offset.to(task.data_dtype)  # as the data module casts it for training
    family = task.model.family
    with torch.no_grad():
        # the model's own gate on its inputs, as its predict_proba checks them (the
        # width, a count model's integer counts): what model.predict_proba refuses, the
        # CLI refuses with the same message
        z = task.model.check_features(task.phi(task.standardize(x)))
        eta = task.model(z) if offset is None else task.model(z, offset)
    mu, label = family.mean(eta), family.predict(eta)
    if family.is_classifier:
        proba = mu if mu.dim() == 2 else torch.stack([1 - mu, mu], dim=1)
        names = classes if classes is not None else list(range(proba.shape[1]))
        labels = label.numpy() if classes is None else np.asarray(classes)[label.numpy()]
        return {f"p_{names[k]}": proba[:, k].numpy() for k in range(proba.shape[1])} | {"label": labels}
    return {"mean": mu.numpy()}


class _CsvWriter:
    """Appends blocks of output columns to a temporary CSV; :meth:`commit` renames it
    onto the output (atomic on one file system), :meth:`discard` removes what is left."""

    sep = ","

    def __init__(self, out: Path):
        self.out, self.tmp = out, out.with_name(f".{out.name}.tmp-{os.getpid()}")
        self.fh = None

    def write(self, columns: dict[str, np.ndarray]) -> None:
        if self.fh is None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.tmp, "w", newline="")
            self.writer = csv.writer(self.fh, delimiter=self.sep, lineterminator="\n")
            self.writer.writerow(columns)
        rows = zip(*(c.tolist() for c in columns.values()))
        # repr: every float's shortest round-trip digits; csv quotes a label that needs it
        self.writer.writerows([repr(v) if isinstance(v, float) else v for v in r] for r in rows)

    def commit(self) -> None:
        self.fh.close()
        os.replace(self.tmp, self.out)

    def discard(self) -> None:
        # Closing flushes, and on a full disk that fails again: the file goes all the same.
        with contextlib.suppress(OSError):
            if self.fh is not None:
                self.fh.close()
        if self.tmp.is_file():
            self.tmp.unlink()


class _TsvWriter(_CsvWriter):
    sep = "\t"


class _ParquetWriter(_CsvWriter):
    """A Parquet file of the output columns (pyarrow), one row group per block."""

    def write(self, columns: dict[str, np.ndarray]) -> None:
        pa = optional_import("pyarrow", "writing Parquet predictions", "parquet")
        pq = optional_import("pyarrow.parquet", "writing Parquet predictions", "parquet")
        table = pa.table(
            {k: pa.array(np.asarray(v).tolist() if v.dtype.kind == "U" else v) for k, v in columns.items()}
        )
        if self.fh is None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.fh = pq.ParquetWriter(self.tmp, table.schema)
        self.fh.write_table(table)


class _NpzWriter(_CsvWriter):
    """An ``.npz`` of ``proba``/``label`` (or ``mean``) written block by block: each
    array's raw bytes are appended to a temporary file, and :meth:`commit` writes the
    zip (stored, as ``np.savez``) with each member's ``.npy`` header for the final row
    count followed by the bytes copied in pieces."""

    def __init__(self, out: Path):
        super().__init__(out)
        self.parts: dict[str, tuple[Path, object, np.dtype, tuple[int, ...]]] = {}
        self.n_rows = 0

    def write(self, columns: dict[str, np.ndarray]) -> None:
        arrays = (
            {
                "proba": np.stack([columns[k] for k in columns if k.startswith("p_")], axis=1),
                "label": columns["label"],
            }
            if "label" in columns
            else {"mean": columns["mean"]}
        )
        if not self.parts:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            for name, a in arrays.items():
                path = self.tmp.with_name(f"{self.tmp.name}.{name}")
                self.parts[name] = (path, open(path, "wb"), a.dtype, a.shape[1:])
        for name, a in arrays.items():
            self.parts[name][1].write(np.ascontiguousarray(a).tobytes())
        self.n_rows += len(next(iter(arrays.values())))

    def commit(self) -> None:
        with zipfile.ZipFile(self.tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, (path, fh, dtype, rest) in self.parts.items():
                fh.close()
                header = {
                    "descr": np.lib.format.dtype_to_descr(dtype),
                    "fortran_order": False,
                    "shape": (self.n_rows, *rest),
                }
                with zf.open(f"{name}.npy", "w", force_zip64=True) as member, open(path, "rb") as raw:
                    np.lib.format.write_array_header_1_0(member, header)
                    shutil.copyfileobj(raw, member, 1 << 20)
        os.replace(self.tmp, self.out)

    def discard(self) -> None:
        for path, fh, _, _ in self.parts.values():
            with contextlib.suppress(OSError):
                fh.close()
            path.unlink(missing_ok=True)
        if self.tmp.is_file():
            self.tmp.unlink()


#: ``--output`` suffix -> writer.
WRITERS = {".csv": _CsvWriter, ".tsv": _TsvWriter, ".parquet": _ParquetWriter, ".npz": _NpzWriter}


def check_trained(task, ckpt_path: str | Path) -> None:
    """A loaded model predicts only if it was fitted and its numbers are finite.

    The model's own fitted flag (``check_fitted``, as its ``predict_proba`` checks):
    a checkpoint of a fit that never trained holds initial weights (a logistic
    regression of zeros predicts 0.5 for every row). Then every floating-point
    parameter and buffer of the model, basis and standardization: a NaN (an edited
    or corrupted file, a diverged fit) or an infinite parameter would be written out
    as NaN predictions. Only log-probability statistics may be ``-inf`` (a naive
    Bayes count of zero with ``alpha = 0`` is probability 0).

    Raises:
        InputError: an unfitted model, or non-finite parameters or statistics.
    """
    try:
        task.model.check_fitted()
    except NotFittedError:
        raise fail(
            "ckpt_path",
            "a fitted model (the model.ckpt of a finished train.py run)",
            f"'{ckpt_path}' (a {type(task.model).__name__} that was never fitted)",
        ) from None
    parameters = {f"model.{k}" for k, _ in task.model.named_parameters()}
    for key, value in task.state_dict().items():
        if not torch.is_tensor(value) or not value.is_floating_point():
            continue
        # log-probability statistics (naive Bayes log_theta, log_p, log1m_p) may be -inf
        log_statistic = (
            key.startswith("model.") and key not in parameters and key.rpartition(".")[2].startswith("log")
        )
        bad = torch.isnan(value) | (value == torch.inf) if log_statistic else ~torch.isfinite(value)
        if bool(bad.any()):
            raise fail(
                "ckpt_path",
                "a model with finite parameters and statistics",
                f"'{ckpt_path}' ({key} has {int(bad.sum())} non-finite entries of {value.numel()})",
            )
    # Standardization divides by the scale: a scale of 0 (or below) was never fitted
    # (every training scale is a positive standard deviation, 1 for a constant column).
    scale = task.feature_scale
    if bool((scale <= 0).any()):
        raise fail(
            "ckpt_path",
            "positive feature scales (standard deviations from the training data)",
            f"'{ckpt_path}' (feature_scale has {int((scale <= 0).sum())} entries <= 0)",
        )


def predict_main(argv: list[str]) -> int:
    """``torchglm predict`` (``train.py predict``)."""
    parser = argparse.ArgumentParser(
        prog="torchglm predict",
        exit_on_error=False,
        description="Write predictions of a trained torchglm model.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run_dir", help="a finished run's directory: its model.ckpt is used")
    which.add_argument("--ckpt_path", help="a checkpoint written by train.py (e.g. RUN/model.ckpt)")
    parser.add_argument("--input", required=True, help="CSV/NPZ/NPY file with the feature columns")
    parser.add_argument("--output", required=True, help="output file (.csv, .tsv, .parquet or .npz)")
    parser.add_argument(
        "--header",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether a CSV's first row names its columns (default: yes unless it is all numbers)",
    )
    args = parser.parse_args(argv)
    ckpt = model_checkpoint_of(args.run_dir) if args.run_dir else args.ckpt_path
    out = predict(ckpt, args.input, args.output, header=args.header)
    print(f"predictions written to {out}")
    return 0
