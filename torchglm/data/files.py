"""Reading tabular data files: CSV, NPZ and ``.npy``.

Every reader returns a :class:`Table`: a float64 feature matrix, the target
column (or ``None`` when the file has none, for prediction) and the feature
names. Problems with the file itself (missing, unreadable, ragged rows,
non-numeric cells, an absent target column, mismatched lengths) raise
:class:`~torchglm.InputError` naming the file and the problem; finiteness is
checked where the table becomes tensors (:mod:`torchglm.training.data_module`).

Layouts:

* **CSV**: a header row of column names, then one numeric row per sample
  (UTF-8, a byte-order mark ignored, blank lines skipped; parsed by pandas' C
  parser, :func:`iter_csv`, the one CSV reader of training and ``torchglm predict``).
  The target is the column named ``target``; every other column is a feature
  unless ``features`` lists the ones to keep.
* **NPZ**: either an ``X`` array (n, d) plus a 1-D array named ``target``
  (default ``"y"``), or one 1-D array per column (then ``target`` names one of them).
* **NPY**: a structured array (named fields, handled like CSV columns) or a
  plain 2-D array whose target is a column index (default ``-1``, the last).
"""

from __future__ import annotations

import csv
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .._validation import existing_file, fail, optional_import

__all__ = [
    "Table",
    "read_table",
    "read_frame",
    "iter_frames",
    "frame_columns",
    "SUFFIXES",
    "TABLE_SUFFIXES",
    "MISSING_TOKENS",
    "CSVLayout",
    "csv_layout",
    "iter_csv",
]

#: File suffixes :func:`read_table` understands.
SUFFIXES = (".csv", ".npz", ".npy")
#: Files of named, typed columns read by :func:`read_frame` (strings allowed): the
#: suffix picks the format.
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet")
#: The text cells :func:`read_frame` reads as missing values (pandas' and R's usual
#: spellings). ``nan`` and ``inf`` are numbers (non-finite ones, refused where the rows
#: become tensors), not missing cells.
MISSING_TOKENS = ("", "NA", "N/A", "n/a", "NULL", "null", "None", "#N/A", "<NA>")


@dataclass
class Table:
    """Features, target and column names read from a file.

    Attributes:
        x: features, float64 array (n_samples, n_features).
        y: target column (n_samples,), float64, or ``None`` if the file has none.
        feature_names: one name per feature column.
    """

    x: np.ndarray
    y: np.ndarray | None
    feature_names: list[str]


