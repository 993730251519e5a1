"""Reading tabular data files: CSV, NPZ and ``.npy``.

Every reader returns a :class:`Table`: a float64 feature matrix, the target
column (or ``None`` when the file has none, for prediction) and the feature
names. Problems with the file itself (missing, unreadable, ragged rows,
non-numeric cells, an absent target column, mismatched lengths) raise
:class:`~torchglm.InputError` naming the file and the problem; finiteness is
checked where the table becomes tensors (:mod:`torchglm.data.module`).

Layouts:

* **CSV**: a header row of column names, then one numeric row per sample.
  The target is the column named ``target``; every other column is a feature
  unless ``features`` lists the ones to keep.
* **NPZ**: either an ``X`` array (n, d) plus a 1-D array named ``target``
  (default ``"y"``), or one 1-D array per column (then ``target`` names one of them).
* **NPY**: a structured array (named fields, handled like CSV columns) or a
  plain 2-D array whose target is a column index (default ``-1``, the last).
"""

from __future__ import annotations

import csv
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .._validation import fail

__all__ = ["Table", "read_table", "SUFFIXES"]

#: File suffixes :func:`read_table` understands.
SUFFIXES = (".csv", ".npz", ".npy")


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
    path = Path(path)
    if not path.is_file():
        raise fail("data file", "an existing file", f"'{path}' (not found)")
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


def _read_csv(path: Path) -> tuple[list[str], list[np.ndarray]]:
    try:
        with path.open(newline="") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as err:
        raise fail("data file", "a readable CSV text file", f"'{path}' ({err})") from None
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if len(rows) < 2:
        raise fail(
            "data file", "a CSV header row and at least one data row", f"'{path}' with {len(rows)} rows"
        )
    names = [c.strip() for c in rows[0]]
    width = len(names)
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            raise fail(f"data file '{path}' line {i}", f"{width} comma-separated fields", len(row))
    cells = np.array(rows[1:], dtype=object)
    columns = []
    for j, name in enumerate(names):
        try:
            columns.append(np.array([float(c) for c in cells[:, j]], dtype=np.float64))
        except ValueError:
            bad = next(c for c in cells[:, j] if not _is_float(c))
            raise fail(f"data file '{path}' column '{name}'", "numeric values", repr(bad)) from None
    return names, columns


def _is_float(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


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
