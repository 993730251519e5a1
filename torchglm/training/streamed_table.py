"""A CSV/TSV/Parquet table larger than ``data.memory_budget``, fitted without loading it.

The in-memory path reads the table whole (:func:`~torchglm.data.files.read_frame`),
fits the :class:`~.features.FeatureSpec` on it and standardizes the training split.
Here the same steps are sums over chunks of rows, each a pass of the one table
reader (:func:`~torchglm.data.files.iter_frames`), so that memory holds one chunk
and the per-row targets, never the features:

1. every row: missing cells (refused, or the rows dropped, as in memory), the
   categorical levels, the labels (numbers, or text classes), weight and offset;
2. the training rows (only when cells are imputed): the fill values;
3. every kept row, encoded once: the finiteness check, the data digest, the
   training rows' column maxima, and the encoded rows (float64, as in memory)
   written to a temporary ``.npy`` (:class:`~torchglm.data.out_of_core.TemporaryNpy`,
   in ``TMPDIR``; removed when the splits are gone, or at once when a step fails);
4. the training rows, read back from it: the mean and variance of ``x / max``
   (:class:`~.features.StreamedStandardization`, the statistics of
   :func:`~.features.standardization`).

The split is the data module's (``parts``: a permutation of the kept rows, as in
memory); a split's rows are then read from the encoded file in file order (a pass
is a sum over rows) by :class:`~torchglm.data.out_of_core.StreamedRows`, as a
streamed ``.npy``'s are: the text is parsed twice in all (three times with
imputation), never once per pass.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch

from .._validation import check_finite, check_weight, fail
from ..data.files import frame_columns, iter_frames
from ..data.out_of_core import StreamedRows, TemporaryNpy, _NpyFile, feature_spans, table_chunk_rows
from .features import (
    FeatureSpec,
    FillTally,
    LabelCodes,
    LevelTally,
    MissingCells,
    StreamedStandardization,
    numeric_column,
)

__all__ = ["StreamedSource", "stream_table"]

#: a row's split in the passes: dropped, or its position in ``_PARTS``
_DROPPED = -1
_PARTS = ("train", "val", "test")


@dataclass
class StreamedSource:
    """What the data module keeps of a file streamed from disk.

    Attributes:
        x: each split's features, read when a pass asks.
        rows: each split's positions among the kept rows (increasing), which index
            ``y``, ``weight`` and ``offset``.
        y: every kept row's target (float64; text labels as class codes).
        weight, offset: every kept row's weight and offset (float64), or ``None``.
        mean, scale: the training split's standardization.
        names: the model's feature names.
        classes: the text classes (``None``: numeric labels or targets).
        n_dropped: rows dropped for a missing cell (``data.missing: drop``).
        digest: a hex digest of the data as read (for ``--resume``).
    """

    x: dict[str, StreamedRows]
    rows: dict[str, np.ndarray]
    y: torch.Tensor
    weight: torch.Tensor | None
    offset: torch.Tensor | None
    mean: torch.Tensor
    scale: torch.Tensor
    names: list[str]
    classes: list | None
    n_dropped: int
    digest: str


def table_roles(
    names: list[str], source: str, target, features, weight: str | None, offset: str | None
) -> tuple[str, dict[str, str], list[str]]:
    """The target column, the weight/offset columns (by role) and the feature
    columns of a table with columns ``names``, as the in-memory reader takes them.

    Raises:
        InputError: a named column the table lacks; a feature column that is also the
            target, weight or offset; no feature column.
    """
    target = "y" if target is None else str(target)
    if target not in names:
        raise fail("target", f"a column of '{source}' (one of {names})", repr(target))
    special = {r: c for r, c in (("weight", weight), ("offset", offset)) if c}
    return target, special, feature_roles(names, source, features, special, target)


def feature_roles(
    names: list[str], source: str, features, special: dict[str, str], target: str | None = None
) -> list[str]:
    """The feature columns among a file's columns ``names``: ``features``, by default
    every column but the target and the weight/offset columns (``special``, by role),
    which must be columns of the file (a table's, or a numeric file's besides its
    target).

    Raises:
        InputError: a weight/offset column the file lacks; a feature column the file
            lacks or that is the target, weight or offset; no feature column.
    """
    for role, col in special.items():
        if col not in names:
            raise fail(role, f"a column of '{source}' ({names})", repr(col))
    reserved = [c for c in (target, *special.values()) if c is not None]
    if features is None:
        features = [n for n in names if n not in reserved]
    else:
        features = list(features)
        bad = [n for n in features if n not in names or n in reserved]
        if bad:
            raise fail("features", f"feature columns of '{source}' other than target/weight/offset", bad)
    if not features:
        raise fail(f"data file '{source}'", "at least one feature column besides the target", names)
    return features


def stream_table(
    source: str,
    spec: FeatureSpec,
    parts: Callable[[int], dict[str, torch.Tensor]],
    *,
    target=None,
    features=None,
    weight: str | None = None,
    offset: str | None = None,
    standardize: bool = True,
    dtype: torch.dtype = torch.float64,
) -> StreamedSource:
    """Fit ``spec``, the labels and the standardization of a table file in passes over
    its rows (the module's steps 1-4) and return its splits, read from the file.

    Args:
        source: the ``.csv``/``.tsv``/``.parquet`` file.
        spec: the feature spec to fit (its categorical columns and missing policy).
        parts: the split of ``n`` kept rows into train/val/test row indices.
        target, features, weight, offset: the columns, as for the in-memory reader.
        standardize: whether to standardize (else mean 0 and scale 1).
        dtype: the features' dtype.

    Raises:
        InputError: what the in-memory path refuses, with the same messages: a
            missing cell (naming the column and rows), text in a numeric column, no
            row left, a split without rows, non-finite features or weights,
            standardized features whose squares overflow or underflow ``dtype``.
    """
    where = f"data file '{source}'"
    names = frame_columns(source)
    target, special, features = table_roles(names, source, target, features, weight, offset)
    chunk_rows = table_chunk_rows(len(names))
    scan = _scan(source, spec, features, [target, *special.values()], target, special, where, chunk_rows)
    y, classes = scan.labels.result()
    spec.start_fit(features)  # the categorical columns are checked after the cells, as in memory
    spec.levels = scan.levels.result(where)
    n = len(y)
    split = parts(n)
    part = np.full(len(scan.dropped), _DROPPED, dtype=np.int8)
    kept = np.flatnonzero(~scan.dropped)
    for k, name in enumerate(_PARTS):
        part[kept[split[name].numpy()]] = k
    del kept
    if spec.imputes:
        fills = FillTally(spec)
        for frame, first, label in _kept_chunks(source, part, chunk_rows):
            fills.add(frame, label == 0, where, first)
        spec.fill = fills.result(where)
    extras = {role: torch.from_numpy(np.concatenate(v)) for role, v in scan.extras.items()}
    check_weight(extras.get("weight"), n)
    if "offset" in extras:
        check_finite("offset", extras["offset"])
    yt = torch.from_numpy(y)
    check_finite("y", yt)
    encoded = TemporaryNpy(n, len(spec.names))
    try:
        mean, scale, digest = _statistics(
            source, spec, part, chunk_rows, standardize, dtype, where, yt, extras, encoded
        )
    except BaseException:
        encoded.remove()  # nothing half-written is left behind
        raise
    index = np.int32 if n < 2**31 else np.int64
    columns = list(range(len(spec.names)))
    x, rows = {}, {}
    for name in _PARTS:
        rows[name] = np.sort(split[name].numpy()).astype(index)  # positions among the kept rows
        x[name] = StreamedRows(encoded.path, rows[name], columns, mean, scale, dtype, keep=encoded)
    return StreamedSource(
        x,
        rows,
        yt,
        extras.get("weight"),
        extras.get("offset"),
        mean,
        scale,
        spec.names,
        classes,
        scan.n_dropped,
        digest,
    )


@dataclass
class _Scan:
    labels: LabelCodes
    levels: LevelTally
    extras: dict[str, list[np.ndarray]]
    dropped: np.ndarray
    n_dropped: int


def _scan(source, spec: FeatureSpec, features, reserved, target, special, where, chunk_rows) -> _Scan:
    """Step 1: every row once. Missing cells are counted over the whole file first, so
    that a refusal names every row of the column, as in memory."""
    cells = MissingCells(features + reserved)
    levels, labels = LevelTally([c for c in features if c in spec.categorical]), LabelCodes()
    extras: dict[str, list[np.ndarray]] = {role: [] for role in special}
    dropped, kept = [], 0
    for frame in iter_frames(source, "data file", chunk_rows):
        missing = cells.add(frame, int(frame.index[0]))
        if spec.missing == "drop":
            frame = frame[~missing]
        dropped.append(missing if spec.missing == "drop" else np.zeros(len(missing), dtype=bool))
        levels.add(frame)
        labels.add(frame[target])
        for role, col in special.items():
            extras[role].append(numeric_column(frame[col], where, col, kept))
        kept += len(frame)
    dropped = np.concatenate(dropped)
    if spec.missing == "drop":
        if dropped.all():
            raise fail(where, "rows without missing cells (data.missing: drop)", "none")
    else:
        cells.refuse(reserved, where)  # the target, weight and offset are never imputed
        if spec.missing == "error":
            cells.refuse(features, where)
    return _Scan(labels, levels, extras, dropped, int(dropped.sum()))


def _kept_chunks(source, part: np.ndarray, chunk_rows: int) -> Iterator[tuple[Any, int, np.ndarray]]:
    """Each chunk's kept rows, the position of its first kept row among all kept rows
    (the row the in-memory messages name) and each kept row's split."""
    first = 0
    for frame in iter_frames(source, "data file", chunk_rows):
        start = int(frame.index[0])
        label = part[start : start + len(frame)]
        keep = label != _DROPPED
        if not keep.all():
            frame, label = frame[keep], label[keep]
        yield frame, first, label
        first += len(frame)


def _statistics(source, spec, part, chunk_rows, standardize, dtype, where, y, extras, encoded: TemporaryNpy):
    """Steps 3 and 4: every kept row encoded (finite; the digest) and written to
    ``encoded``, the training rows' column maxima, then their moments, read back from
    ``encoded`` (:func:`~torchglm.data.out_of_core.feature_spans`)."""
    stats = StreamedStandardization(len(spec.names))
    digest = hashlib.blake2b(digest_size=16)
    train = []
    for frame, first, label in _kept_chunks(source, part, chunk_rows):
        x = np.ascontiguousarray(spec.transform(frame, where, first), dtype=np.float64)
        check_finite("X", torch.from_numpy(x), first)
        digest.update(x)
        encoded.write(x)
        train.append(label == 0)
        stats.add_max(x[train[-1]])
        stats.add_range(torch.from_numpy(x))
    encoded.close()
    if standardize:
        columns = list(range(len(spec.names)))
        for _, _, x in feature_spans(_NpyFile(encoded.path, "source"), columns, np.concatenate(train)):
            stats.add_moments(x.numpy())
    for t in (y, *extras.values()):
        digest.update(t.numpy().tobytes())
    digest.update(repr(spec.state()).encode())
    mean, scale = stats.result(standardize)
    stats.check_magnitude(mean, scale, dtype)
    return mean, scale, digest.hexdigest()
