"""Batches read from disk a chunk at a time: data larger than memory (``.npy``, Parquet, CSV).

Each class is a re-iterable of :class:`~torchglm.data.batches.Batch`; every pass
re-reads the file chunk by chunk, so peak memory is one chunk, whatever the file
size. They plug into the same pass-based fitters as in-memory data
(``run_passes(model.make_fitter(...), batches, max_passes)``), and into several
processes: with ``torch.distributed`` initialized each process reads only its
contiguous shard of the rows (:func:`torchglm.distributed.shard_range`).
"""

from __future__ import annotations

import os
import tempfile
import weakref
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from .._validation import check_finite, check_positive, existing_file, fail, optional_import
from ..distributed import shard_range
from .batches import Batch
from .files import csv_layout, iter_csv

__all__ = [
    "NpyBatches",
    "ParquetBatches",
    "CSVBatches",
    "StreamedRows",
    "TemporaryNpy",
    "feature_spans",
    "StreamedBatches",
    "file_bytes",
    "parse_size",
    "npz_row_blocks",
]


def _existing(path: str | Path, what: str) -> Path:
    return existing_file(what, path)


def _to_batch(x: np.ndarray, y: np.ndarray, dtype: torch.dtype, device, classification: bool) -> Batch:
    xt = torch.as_tensor(np.array(x), dtype=dtype, device=device)
    yt = torch.as_tensor(np.array(y), device=device)
    yt = yt.long() if classification else yt.to(dtype)
    check_finite("X", xt)
    return Batch(xt, yt)


def _skip_npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Read a ``.npy`` stream's magic and header: (shape, Fortran order, dtype)."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


class _NpyFile:
    """A 2-D or 1-D C-ordered ``.npy`` file read by row spans with positioned reads.

    Like a read-only memory map it never loads the whole array, but the pages it
    reads are not kept mapped, so the process's resident memory stays at one chunk
    (a memory map's touched pages count as resident until the kernel evicts them).
    """

    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what
        with open(path, "rb") as f:
            try:
                shape, fortran, dtype = _skip_npy_header(f)
            except ValueError as exc:
                raise fail(what, "a .npy file", f"{path.name} ({exc})") from None
            self.offset = f.tell()
        if fortran:
            raise fail(what, "a C-ordered .npy array", "Fortran order")
        if dtype.hasobject:
            raise fail(what, "a numeric .npy array", f"dtype {dtype}")
        self.shape, self.dtype = shape, dtype
        self.row_items = int(np.prod(shape[1:])) if len(shape) > 1 else 1

    def rows(self, f, start: int, stop: int) -> np.ndarray:
        f.seek(self.offset + start * self.row_items * self.dtype.itemsize)
        flat = np.fromfile(f, dtype=self.dtype, count=(stop - start) * self.row_items)
        return flat.reshape((stop - start,) + tuple(self.shape[1:]))

    def rows_into(self, f, start: int, stop: int, buffer: np.ndarray) -> np.ndarray:
        """Rows ``start:stop`` read into the leading rows of ``buffer`` (of this file's
        dtype and row shape, at least ``stop - start`` rows), returned as a view: a pass
        that reads every span into one buffer allocates nothing per span, so the
        allocator has no span-sized holes to keep (``bench/cli_memory.py``)."""
        out = buffer[: stop - start]
        f.seek(self.offset + start * self.row_items * self.dtype.itemsize)
        if f.readinto(memoryview(out).cast("B")) != out.nbytes:
            raise fail(self.what, f"a .npy file of shape {self.shape}", f"{self.path.name} cut short")
        return out


