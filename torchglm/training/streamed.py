"""A file larger than the data module's memory budget, streamed from disk: which files
stream (:func:`streams`: a plain 2-D ``.npy`` or a CSV/TSV/Parquet table), and their
splits with the training rows' standardization (:func:`streamed_source`: a table's
through :func:`~.streamed_table.stream_table`, a ``.npy``'s by :func:`streamed_splits`),
each split a :class:`~torchglm.data.out_of_core.StreamedRows` (of the file, or of
a table's encoded rows) read a batch at a time by
:class:`~torchglm.data.out_of_core.StreamedBatches`.

What stays in memory is the targets (float64, every row, for the target gate, and
each split's own), each split's row numbers (a ``.npy``'s int32 below 2**31 rows) and
the statistics; the features are read a chunk at a time.
"""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path

import numpy as np
import torch

from .._validation import check_finite, fail
from ..data.files import TABLE_SUFFIXES
from ..data.out_of_core import StreamedRows, _NpyFile, feature_spans, file_bytes
from .features import FeatureSpec, StreamedStandardization
from .sources import Columns, check_file_options
from .splits import Split
from .streamed_table import StreamedSource, stream_table

__all__ = ["TrimmedPasses", "streams", "streamed_source", "streamed_splits", "trim_heap"]


def streams(source: str, memory_budget: int) -> bool:
    """A ``.npy`` or CSV/TSV/Parquet file larger than ``memory_budget`` is streamed
    (:func:`~torchglm.data.out_of_core.file_bytes`: a Parquet file's uncompressed size)."""
    path = Path(source)
    suffix = path.suffix.lower()
    return suffix in (".npy", *TABLE_SUFFIXES) and path.is_file() and file_bytes(path) > memory_budget


def streamed_source(
    cols: Columns,
    spec: FeatureSpec,
    split: Split,
    *,
    standardize: bool,
    dtype: torch.dtype,
    memory_budget: int,
) -> StreamedSource:
    """The streamed file's splits and statistics: a table's through
    :func:`~.streamed_table.stream_table` (its features, weight, offset, categories and
    missing cells as in memory), a plain 2-D ``.npy``'s by :func:`streamed_splits`
    (the data options it cannot take are refused).

    Raises:
        InputError: options the file cannot take; what :func:`~.streamed_table.stream_table`
            or :func:`streamed_splits` refuses.
    """
    check_file_options(cols, spec)
    if Path(cols.source).suffix.lower() in TABLE_SUFFIXES:
        return stream_table(
            cols.source,
            spec,
            split.parts,
            target=cols.target,
            features=cols.features,
            weight=cols.weight,
            offset=cols.offset,
            standardize=standardize,
            dtype=dtype,
        )
    npy, col, columns = _npy_columns(cols, memory_budget)
    return streamed_splits(npy, col, columns, split, standardize, dtype)


def _npy_columns(cols: Columns, memory_budget: int) -> tuple[_NpyFile, int, list[int]]:
    """The streamed ``.npy`` file, its target column and its feature columns (the
    data options a streamed ``.npy`` cannot take are refused)."""
    if cols.features is not None or cols.weight or cols.offset:
        raise fail(
            "features/weight/offset",
            f"unset for a .npy file streamed from disk (larger than data.memory_budget={memory_budget})",
            (cols.features, cols.weight, cols.offset),
        )
    npy = _NpyFile(Path(cols.source), "data file")
    if len(npy.shape) != 2 or npy.shape[1] < 2 or npy.dtype.names:
        raise fail(
            f"data file '{cols.source}'",
            "a plain 2-D array with feature columns and a target column to stream",
            f"shape {npy.shape}, dtype {npy.dtype}",
        )
    n, width = npy.shape
    try:
        col = (width - 1) if cols.target is None else int(cols.target) % width
    except ValueError:
        raise fail("target", "a column index for a plain .npy array", repr(cols.target)) from None
    columns = [j for j in range(width) if j != col]
    return npy, col, columns