def read_table(
    path: str | Path,
    target: str | int | None = None,
    features: Sequence[str] | None = None,
    require_target: bool = True,
) -> Table:
    """Read a CSV, NPZ or NPY file into a :class:`Table`.

    Args:
        path: the file; its suffix picks the reader.
        target: the target column's name (index for a plain 2-D ``.npy``);
            ``None`` means ``"y"`` for NPZ/CSV-style files and ``-1`` for plain ``.npy``.
        features: names of the feature columns to keep (default: all but the target).
        require_target: if False, a file without the target column is read with
            ``y=None`` (prediction inputs).

    Raises:
        InputError: the file is missing, malformed, lacks the target or a listed
            feature column, or its arrays have different lengths.

    Example:
        >>> table = read_table("data.csv", target="label")  # doctest: +SKIP
    """
    path = existing_file("data file", path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise fail("data file", f"a file ending in one of {list(SUFFIXES)}", f"'{path.name}'")
    if suffix == ".csv":
        names, columns = _read_csv(path)
        return _from_columns(path, names, columns, target, features, require_target)
    try:
        loaded = np.load(path, allow_pickle=False)
        if suffix == ".npz":
            # An NPZ's arrays are read here, one by one: an object array (a pickle,
            # which could run code) is refused by allow_pickle=False only now.
            with loaded:
                arrays = {k: loaded[k] for k in loaded.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise fail("data file", f"a readable {suffix} file", f"'{path}' ({err})") from None
    if suffix == ".npz":
        return _from_npz(path, arrays, target, features, require_target)
    return _from_npy(path, loaded, target, features, require_target)


def _numeric(path: Path, name: str, values: np.ndarray) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise fail(f"data file '{path}' column '{name}'", "numeric values", f"dtype {values.dtype}") from None


#: rows per chunk when a CSV is read in chunks (:func:`iter_csv`): about 0.5 MB of
#: float64 per column, large enough that pandas' per-chunk overhead is negligible.
CHUNK_ROWS = 65536


@dataclass
class CSVLayout:
    """Where a CSV's data start and how wide its rows are (:func:`csv_layout`).

    Attributes:
        names: the header's column names (stripped), or ``None`` for a file without one.
        width: fields per row.
        skip: raw lines before the first data row (the header and blank lines before it).
    """

    names: list[str] | None
    width: int
    skip: int


def _is_float(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _blank(row: list[str]) -> bool:
    return not row or not any(c.strip() for c in row)


def _open_csv(path: Path, role: str):
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") is not part of the first name
    try:
        return path.open(newline="", encoding="utf-8-sig")
    except OSError as err:
        raise fail(role, "a readable CSV text file", f"'{path}' ({err.strerror})") from None


def csv_layout(
    path: str | Path, header: bool | None = True, role: str = "data file", delimiter: str = ","
) -> CSVLayout:
    """The first non-blank row of a CSV: its header (``header=True``), its first data
    row (``False``), or, for ``None``, a header unless every cell of it is a number.

    Raises:
        InputError: an unreadable or empty file; duplicate column names.
    """
    path = Path(path)
    try:
        with _open_csv(path, role) as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            first = next((r for r in reader if not _blank(r)), None)
            line = reader.line_num
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise fail(role, "a readable UTF-8 CSV file", f"'{path}' ({type(err).__name__}: {err})") from None
    if first is None:
        raise fail(role, "a CSV header row and at least one data row", f"'{path}' (empty)")
    if header is None:
        header = not all(_is_float(c) for c in first)
    if not header:
        return CSVLayout(None, len(first), line - 1)
    names = [c.strip() for c in first]
    if len(set(names)) != len(names):
        raise fail(f"{role} '{path}'", "unique column names", names)
    return CSVLayout(names, len(names), line)


def iter_csv(
    path: str | Path,
    layout: CSVLayout,
    chunk_rows: int | None = CHUNK_ROWS,
    role: str = "data file",
) -> Iterator[np.ndarray]:
    """The data rows of a CSV as float64 arrays ``(m, layout.width)``, ``chunk_rows``
    rows at a time (``None``: one array of every row).

    One set of rules for training and prediction: UTF-8 with an optional byte-order
    mark, blank lines skipped, every row ``layout.width`` fields, every cell a number
    as Python's ``float`` reads it (``nan``/``inf`` included: finiteness is checked
    where the rows become tensors). pandas' C parser reads the rows; a chunk it
    refuses, or that holds a NaN (which may be an empty or ``NA`` cell, which this
    reader refuses), is read again by the row-wise reader, which names the line and
    column of the first bad cell.

    Raises:
        InputError: a row of the wrong width, a cell that is not a number, no data rows.
    """
    import pandas as pd

    path = Path(path)
    frames = _pandas_frames(pd, path, layout, chunk_rows)
    n_rows = 0
    while True:
        try:
            with warnings.catch_warnings():
                # a row wider than the header: pandas warns and drops fields; refused here
                warnings.simplefilter("error", pd.errors.ParserWarning)
                rows = next(frames).to_numpy(dtype=np.float64)
        except StopIteration:
            break
        except (ValueError, UnicodeDecodeError, OSError, pd.errors.ParserWarning):
            rows = None  # pandas' parser errors are ValueErrors
        if rows is None or np.isnan(rows).any():
            # The row-wise reader names the bad line, or returns every row (a "nan"
            # cell is a number: check_finite reports it where the rows become tensors).
            rest = _read_rows(path, layout, role)[n_rows:]
            step = chunk_rows or max(len(rest), 1)
            for k in range(0, len(rest), step):
                yield rest[k : k + step]
            n_rows += len(rest)
            break
        if len(rows):
            n_rows += len(rows)
            yield rows
    if n_rows == 0:
        raise fail(role, "a CSV header row and at least one data row", f"'{path}' (no data rows)")


def _pandas_frames(pd, path: Path, layout: CSVLayout, chunk_rows: int | None):
    """pandas' C parser over the data rows: DataFrames of ``chunk_rows`` rows (or one)."""
    frames = pd.read_csv(
        path,
        header=None,
        names=list(range(layout.width)),
        index_col=False,
        skiprows=layout.skip,
        dtype=np.float64,
        encoding="utf-8-sig",
        engine="c",
        skip_blank_lines=True,
        chunksize=chunk_rows,
    )
    if chunk_rows is None:
        yield frames
    else:
        with frames:
            yield from frames


def _read_rows(path: Path, layout: CSVLayout, role: str, delimiter: str = ",", numeric: bool = True):
    """Every data row, read row by row with Python's ``csv`` and ``float``: the slow
    reader that names the first bad line and column (``numeric=False``: only the
    widths are checked, nothing is returned)."""
    names = layout.names or [str(j) for j in range(layout.width)]
    out = []
    sep = {",": "comma", "\t": "tab"}[delimiter]
    try:
        with _open_csv(path, role) as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            for _ in range(layout.skip):
                next(reader, None)  # a quoted field may span lines: skip by rows of csv
            for row in reader:
                if _blank(row):
                    continue
                line = reader.line_num
                if len(row) != layout.width:
                    raise fail(
                        f"{role} '{path}' line {line}", f"{layout.width} {sep}-separated fields", len(row)
                    )
                if not numeric:
                    continue
                try:
                    out.append([float(c) for c in row])
                except ValueError:
                    j = next(j for j, c in enumerate(row) if not _is_float(c))
                    raise fail(
                        f"{role} '{path}' line {line} column '{names[j]}'", "numeric values", repr(row[j])
                    ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise fail(role, "a readable UTF-8 CSV file", f"'{path}' ({type(err).__name__}: {err})") from None
    if not numeric:
        return None
    if not out:
        raise fail(role, "a CSV header row and at least one data row", f"'{path}' (no data rows)")
    return np.array(out, dtype=np.float64).reshape(len(out), layout.width)


def read_frame(path: str | Path, role: str = "data file"):
    """A table file's named columns as one pandas ``DataFrame``, for data with text
    categories and missing cells (:class:`~torchglm.training.features.FeatureSpec`
    turns it into numbers): :func:`iter_frames` in one piece.

    The suffix picks the format: ``.csv`` (comma-separated) and ``.tsv``
    (tab-separated) text, UTF-8 with an optional byte-order mark, a header row of
    column names (stripped), blank lines skipped, every cell kept as its text
    (``str``, stripped; the cells of :data:`MISSING_TOKENS` become ``None``);
    ``.parquet`` (pyarrow) keeps its own column types (missing values ``None``/NaN).

    Raises:
        InputError: a missing or unreadable file, another suffix, no data rows,
            duplicate column names, a text row of another width than the header
            (naming its line).
    """
    return next(iter_frames(path, role, None))


def frame_columns(path: str | Path, role: str = "data file") -> list[str]:
    """The column names of a table file (:func:`read_frame`), read without its rows."""
    path = _table_path(path, role)
    if path.suffix.lower() == ".parquet":
        pq = optional_import("pyarrow.parquet", "reading Parquet files", "parquet")
        try:
            return [str(c).strip() for c in pq.ParquetFile(path).schema_arrow.names]
        except (OSError, ValueError) as err:
            raise fail(role, "a readable Parquet file", f"'{path}' ({type(err).__name__}: {err})") from None
    return csv_layout(path, header=True, role=role, delimiter=_delimiter(path)).names


def _table_path(path: str | Path, role: str) -> Path:
    path = existing_file(role, path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise fail(role, f"a file ending in one of {list(TABLE_SUFFIXES)}", f"'{path.name}'")
    return path


def _delimiter(path: Path) -> str:
    return "\t" if path.suffix.lower() == ".tsv" else ","


def iter_frames(path: str | Path, role: str = "data file", chunk_rows: int | None = CHUNK_ROWS):
    """:func:`read_frame` ``chunk_rows`` rows at a time (``None``: one frame of every
    row); at least one frame. Each frame's index counts rows from 0 across frames.

    Raises:
        InputError: as :func:`read_frame`; a bad row when its frame is read.
    """
    import pandas as pd

    path = _table_path(path, role)
    n = 0
    for frame in _raw_frames(pd, path, role, chunk_rows):
        if len(frame) == 0:
            continue
        frame.index = pd.RangeIndex(n, n + len(frame))
        n += len(frame)
        yield frame
    if n == 0:
        raise fail(role, "a header row and at least one data row", f"'{path}' (no data rows)")


def _raw_frames(pd, path: Path, role: str, chunk_rows: int | None):
    if path.suffix.lower() == ".parquet":
        pq = optional_import("pyarrow.parquet", "reading Parquet files", "parquet")
        try:
            pf = pq.ParquetFile(path)
            names = [str(c).strip() for c in pf.schema_arrow.names]
            if len(set(names)) != len(names):
                raise fail(f"{role} '{path}'", "unique column names", names)
            if chunk_rows is None:
                batches = [pf.read()]
            else:
                batches = pf.iter_batches(batch_size=chunk_rows)
            for batch in batches:
                frame = batch.to_pandas()
                frame.columns = names
                yield frame
        except (OSError, ValueError) as err:
            raise fail(role, "a readable Parquet file", f"'{path}' ({type(err).__name__}: {err})") from None
        return
    delimiter = _delimiter(path)
    layout = csv_layout(path, header=True, role=role, delimiter=delimiter)
    reader = pd.read_csv(
        path,
        sep=delimiter,
        header=None,
        names=layout.names,
        index_col=False,
        skiprows=layout.skip,
        dtype=str,
        keep_default_na=False,
        na_filter=False,
        encoding="utf-8-sig",
        engine="c",
        skip_blank_lines=True,
        chunksize=chunk_rows,
    )
    frames = iter([reader]) if chunk_rows is None else reader
    try:
        while True:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", pd.errors.ParserWarning)
                    frame = next(frames)
                ragged = bool(frame.isna().to_numpy().any())  # a short row's absent fields
            except StopIteration:
                break
            except (ValueError, UnicodeDecodeError, OSError, pd.errors.ParserWarning):
                ragged = True  # a long row, or a file pandas refuses: the row-wise reader says where
            if ragged:
                _read_rows(path, layout, role, delimiter, numeric=False)
                raise fail(role, "a readable UTF-8 text table", f"'{path}'")
            frame = frame.apply(lambda c: c.str.strip())
            yield frame.astype(object).where(~frame.isin(MISSING_TOKENS), None)
    finally:
        # also when the caller stops early (a streamed split past its last row)
        if chunk_rows is not None:
            reader.close()


def _read_csv(path: Path) -> tuple[list[str], list[np.ndarray]]:
    layout = csv_layout(path, header=True)
    rows = next(iter_csv(path, layout, chunk_rows=None))
    return layout.names, [rows[:, j] for j in range(layout.width)]


def _from_columns(
    path: Path, names: list[str], columns: list[np.ndarray], target, features, require_target: bool
) -> Table:
    target = "y" if target is None else str(target)
    if len(set(names)) != len(names):
        raise fail(f"data file '{path}'", "unique column names", names)
    lengths = {n: len(c) for n, c in zip(names, columns)}
    if len(set(lengths.values())) > 1:
        raise fail(f"data file '{path}'", "columns of the same length", lengths)
    y = None
    if target in names:
        y = columns[names.index(target)]
    elif require_target:
        raise fail("target", f"a column of '{path}' (one of {names})", repr(target))
    keep = [n for n in names if n != target] if features is None else list(features)
    missing = [n for n in keep if n not in names]
    if missing:
        raise fail("features", f"columns of '{path}' (one of {names})", missing)
    if not keep:
        raise fail(f"data file '{path}'", "at least one feature column besides the target", names)
    x = np.stack([columns[names.index(n)] for n in keep], axis=1)
    return Table(x, y, keep)


def _from_npz(path: Path, arrays: dict[str, np.ndarray], target, features, require_target: bool) -> Table:
    target = "y" if target is None else str(target)
    if "X" in arrays:
        x = _numeric(path, "X", arrays["X"])
        if x.ndim != 2:
            raise fail(
                f"data file '{path}' array 'X'", "a 2-D array (n_samples, n_features)", f"shape {x.shape}"
            )
        names = [f"x{j}" for j in range(x.shape[1])]
        y = None
        if target in arrays:
            y = _numeric(path, target, arrays[target])
            if y.ndim != 1:
                raise fail(f"data file '{path}' array '{target}'", "a 1-D target array", f"shape {y.shape}")
            if len(y) != len(x):
                raise fail(
                    f"data file '{path}'",
                    "X and the target with the same number of rows",
                    f"X={len(x)}, {target}={len(y)}",
                )
        elif require_target:
            raise fail("target", f"an array of '{path}' (one of {sorted(arrays)})", repr(target))
        if features is not None:
            if all(n in names for n in features):
                x = x[:, [names.index(n) for n in features]]
            elif len(features) != x.shape[1]:
                # An 'X' array carries no column names: its columns are taken in the
                # order of ``features`` when the widths agree.
                raise fail(f"data file '{path}' array 'X'", f"{len(features)} feature columns", x.shape[1])
            names = list(features)
        return Table(x, y, names)
    names = list(arrays)
    columns = []
    for n in names:
        col = _numeric(path, n, arrays[n])
        if col.ndim != 1:
            raise fail(
                f"data file '{path}' array '{n}'", "an 'X' array or 1-D column arrays", f"shape {col.shape}"
            )
        columns.append(col)
    return _from_columns(path, names, columns, target, features, require_target)


def _from_npy(path: Path, arr: np.ndarray, target, features, require_target: bool) -> Table:
    if arr.dtype.names:
        names = list(arr.dtype.names)
        columns = [_numeric(path, n, arr[n]) for n in names]
        return _from_columns(path, names, columns, target, features, require_target)
    x = _numeric(path, "array", arr)
    if x.ndim != 2 or x.shape[1] < 1 + require_target:
        raise fail(
            f"data file '{path}'", "a 2-D array with feature columns and a target column", f"shape {x.shape}"
        )
    names = [f"x{j}" for j in range(x.shape[1])]
    if target is None:
        col = x.shape[1] - 1
    else:
        try:
            col = int(target) % x.shape[1]
        except ValueError:
            raise fail("target", "a column index for a plain .npy array", repr(target)) from None
    # A prediction input may omit the target column: keep every column then.
    keep = [j for j in range(x.shape[1]) if j != col or not require_target]
    if features is not None:
        missing = [n for n in features if n not in names]
        if missing:
            raise fail("features", f"column names x0..x{x.shape[1] - 1} for a plain .npy array", missing)
        keep = [names.index(n) for n in features]
    y = x[:, col] if require_target else None
    return Table(x[:, keep], y, [names[j] for j in keep])
