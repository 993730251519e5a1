"""A plain 2-D ``.npy`` file larger than the data module's memory budget, streamed from
disk: which files stream (:func:`streams`), the file and its columns
(:func:`streamed_source`), and its splits with the training rows' standardization
(:func:`streamed_splits`), each split a :class:`~torchglm.data.out_of_core.StreamedRows`
read a batch at a time by :class:`~torchglm.data.out_of_core.StreamedBatches`.

What stays in memory is the targets (float64, every row, for the target gate, and
each split's own), each split's file row numbers (int32 below 2**31 rows) and the
statistics; the features are read a chunk at a time.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .._validation import check_finite, fail
from ..data.out_of_core import StreamedRows, _NpyFile
from .features import FeatureSpec
from .sources import Columns
from .splits import Split

__all__ = ["Streamed", "TrimmedPasses", "streams", "streamed_source", "streamed_splits", "trim_heap"]


_NAMES = ("train", "val", "test")


def streams(source: str, memory_budget: int) -> bool:
    """A ``.npy`` file larger than ``memory_budget`` is streamed."""
    path = Path(source)
    return path.suffix.lower() == ".npy" and path.is_file() and path.stat().st_size > memory_budget


def streamed_source(cols: Columns, spec: FeatureSpec, memory_budget: int) -> tuple[_NpyFile, int, list[int]]:
    """The streamed ``.npy`` file, its target column and its feature columns (the
    data options a streamed file cannot take are refused)."""
    if cols.features is not None or cols.weight or cols.offset or cols.dataset_options:
        raise fail(
            "features/weight/offset",
            f"unset for a .npy file streamed from disk (larger than data.memory_budget={memory_budget})",
            (cols.features, cols.weight, cols.offset),
        )
    if spec.categorical or spec.missing != "error":
        raise fail("categorical/missing", "a .csv, .tsv or .parquet table", repr(cols.source))
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
    """A re-iterable of batches that trims the heap (:func:`trim_heap`) after each pass."""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        yield from self.batches
        trim_heap()


@dataclass
class Streamed:
    """The splits of a streamed file (:func:`streamed_splits`)."""

    splits: dict[str, tuple[StreamedRows, torch.Tensor]]
    y: torch.Tensor  # every row's target, file order
    mean: torch.Tensor
    scale: torch.Tensor
    digest: str  # BLAKE2b of the file's rows
    feature_names: list[str]


def streamed_splits(
    npy: _NpyFile,
    col: int,
    columns: list[int],
    split: Split,
    standardize: bool,
    dtype: torch.dtype,
    chunk: int = 65536,
) -> Streamed:
    """The train/val/test splits of the streamed file's rows (the same rows as
    ``split.parts`` in memory, each split in file order: a pass is a sum over rows),
    its targets, and the training split's standardization (:func:`_statistics`,
    reading ``chunk`` rows at a time: the chunks are those of the Chan merge).

    Raises:
        InputError: non-finite features or targets, a split with no row.
    """
    n = npy.shape[0]
    # one byte per row says its split: no int64 permutation kept beyond this line
    which = np.empty(n, dtype=np.uint8)
    for k, idx in enumerate(split.parts(n).values()):
        which[idx.numpy()] = k
    y, mean, scale, digest = _statistics(npy, col, columns, which == 0, standardize, chunk)
    yt = torch.from_numpy(y)
    check_finite("y", yt)
    index = np.int32 if n < 2**31 else np.int64
    splits = {}
    for k, name in enumerate(_NAMES):
        rows = np.flatnonzero(which == k).astype(index)  # increasing
        splits[name] = (StreamedRows(npy.path, rows, columns, mean, scale, dtype), yt[rows])
    return Streamed(splits, yt, mean, scale, digest.hexdigest(), [f"x{j}" for j in columns])


def _statistics(
    npy: _NpyFile, col: int, columns: list[int], train: np.ndarray, standardize: bool, chunk: int
):
    """Two passes over a streamed ``.npy``: its targets, the finiteness check, the data
    digest, then the training rows' standardization (the statistics of
    :func:`~.features.standardization`: column maxima ``m_j``, then the mean and variance
    of ``u = x / m`` merged chunk by chunk, Chan, Golub & LeVeque 1983)."""
    n, d = npy.shape[0], len(columns)
    y = np.empty(n, dtype=np.float64)
    m = np.zeros(d)
    digest = hashlib.blake2b(digest_size=16)
    with open(npy.path, "rb") as f:
        for i in range(0, n, chunk):
            block = npy.rows(f, i, min(i + chunk, n))
            digest.update(block)  # C-contiguous: its bytes, no copy
            x = np.asarray(block[:, columns], dtype=np.float64)
            check_finite("X", torch.from_numpy(x), i)
            y[i : i + len(block)] = block[:, col]
            t = train[i : i + len(block)]
            if t.any():
                m = np.maximum(m, np.abs(x[t]).max(0))
        m = np.where(m > 0, m, 1.0)
        if not standardize:
            return y, torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64), digest
        count, mean_u, m2 = 0, np.zeros(d), np.zeros(d)
        for i in range(0, n, chunk):
            block = npy.rows(f, i, min(i + chunk, n))
            t = np.flatnonzero(train[i : i + len(block)])
            if len(t) == 0:
                continue
            u = block[np.ix_(t, columns)].astype(np.float64) / m
            k, mu = len(u), u.mean(0)
            delta = mu - mean_u
            m2 += ((u - mu) ** 2).sum(0) + delta**2 * count * k / (count + k)
            mean_u += delta * k / (count + k)
            count += k
    mean, std = torch.from_numpy(mean_u * m), torch.from_numpy(np.sqrt(m2 / count) * m)
    return y, mean, torch.where(std > 0, std, torch.ones_like(std)), digest