def trim_heap() -> bool:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``).

    glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB):
    after the first batch, batch-sized buffers come from the heap, whose free holes
    between longer-lived small blocks (metric states, Lightning's bookkeeping) stay
    resident, and a pass of another batch size (evaluation) adds holes of its own. At
    2M x 50 float32 rows a streamed ``train.py`` run grew by 200-400 MB this way
    (``bench/cli_memory.py``). Trimming after each pass releases the holes; the next
    pass faults in only what it uses. (Fixing the mmap threshold instead, which maps
    and unmaps every batch buffer, made the passes 1.7 times slower.)

    Returns:
        Whether it ran (``False`` where the C library is not glibc).
    """
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim(0)
    return True


class TrimmedPasses:
    """A re-iterable of batches that trims the heap (:func:`trim_heap`) when a pass
    starts and when it reaches its last batch. (Not after the last batch: Lightning's
    loops stop asking once they have ``len(batches)`` batches, so code after the last
    ``yield`` never ran under ``train.py``, and the heap grew from pass to pass.)"""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        trim_heap()
        last = len(self.batches) - 1
        for i, batch in enumerate(self.batches):
            if i == last:
                trim_heap()
            yield batch


def streamed_splits(
    npy: _NpyFile,
    col: int,
    columns: list[int],
    split: Split,
    standardize: bool,
    dtype: torch.dtype,
) -> StreamedSource:
    """The train/val/test splits of the streamed file's rows (the same rows as
    ``split.parts`` in memory, each split in file order: a pass is a sum over rows),
    its targets, and the training split's standardization (:func:`_statistics`).

    Raises:
        InputError: non-finite features or targets, standardized features whose
            squares overflow or underflow ``dtype`` (as in memory), a split with no row.
    """
    n = npy.shape[0]
    parts = split.parts(n)
    # one byte per row says its split: no int64 permutation kept beyond this line
    which = np.empty(n, dtype=np.uint8)
    for k, idx in enumerate(parts.values()):
        which[idx.numpy()] = k
    names = list(parts)
    del parts, idx
    y, mean, scale, digest = _statistics(npy, col, columns, which == 0, standardize, dtype)
    yt = torch.from_numpy(y)
    check_finite("y", yt)
    index = np.int32 if n < 2**31 else np.int64
    x, rows = {}, {}
    for k, name in enumerate(names):
        rows[name] = np.flatnonzero(which == k).astype(index)  # increasing
        x[name] = StreamedRows(npy.path, rows[name], columns, mean, scale, dtype)
    features = [f"x{j}" for j in columns]
    return StreamedSource(x, rows, yt, None, None, mean, scale, features, None, 0, digest.hexdigest())


def _statistics(
    npy: _NpyFile, col: int, columns: list[int], train: np.ndarray, standardize: bool, dtype: torch.dtype
):
    """Two passes over a streamed ``.npy``, :data:`~torchglm.data.out_of_core._SPAN`
    rows at a time through one set of buffers: its targets, the finiteness check, the
    data digest and the training rows' column maxima, then their moments
    (:class:`~.features.StreamedStandardization`, the statistics of
    :func:`~.features.standardization`, merged span by span)."""
    n = npy.shape[0]
    y = np.empty(n, dtype=np.float64)
    stats = StreamedStandardization(len(columns))
    digest = hashlib.blake2b(digest_size=16)
    for i, block, x in feature_spans(npy, columns):
        digest.update(block)  # C-contiguous: its bytes, no copy
        check_finite("X", x, i)
        y[i : i + len(block)] = block[:, col]
        stats.add_max(x.numpy()[train[i : i + len(block)]])
        stats.add_range(x)
    if standardize:
        for _, _, x in feature_spans(npy, columns, train):
            stats.add_moments(x.numpy())
    mean, scale = stats.result(standardize)
    stats.check_magnitude(mean, scale, dtype)
    return y, mean, scale, digest