class NpyBatches:
    """Batches read from ``.npy`` files a chunk at a time (out-of-core).

    Args:
        x_path: ``.npy`` file of shape (n_samples, n_features), C order.
        y_path: ``.npy`` file of shape (n_samples,).
        batch_size: rows read per batch.
        dtype: dtype of the feature tensors.
        classification: targets become ``long`` labels (else ``dtype``).
        device: where batches are placed.
        shard: read only this process's rows when ``torch.distributed`` is initialized.

    Raises:
        InputError: for a missing or malformed file or mismatched shapes.
    """

    def __init__(
        self,
        x_path,
        y_path,
        batch_size: int = 65536,
        dtype=torch.float64,
        classification: bool = True,
        device="cpu",
        shard: bool = True,
    ):
        check_positive("batch_size", batch_size)
        self.x = _NpyFile(_existing(x_path, "x_path"), "x_path")
        self.y = _NpyFile(_existing(y_path, "y_path"), "y_path")
        if len(self.x.shape) != 2:
            raise fail("x_path", "a 2-D array (n_samples, n_features)", f"shape {self.x.shape}")
        if self.y.shape != (self.x.shape[0],):
            raise fail("y_path", f"a 1-D array of length {self.x.shape[0]}", f"shape {self.y.shape}")
        self.batch_size, self.dtype, self.device = int(batch_size), dtype, device
        self.classification = classification
        self.start, self.stop = shard_range(self.x.shape[0]) if shard else (0, self.x.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.x.shape[1])

    def __len__(self) -> int:
        return -(-(self.stop - self.start) // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        with open(self.x.path, "rb") as fx, open(self.y.path, "rb") as fy:
            for i in range(self.start, self.stop, self.batch_size):
                j = min(i + self.batch_size, self.stop)
                yield _to_batch(
                    self.x.rows(fx, i, j), self.y.rows(fy, i, j), self.dtype, self.device, self.classification
                )


class _TableBatches:
    """Shared logic of row-chunked table files with a named target column: a subclass
    opens its file and counts the rows (``_open``) and yields DataFrame chunks
    (``_frames``)."""

    def __init__(
        self,
        path,
        target: str,
        batch_size: int = 65536,
        dtype=torch.float64,
        classification: bool = True,
        device="cpu",
        shard: bool = True,
    ):
        check_positive("batch_size", batch_size)
        self.path = _existing(path, "path")
        self.target, self.batch_size = target, int(batch_size)
        self.dtype, self.classification, self.device, self.shard = dtype, classification, device, shard
        self.n_rows = self._open()

    def _open(self) -> int:
        raise NotImplementedError

    def _frames(self):
        raise NotImplementedError

    def __iter__(self) -> Iterator[Batch]:
        # A chunk's rows are kept when they fall in this process's shard of the
        # row count; chunks are read in order, so shards partition the file.
        start, stop = shard_range(self.n_rows) if self.shard else (0, self.n_rows)
        offset = 0
        for frame in self._frames():
            lo, hi = max(start - offset, 0), min(stop - offset, len(frame))
            offset += len(frame)
            if lo >= hi:
                continue
            part = frame.iloc[lo:hi]
            if self.target not in part.columns:
                raise fail(
                    "target", f"a column of {self.path.name} ({list(part.columns)})", repr(self.target)
                )
            x = part.drop(columns=[self.target]).to_numpy(dtype=np.float64)
            yield _to_batch(x, part[self.target].to_numpy(), self.dtype, self.device, self.classification)


class ParquetBatches(_TableBatches):
    """Batches from a Parquet file, read ``batch_size`` rows at a time with pyarrow."""

    def _open(self) -> int:
        pq = optional_import("pyarrow.parquet", "ParquetBatches", "parquet")
        self._file = pq.ParquetFile(self.path)
        return self._file.metadata.num_rows

    def _frames(self):
        for rb in self._file.iter_batches(batch_size=self.batch_size):
            yield rb.to_pandas()


class CSVBatches(_TableBatches):
    """Batches from a CSV file with a header row, read in chunks by the library's one
    CSV reader (:func:`~torchglm.data.files.iter_csv`, the rules of ``train.py`` and
    ``torchglm predict``: a byte-order mark ignored, blank lines skipped, every row the
    header's width, every cell a number). The rows are counted (for the shards) by
    reading the file once when the batches are made, so a malformed row is reported
    before a fit starts."""

    def _open(self) -> int:
        self._layout = csv_layout(self.path, header=True, role="path")
        return sum(len(rows) for rows in iter_csv(self.path, self._layout, self.batch_size, role="path"))

    def _frames(self):
        import pandas as pd  # a core dependency (the one CSV reader's)

        for rows in iter_csv(self.path, self._layout, self.batch_size, role="path"):
            yield pd.DataFrame(rows, columns=self._layout.names)


def npz_row_blocks(
    path: str | Path, members: dict[str, tuple[int, ...]], chunk_rows: int
) -> Iterator[list[np.ndarray]] | None:
    """Blocks of ``chunk_rows`` rows of some arrays of an NPZ, read in step from their
    zip members (compressed or not): peak memory is one block, not the file.

    Args:
        path: the ``.npz`` file.
        members: each array's name and the shape of one of its rows (``()`` for a
            column, ``(d,)`` for a matrix of ``d`` columns).
        chunk_rows: rows per block.

    Returns:
        The blocks (a list of arrays each, in the order of ``members``), or ``None``
        when the arrays are not all such C-ordered numeric arrays of one length (a
        missing name, an object or Fortran-ordered array, another row shape): the
        caller then reads the file whole, through the reader whose messages say what
        is wrong.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            headers = []
            for name in members:
                if name + ".npy" not in names:
                    return None
                with zf.open(name + ".npy") as f:
                    headers.append(_skip_npy_header(f))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None
    for (shape, fortran, dtype), row in zip(headers, members.values()):
        if fortran or dtype.kind not in "iuf" or len(shape) < 1 or tuple(shape[1:]) != tuple(row):
            return None
    lengths = {shape[0] for shape, _, _ in headers}
    if len(lengths) != 1:
        return None
    return _npz_blocks(path, list(members), headers, lengths.pop(), chunk_rows)


def _npz_blocks(
    path: Path, members: list[str], headers, n: int, chunk_rows: int
) -> Iterator[list[np.ndarray]]:
    with zipfile.ZipFile(path) as zf:
        files = [zf.open(m + ".npy") for m in members]
        try:
            for f in files:  # past the header: the rows follow, in C order
                _skip_npy_header(f)
            step = max(chunk_rows, 1)
            for start in range(0, max(n, 1), step):
                m = min(step, n - start)
                block = []
                for f, (shape, _, dtype) in zip(files, headers):
                    row = int(np.prod(shape[1:], dtype=np.int64))
                    data = f.read(m * row * dtype.itemsize)
                    block.append(np.frombuffer(data, dtype=dtype).reshape((m, *shape[1:])))
                yield block
        finally:
            for f in files:
                f.close()


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def parse_size(value, name: str = "memory_budget") -> int:
    """A number of bytes from an integer or a string such as ``"2GB"``, ``"512MiB"``.

    Raises:
        InputError: anything else, or a size that is not positive.
    """
    import re

    if isinstance(value, bool):
        raise fail(name, "a number of bytes or a size such as '2GB'", repr(value))
    if isinstance(value, (int, float)):
        size = value
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
        if m is None or m.group(2).upper() not in _UNITS:
            raise fail(name, "a number of bytes or a size such as '2GB' or '512MiB'", repr(value))
        size = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not size > 0:
        raise fail(name, "a positive size", repr(value))
    return int(size)


#: file rows read at a time by :meth:`StreamedRows.read` (and the streamed ``.npy``'s
#: statistics): buffers of a few MB, reused from span to span
_SPAN = 4096


class _Spans:
    """The buffers a pass over a ``.npy`` file reads its spans into: ``raw`` (a span of
    file rows), ``picked`` (the rows kept, in the file's dtype) and ``work`` (their
    features in float64). A pass that allocated them per span (or per 65,536-row
    chunk) left the allocator span-sized holes between longer-lived blocks: a
    streamed ``train.py`` run grew by 150-200 MB that way (``bench/cli_memory.py``)."""

    def __init__(self, file: "_NpyFile", n_features: int):
        shape = (_SPAN, *file.shape[1:])
        self.raw = np.empty(shape, dtype=file.dtype)
        self.picked = np.empty(shape, dtype=file.dtype)
        self.work = torch.empty((_SPAN, n_features), dtype=torch.float64)

    def features(self, block: np.ndarray, rows: np.ndarray | None, cols) -> torch.Tensor:
        """The feature columns ``cols`` (:func:`_column_index`) of ``block``'s rows
        ``rows`` (every row: ``None``) in float64, in ``work`` (a view the next call
        overwrites)."""
        if rows is not None:
            block = np.take(block, rows, axis=0, out=self.picked[: len(rows)])
        return self.work[: len(block)].copy_(torch.from_numpy(block)[:, cols])


def _column_index(columns: list[int]) -> slice | list[int]:
    """``columns`` as a slice when they are consecutive (a view, no copy), else the list."""
    if columns and columns == list(range(columns[0], columns[0] + len(columns))):
        return slice(columns[0], columns[0] + len(columns))
    return columns


def feature_spans(
    npy: _NpyFile, columns: list[int], keep: np.ndarray | None = None
) -> Iterator[tuple[int, np.ndarray, torch.Tensor]]:
    """A plain 2-D ``.npy`` file read :data:`_SPAN` rows at a time through one set of
    buffers (:class:`_Spans`): per span, its first row, its raw rows and the float64
    ``columns`` of its rows where ``keep`` is true (``None``: every row); a span with
    no kept row is not read. Both arrays are views the next span overwrites."""
    spans, cols, n = _Spans(npy, len(columns)), _column_index(columns), npy.shape[0]
    with open(npy.path, "rb") as f:
        for i in range(0, n, _SPAN):
            stop = min(i + _SPAN, n)
            rows = None if keep is None else np.flatnonzero(keep[i:stop])
            if rows is not None and not len(rows):
                continue
            block = npy.rows_into(f, i, stop, spans.raw)
            yield i, block, spans.features(block, rows, cols)


class StreamedRows:
    """Some rows of a plain 2-D ``.npy`` file's feature columns, standardized, read
    from disk when asked for (:class:`StreamedBatches`): what an in-memory split's
    feature tensor is to :class:`~torchglm.data.batches.TensorBatches`.

    ``rows`` are file row indices in increasing order (any integer dtype); ``z = (x - mean) / scale``
    is computed in float64 and cast to ``dtype``, as the in-memory path does.
    ``keep``: an object these rows (and their :meth:`subset` s) keep alive, the
    :class:`TemporaryNpy` of a file written for them.
    """

    def __init__(
        self, path: Path, rows: np.ndarray, columns: list[int], mean, scale, dtype: torch.dtype, keep=None
    ):
        self.file, self.keep = _NpyFile(Path(path), "source"), keep
        rows = np.asarray(rows)
        # row numbers stay in their integer dtype (int32 below 2**31 rows: half the memory)
        self.rows = rows if rows.dtype.kind in "iu" else rows.astype(np.int64)
        self.columns = list(columns)
        self.mean, self.scale, self.dtype = mean, scale, dtype

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.rows), len(self.columns))

    def __len__(self) -> int:
        return len(self.rows)

    def subset(self, start: int, stop: int) -> "StreamedRows":
        return StreamedRows(
            self.file.path, self.rows[start:stop], self.columns, self.mean, self.scale, self.dtype, self.keep
        )

    def read(self, f, start: int, stop: int, spans: "_Spans | None" = None) -> torch.Tensor:
        """Positions ``start:stop`` of these rows, standardized: the file is read
        :data:`_SPAN` rows at a time into the buffers of ``spans`` (made here when not
        given; :meth:`blocks` makes one per pass), the rows among them picked,
        and ``(x - mean) / scale`` formed in float64 in place, then cast."""
        r = self.rows[start:stop]
        out = torch.empty((len(r), len(self.columns)), dtype=self.dtype)
        if not len(r):
            return out
        spans = spans or _Spans(self.file, len(self.columns))
        cols = _column_index(self.columns)
        a, last = 0, int(r[-1])
        for lo in range(int(r[0]), last + 1, _SPAN):
            hi = min(lo + _SPAN, last + 1)
            b = a + int(np.searchsorted(r[a:], hi))
            if b == a:
                continue
            block = self.file.rows_into(f, lo, hi, spans.raw)
            z = spans.features(block, r[a:b] - lo, cols)
            out[a:b] = z.sub_(self.mean).div_(self.scale)
            a = b
        return out

    def blocks(self, batch_size: int) -> Iterator[torch.Tensor]:
        """These rows in order, ``batch_size`` at a time: each batch read through one
        set of span buffers for the pass."""
        spans = _Spans(self.file, len(self.columns))
        with open(self.file.path, "rb") as f:
            for i in range(0, len(self.rows), batch_size):
                yield self.read(f, i, min(i + batch_size, len(self.rows)), spans)

    def __getitem__(self, index) -> torch.Tensor:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("StreamedRows supports contiguous slices only")
        start, stop, _ = index.indices(len(self.rows))
        with open(self.file.path, "rb") as f:
            return self.read(f, start, max(start, stop))


#: cells of a table file parsed per chunk when it is streamed (the scan passes of
#: :mod:`torchglm.training.streamed_table`):
#: a text chunk holds each cell as a Python string (about 60 bytes, and the reader
#: makes a few copies), so the rows per chunk shrink as the table widens. At 2**18
#: cells a streamed fit of a 22-column CSV peaks about 90 MB above the imports,
#: against 220 MB at 2**20, in the same time (2**16: 45 MB, slower).
TABLE_CHUNK_CELLS = 2**18


def table_chunk_rows(n_columns: int) -> int:
    """Rows per chunk of a streamed table of ``n_columns`` columns (:data:`TABLE_CHUNK_CELLS`)."""
    return max(TABLE_CHUNK_CELLS // max(n_columns, 1), 1)


def file_bytes(path: str | Path) -> int:
    """The bytes a data file's values take: a Parquet file's uncompressed column
    data (from its metadata; the file itself is compressed), else its size on disk."""
    path = Path(path)
    if path.suffix.lower() == ".parquet":
        pq = optional_import("pyarrow.parquet", "reading Parquet files", "parquet")
        try:
            meta = pq.ParquetFile(path).metadata
            return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        except (OSError, ValueError):
            pass  # not a Parquet file: its reader says so
    return path.stat().st_size


class TemporaryNpy:
    """A temporary 2-D ``.npy`` file of ``n_rows x n_cols`` values of ``dtype``, written
    in row order a block at a time (:meth:`write`, then :meth:`close`) and read back
    as :class:`StreamedRows`. It is written through a plain file, never mapped, so the
    pages written are the page cache's, not this process's resident memory.

    The file is removed by :meth:`remove`, when this object is garbage collected
    (the :class:`StreamedRows` reading it keep it alive), or at the interpreter's exit.

    Args:
        n_rows, n_cols: the array's shape.
        dtype: its dtype.
        directory: where (default: :func:`tempfile.gettempdir`, ``TMPDIR``).
    """

    def __init__(self, n_rows: int, n_cols: int, dtype=np.float64, directory: str | None = None):
        fd, name = tempfile.mkstemp(prefix="torchglm-", suffix=".npy", dir=directory)
        self.path, self.shape, self.dtype = Path(name), (int(n_rows), int(n_cols)), np.dtype(dtype)
        self._removed = weakref.finalize(self, _unlink, self.path)
        self._file = os.fdopen(fd, "wb")
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": self.shape,
        }
        np.lib.format.write_array_header_1_0(self._file, header)
        self._rows = 0

    def write(self, block: np.ndarray) -> None:
        """Append rows (``(m, n_cols)``, cast to the file's dtype)."""
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.ndim != 2 or block.shape[1] != self.shape[1] or self._rows + len(block) > self.shape[0]:
            raise ValueError(f"rows of width {self.shape[1]}, {self.shape[0]} in all: got {block.shape}")
        self._file.write(memoryview(block).cast("B"))
        self._rows += len(block)

    def close(self) -> None:
        """Finish writing (every row written)."""
        self._file.close()
        if self._rows != self.shape[0]:
            raise ValueError(f"{self.shape[0]} rows to write, {self._rows} written")

    def remove(self) -> None:
        """Close and delete the file (once; later calls do nothing)."""
        self._file.close()
        self._removed()


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


class StreamedBatches:
    """Consecutive batches of a :class:`StreamedRows` split with its in-memory targets
    (and optional weights/offsets): each batch read from the file when the pass
    reaches it, so a pass holds one batch, whatever the file's size. Not shuffled (a
    pass is a sum)."""

    def __init__(self, x: StreamedRows, y, weight=None, offset=None, batch_size: int = 65536):
        check_positive("batch_size", batch_size)
        self.x, self.y, self.weight, self.offset = x, y, weight, offset
        self.batch_size = int(batch_size)

    def __len__(self) -> int:
        return -(-len(self.x) // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        i = 0
        for x in self.x.blocks(self.batch_size):
            j = i + len(x)
            yield Batch(
                x,
                self.y[i:j],
                None if self.weight is None else self.weight[i:j],
                None if self.offset is None else self.offset[i:j],
            )
            i = j
