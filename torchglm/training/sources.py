"""What a data module reads: a built-in dataset, a numeric ``.npz``/``.npy`` file or a
CSV/TSV/Parquet table, as NumPy arrays with their column names (:func:`read_source`).

Tables go through the :class:`~.features.FeatureSpec` (missing cells, categories),
fitted on the training split's rows; text labels become codes, their sorted distinct
values the classes (scikit-learn's ``classes_``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .._validation import fail
from ..data.datasets import load_dataset
from ..data.files import SUFFIXES, TABLE_SUFFIXES, read_frame, read_table
from .features import FeatureSpec, LabelCodes, numeric_column
from .streamed_table import feature_roles, table_roles

__all__ = ["Columns", "Loaded", "check_file_options", "read_source"]


@dataclass
class Columns:
    """Which columns of a file a data module uses (the data module's arguments)."""

    source: str
    target: str | int | None = None
    features: Sequence[str] | None = None
    weight: str | None = None
    offset: str | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)

    @property
    def special(self) -> dict[str, str]:
        """``{"weight": column, "offset": column}`` of the columns that are set."""
        return {r: c for r, c in (("weight", self.weight), ("offset", self.offset)) if c is not None}


@dataclass
class Loaded:
    """The arrays read from a source, before validation, split and standardization."""

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None
    offset: np.ndarray | None
    feature_names: list[str]
    task: str | None
    n_classes: int | None
    classes: list | None = None
    n_dropped: int = 0


def read_source(
    cols: Columns,
    spec: FeatureSpec,
    task: str | None,
    n_classes: int | None,
    train_rows: Callable[[int], np.ndarray],
) -> Loaded:
    """Read ``cols.source``: a built-in dataset's name, else a file by its suffix.

    Args:
        cols: the columns to use.
        spec: categorical columns and the missing-value policy (tables only).
        task, n_classes: the declared ones (a built-in dataset brings its own).
        train_rows: the training split's row indices of ``n`` rows (where a table's
            imputation values come from).

    Raises:
        InputError: a missing file or column, options the source cannot take.
    """
    suffix = Path(cols.source).suffix.lower()
    if suffix in (*SUFFIXES, *TABLE_SUFFIXES) or Path(cols.source).exists():
        check_file_options(cols, spec)
        if suffix in TABLE_SUFFIXES:
            return _read_frame(cols, spec, task, n_classes, train_rows)
        return _read_numeric(cols, task, n_classes)
    if cols.target is not None or cols.features is not None or cols.special or spec.categorical:
        raise fail(
            "target/features/weight/offset/categorical",
            f"unset for the built-in dataset '{cols.source}' (a data file must end in one of "
            f"{[*TABLE_SUFFIXES, '.npz', '.npy']})",
            (cols.target, cols.features, cols.weight, cols.offset),
        )
    ds = load_dataset(cols.source, **cols.dataset_options)
    if task is not None and task != ds.task:
        raise fail("task", f"'{ds.task}' for the built-in dataset '{cols.source}'", repr(task))
    n_classes = n_classes if n_classes is not None else ds.n_classes
    return Loaded(ds.x, ds.y, ds.weight, ds.offset, ds.feature_names, ds.task, n_classes)


def check_file_options(cols: Columns, spec: FeatureSpec) -> None:
    """The options a data file cannot take, read whole or streamed: dataset options, and
    for a numeric (non-table) file categorical columns or a missing-value policy.

    Raises:
        InputError: naming the option.
    """
    if cols.dataset_options:
        raise fail("dataset_options", "no options for a data file", cols.dataset_options)
    suffix = Path(cols.source).suffix.lower()
    if suffix not in TABLE_SUFFIXES and (spec.categorical or spec.missing != "error"):
        raise fail(
            "categorical/missing",
            f"a .csv, .tsv or .parquet table for categorical columns or a missing-value policy (numeric {suffix} files have neither)",
            repr(cols.source),
        )


def _read_numeric(cols: Columns, task: str | None, n_classes: int | None) -> Loaded:
    """A numeric ``.npz``/``.npy`` file (:func:`~torchglm.data.files.read_table`), its
    weight/offset and feature columns as a table's (:func:`~.streamed_table.feature_roles`)."""
    special = cols.special
    table = read_table(cols.source, cols.target, None if special else cols.features)
    names, x = table.feature_names, table.x
    columns = {}
    if special:
        keep = feature_roles(names, cols.source, cols.features, special)
        columns = {role: x[:, names.index(col)] for role, col in special.items()}
        x = x[:, [names.index(n) for n in keep]]
        names = keep
    return Loaded(x, table.y, columns.get("weight"), columns.get("offset"), names, task, n_classes)


def _drop_or_check_missing(frame, spec: FeatureSpec, features: list[str], reserved: list[str], where: str):
    """The missing-value policy's first step: ``(frame, rows dropped)``."""
    if spec.missing == "drop":
        drop = spec.check_missing(frame, features + reserved, where)
        if drop.all():
            raise fail(where, "rows without missing cells (data.missing: drop)", "none")
        if drop.any():
            frame = frame[~drop].reset_index(drop=True)
        return frame, int(drop.sum())
    # the target, weight and offset are never imputed
    FeatureSpec(missing="error").check_missing(frame, reserved, where)
    if spec.missing == "error":
        spec.check_missing(frame, features, where)
    return frame, 0


def _read_frame(
    cols: Columns,
    spec: FeatureSpec,
    task: str | None,
    n_classes: int | None,
    train_rows: Callable[[int], np.ndarray],
) -> Loaded:
    """A CSV/TSV/Parquet table: its columns' roles (:func:`~.streamed_table.table_roles`),
    the features through the :class:`~.features.FeatureSpec`, the labels through
    :class:`~.features.LabelCodes` (the code a streamed table uses, so the two paths
    cannot drift)."""
    where = f"data file '{cols.source}'"
    frame = read_frame(cols.source)
    target, special, features = table_roles(
        list(frame.columns), cols.source, cols.target, cols.features, cols.weight, cols.offset
    )
    frame, n_dropped = _drop_or_check_missing(frame, spec, features, [target, *special.values()], where)
    # the labels as the streamed table gathers them (one chunk here)
    labels = LabelCodes()
    labels.add(frame[target])
    y, classes = labels.result()
    # fill values come from the training split's rows (only then are they needed:
    # a file too short to split is refused after its cells are checked)
    spec.fit(frame, features, train_rows(len(frame)) if spec.imputes else None, where)
    x = spec.transform(frame, where)
    extra = {r: numeric_column(frame[c], where, c) for r, c in special.items()}
    return Loaded(
        x, y, extra.get("weight"), extra.get("offset"), spec.names, task, n_classes, classes, n_dropped
    )
