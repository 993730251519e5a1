"""The features a ``train.py`` model sees, in one place: a table's raw columns ->
numbers (:class:`FeatureSpec`: categorical columns one-hot encoded, missing cells
refused, dropped or imputed) -> standardized ``z = (x - mean) / scale`` (the
training split's statistics) -> the optional fixed basis ``phi(z)`` (the model is
linear in ``phi``, not in ``x``: Bishop, PRML §3.1).

The data module fits the :class:`FeatureSpec` and saves its state (plain lists,
strings and floats) in every checkpoint; ``torchglm predict`` rebuilds it from there
and applies the same :meth:`FeatureSpec.transform` to the rows it predicts.

The data module standardizes its splits with :func:`standardization` and
:func:`standardize`; the task keeps the statistics and the basis with its weights
(so a checkpoint predicts on raw rows) and applies them through the same functions;
the callbacks reach the model's inputs through :func:`feature_map`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch

from .._validation import check_magnitude, fail

__all__ = [
    "FeatureSpec",
    "MISSING_POLICIES",
    "MissingCells",
    "LevelTally",
    "FillTally",
    "LabelCodes",
    "StreamedStandardization",
    "feature_map",
    "standardization",
    "standardize",
]

#: What ``data.missing`` may say about a missing cell of a used column.
MISSING_POLICIES = ("error", "drop", "mean", "most_frequent")
#: Rows a missing-value message lists before "..." .
_SHOWN_ROWS = 8


def _rows(count: int, first: Sequence[int]) -> str:
    """``count`` rows, the first of them (``first``) listed."""
    shown = ", ".join(str(int(i)) for i in first[:_SHOWN_ROWS])
    return f"{count} row{'s' if count != 1 else ''} ({shown}{', ...' if count > _SHOWN_ROWS else ''})"


def _nan_text(value) -> bool:
    """Whether a cell is the number NaN written out (``nan``, ``-NaN``): a number,
    refused later as non-finite, not text."""
    return str(value).strip().lower().lstrip("+-") == "nan"


def missing_cells(column) -> np.ndarray:
    """Which cells of a frame column are missing: ``None``/NaN objects (the reader's
    missing tokens) or a float NaN of a typed (Parquet) column."""
    import pandas as pd

    return np.asarray(pd.isna(column), dtype=bool)


def numeric_column(column, where: str, name: str, first_row: int = 0) -> np.ndarray:
    """A frame column as float64, missing cells NaN. Text that is not a number is refused,
    naming the row (from 0) and the column, with the remedy for a category.

    Raises:
        InputError: a cell that is neither missing nor a number.
    """
    import pandas as pd

    values = np.array(pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan))
    bad = np.isnan(values) & ~missing_cells(column)
    if bad.any():
        text = np.asarray(column, dtype=object)[bad]
        # "nan" itself is a number (NaN, refused later as non-finite), not a bad cell
        real = np.array([not _nan_text(t) for t in text])
        if real.any():
            i = int(np.flatnonzero(bad)[np.argmax(real)])
            raise fail(
                f"{where} row {i + first_row} column '{name}'",
                "numeric values",
                f"{str(np.asarray(column, dtype=object)[i])!r} (a category? list the column in data.categorical)",
            )
    return values


@dataclass
class FeatureSpec:
    """How a table's columns become the model's numeric features, fitted once on the
    training data and applied alike to every split and at prediction.

    * A **categorical** column (any values, read as text) is one-hot encoded with
      treatment contrasts: its sorted levels ``l_0 < l_1 < ... < l_{L-1}`` become
      ``L - 1`` indicator columns ``name=l_1 ... name=l_{L-1}``; the first level is
      the reference (every indicator 0), so the indicators and the intercept are not
      collinear (McCullagh & Nelder, *Generalized Linear Models*, §3.4). Levels are
      taken from every row of the training file; a level unseen there is refused at
      prediction.
    * A **missing** cell (an empty or ``NA`` cell: :data:`~torchglm.data.files.MISSING_TOKENS`)
      of a used column: ``"error"`` refuses the file, naming the column and rows;
      ``"drop"`` drops the row at fit (and refuses it at prediction, where every input
      row gets an output row); ``"mean"`` fills a numeric column with its training
      mean (a categorical one with its most frequent level); ``"most_frequent"``
      fills with the most frequent value. The fill values are stored with the model.
      The target, weight and offset are never imputed.

    Args:
        categorical: the categorical columns' names.
        missing: one of :data:`MISSING_POLICIES`.

    Attributes:
        columns: the input feature columns, in order (set by :meth:`fit`).
        levels: each categorical column's sorted levels (text).
        fill: each feature column's fill value (``"mean"``/``"most_frequent"``).

    Example:
        >>> import pandas as pd
        >>> spec = FeatureSpec(categorical=["site"])
        >>> frame = pd.DataFrame({"x": ["1", "2", "3"], "site": ["b", "a", "b"]})
        >>> spec.fit(frame, ["x", "site"], np.arange(3))
        >>> spec.names, spec.transform(frame, "data").tolist()
        (['x', 'site=b'], [[1.0, 1.0], [2.0, 0.0], [3.0, 1.0]])
    """

    categorical: list[str] = field(default_factory=list)
    missing: Literal["error", "drop", "mean", "most_frequent"] = "error"
    columns: list[str] = field(default_factory=list)
    levels: dict[str, list[str]] = field(default_factory=dict)
    fill: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.missing not in MISSING_POLICIES:
            raise fail("missing", f"one of {list(MISSING_POLICIES)}", repr(self.missing))
        if isinstance(self.categorical, str) or not all(isinstance(c, str) for c in self.categorical):
            raise fail("categorical", "a list of column names", repr(self.categorical))
        self.categorical = list(self.categorical)

    @property
    def names(self) -> list[str]:
        """The model's feature names: a numeric column's own, ``name=level`` per indicator."""
        out = []
        for c in self.columns:
            out += [f"{c}={lv}" for lv in self.levels[c][1:]] if c in self.levels else [c]
        return out

    @property
    def trivial(self) -> bool:
        """Numbers in, the same numbers out: no category, nothing imputed."""
        return not self.levels and not self.fill

    def check_missing(self, frame, columns: Sequence[str], where: str) -> np.ndarray:
        """Rows (boolean mask) with a missing cell in ``columns``; under ``"error"``
        (or for a column that is never imputed) a missing cell is refused.

        Raises:
            InputError: naming the first column with missing cells and its rows.
        """
        cells = MissingCells(columns)
        mask = cells.add(frame)
        if self.missing == "error":
            cells.refuse(columns, where)
        return mask

    @property
    def imputes(self) -> bool:
        """Whether missing cells are filled (``"mean"``/``"most_frequent"``)."""
        return self.missing in ("mean", "most_frequent")

    def start_fit(self, columns: Sequence[str]) -> None:
        """Take ``columns`` as the input feature columns, before :meth:`fit` or a fit a
        chunk of rows at a time (:class:`LevelTally`, :class:`FillTally`).

        Raises:
            InputError: a categorical column that is not among ``columns``.
        """
        unknown = [c for c in self.categorical if c not in columns]
        if unknown:
            raise fail("categorical", f"feature columns of the data (one of {list(columns)})", unknown)
        self.columns, self.levels, self.fill = list(columns), {}, {}

    def fit(self, frame, columns: Sequence[str], train_rows: np.ndarray | None, where: str = "data") -> None:
        """Learn the levels (every row) and fill values (the training rows, ``train_rows``;
        ``None`` when nothing is imputed) of ``columns``: the tallies of a fit a chunk
        of rows at a time (:class:`LevelTally`, :class:`FillTally`), given one chunk.

        Raises:
            InputError: a categorical column that is not among ``columns``; a column
                with no value to impute from; text in a numeric column.
        """
        self.start_fit(columns)
        levels = LevelTally([c for c in self.columns if c in self.categorical])
        levels.add(frame)
        self.levels = levels.result(where)
        if self.imputes:
            train = np.zeros(len(frame), dtype=bool)
            train[train_rows] = True
            fills = FillTally(self)
            fills.add(frame, train, where)
            self.fill = fills.result(where)

    def transform(self, frame, where: str, first_row: int = 0) -> np.ndarray:
        """The ``(n, len(names))`` float64 features of ``frame``'s rows.

        Raises:
            InputError: a missing cell where nothing is imputed, text in a numeric
                column, a level of a categorical column unseen in training.
        """
        n = len(frame)
        if self.missing not in ("mean", "most_frequent"):
            missing = self.check_missing(frame, self.columns, where)
            if missing.any():  # "drop": rows are dropped at fit, never at prediction
                raise fail(
                    f"{where}",
                    "no missing cells in the feature columns (data.missing: drop drops them at "
                    "fit only; every input row gets a prediction)",
                    f"missing cells in {_rows(int(missing.sum()), np.flatnonzero(missing)[:_SHOWN_ROWS] + first_row)}",
                )
        out = []
        for c in self.columns:
            missing = missing_cells(frame[c])
            if c in self.levels:
                text = np.array([str(v) for v in np.asarray(frame[c], dtype=object)], dtype=object)
                if missing.any():
                    text[missing] = self.fill[c]
                levels = self.levels[c]
                code = {lv: k for k, lv in enumerate(levels)}
                idx = np.fromiter((code.get(t, -1) for t in text), dtype=np.int64, count=n)
                if (idx < 0).any():
                    i = int(np.argmax(idx < 0))
                    raise fail(
                        f"{where} row {i + first_row} column '{c}'",
                        f"a level seen in training (one of {levels[:20]}{' ...' if len(levels) > 20 else ''})",
                        repr(text[i]),
                    )
                out.append((idx[:, None] == np.arange(1, len(levels))[None, :]).astype(np.float64))
            else:
                col = numeric_column(frame[c], where, c, first_row)
                if missing.any():
                    col[missing] = self.fill[c]
                out.append(col[:, None])
        return np.concatenate(out, axis=1) if out else np.empty((n, 0))

    def state(self) -> dict[str, Any]:
        """Plain data (lists, strings, floats) for a checkpoint (``weights_only=True``)."""
        fill = {
            k: (float(v) if isinstance(v, (int, float, np.floating)) else str(v))
            for k, v in self.fill.items()
        }
        for k, v in fill.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise fail(f"column '{k}'", "a finite fill value", v)
        return {
            "categorical": list(self.categorical),
            "missing": self.missing,
            "columns": list(self.columns),
            "levels": {k: list(v) for k, v in self.levels.items()},
            "fill": fill,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "FeatureSpec":
        return cls(**{k: state[k] for k in ("categorical", "missing", "columns", "levels", "fill")})


class MissingCells:
    """Each column's missing cells, counted a chunk of rows at a time: how many, and
    the first rows (for the message of :meth:`refuse`).

    Args:
        columns: the columns watched.
    """

    def __init__(self, columns: Sequence[str]):
        self.count = dict.fromkeys(columns, 0)
        self.first: dict[str, list[int]] = {c: [] for c in columns}

    def add(self, frame, first_row: int = 0) -> np.ndarray:
        """Count a chunk whose first row is row ``first_row`` of the data; returns the
        chunk's rows (boolean mask) with a missing cell in a watched column."""
        mask = np.zeros(len(frame), dtype=bool)
        for c, first in self.first.items():
            m = missing_cells(frame[c])
            if m.any():
                rows = np.flatnonzero(m)
                self.count[c] += len(rows)
                first += (rows[: _SHOWN_ROWS - len(first)] + first_row).tolist()
                mask |= m
        return mask

    def refuse(self, columns: Sequence[str], where: str) -> None:
        """Refuse the first of ``columns`` with a missing cell, naming its rows.

        Raises:
            InputError: a missing cell in ``columns``.
        """
        for c in columns:
            if self.count[c]:
                raise fail(
                    f"{where} column '{c}'",
                    "no missing cells (or data.missing: drop, mean or most_frequent)",
                    f"missing cells in {_rows(self.count[c], self.first[c])} (rows from 0)",
                )


class LevelTally:
    """The levels of a :class:`FeatureSpec`'s categorical columns, gathered a chunk
    of rows at a time (every row: a level is a level wherever it appears).

    Args:
        columns: the categorical columns.
    """

    def __init__(self, columns: Sequence[str]):
        self.seen: dict[str, set[str]] = {c: set() for c in columns}

    def add(self, frame) -> None:
        for c, seen in self.seen.items():
            text = np.asarray(frame[c], dtype=object)[~missing_cells(frame[c])]
            seen.update(str(v) for v in text)

    def result(self, where: str) -> dict[str, list[str]]:
        """Each categorical column's sorted levels.

        Raises:
            InputError: a column with only missing cells.
        """
        for c, seen in self.seen.items():
            if not seen:
                raise fail(f"{where} column '{c}'", "at least one present value", "only missing cells")
        return {c: sorted(seen) for c, seen in self.seen.items()}


class FillTally:
    """The fill values of a :class:`FeatureSpec` (``"mean"``/``"most_frequent"``),
    gathered a chunk of rows at a time from the training rows: a numeric column's
    sum and count of present values (the mean, the partial sums added exactly by
    ``math.fsum``), or the count of each value (the most frequent one; a tie goes
    to the smallest, so the choice is reproducible). A categorical column is always
    filled with its most frequent level.

    Args:
        spec: the spec being fitted, its levels known (:class:`LevelTally`).
    """

    def __init__(self, spec: FeatureSpec):
        self.spec = spec
        self.sums: dict[str, list[float]] = {c: [] for c in spec.columns}
        self.n = dict.fromkeys(spec.columns, 0)
        self.counts: dict[str, dict[Any, int]] = {c: {} for c in spec.columns}

    def _counted(self, c: str) -> bool:
        return c in self.spec.levels or self.spec.missing == "most_frequent"

    def add(self, frame, train: np.ndarray, where: str, first_row: int = 0) -> None:
        """Count the training rows (``train``, a boolean mask) of a chunk whose first
        row is row ``first_row`` of the data.

        Raises:
            InputError: text in a numeric column (naming its row in the data).
        """
        for c in self.spec.columns:
            keep = train & ~missing_cells(frame[c])
            if c in self.spec.levels:
                values = np.array([str(v) for v in np.asarray(frame[c], dtype=object)[keep]], dtype=object)
            else:
                # the chunk's whole column is converted, so a bad cell is named by its row
                values = numeric_column(frame[c], where, c, first_row)[keep]
            self.n[c] += len(values)
            if not len(values):
                continue
            if self._counted(c):
                uniq, counts = np.unique(values, return_counts=True)
                tally = self.counts[c]
                for u, k in zip(uniq.tolist(), counts.tolist()):
                    tally[u] = tally.get(u, 0) + k
            else:
                self.sums[c].append(float(np.sum(values)))

    def result(self, where: str) -> dict[str, Any]:
        """Each column's fill value.

        Raises:
            InputError: a column without a present value in the training rows.
        """
        fill = {}
        for c in self.spec.columns:
            if not self.n[c]:
                raise fail(f"{where} column '{c}'", "a value in the training rows to impute from", "none")
            if self._counted(c):
                top = max(self.counts[c].values())
                best = min(v for v, k in self.counts[c].items() if k == top)
                fill[c] = str(best) if c in self.spec.levels else float(best)
            else:
                fill[c] = math.fsum(self.sums[c]) / self.n[c]
        return fill


class LabelCodes:
    """A target column's labels as numbers, gathered a chunk of rows at a time.

    Numbers stay numbers (the data module turns integer labels into class codes
    later). When any cell is text, every label is text: the sorted distinct labels
    are the classes (scikit-learn's ``classes_``) and each row gets its label's
    position. The codes of the rows read so far are kept (by first appearance, then
    renumbered in sorted order), up to :attr:`MAX_CLASSES` distinct labels.
    """

    #: distinct labels kept for text classes; a column with more is numeric or refused
    MAX_CLASSES = 2**16

    def __init__(self):
        self.numbers: list[np.ndarray] = []
        self.codes: list[np.ndarray] | None = []
        self.index: dict[str, int] = {}
        self.text = False
        self.example: str | None = None

    def add(self, column) -> None:
        import pandas as pd

        y = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        self.numbers.append(np.array(y))
        cells = np.asarray(column, dtype=object)
        nan = np.isnan(y)
        if nan.any() and not self.text:
            bad = [v for v in cells[nan] if not _nan_text(v)]
            if bad:
                self.text, self.example = True, str(bad[0])
        if self.codes is None:
            return
        # Factorize the cells, then name only the distinct values (str per row costs
        # ~10x the rest on a numeric column); values that print alike share a code.
        local, uniques = pd.factorize(cells, use_na_sentinel=False)
        code = np.array([self.index.setdefault(str(u), len(self.index)) for u in uniques], dtype=np.int32)
        if len(self.index) > self.MAX_CLASSES:
            self.codes, self.index = None, {}  # numbers, or refused at result()
            return
        self.codes.append(code[local])

    def result(self) -> tuple[np.ndarray, list[str] | None]:
        """Every row's label as a number (float64), and the text classes (``None``
        when every label is a number).

        Raises:
            InputError: text labels among more than :attr:`MAX_CLASSES` distinct values.
        """
        if not self.text:
            return np.concatenate(self.numbers), None
        if self.codes is None:
            raise fail(
                "y",
                f"numeric targets, or class labels of at most {self.MAX_CLASSES} distinct values",
                f"text labels (such as {self.example!r}) among more distinct values",
            )
        names = list(self.index)
        order = sorted(range(len(names)), key=names.__getitem__)
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names))
        return rank[np.concatenate(self.codes)].astype(np.float64), [names[i] for i in order]


#: what a magnitude refusal of the standardized features tells the user to do
MAGNITUDE_REMEDY = "standardize the features (data.standardize: true) or rescale them"


class StreamedStandardization:
    """:func:`standardization` of training rows given a chunk at a time, in two
    passes over them: the column maxima ``m_j`` (:meth:`add_max`), then the mean
    and the shifted sum of squares of ``u = x / m`` merged chunk by chunk
    (:meth:`add_moments`; Chan, Golub & LeVeque, "Algorithms for computing the
    sample variance", 1983): ``M2 = M2_a + M2_b + delta^2 n_a n_b / (n_a + n_b)``.

    Args:
        n_features: the number of columns.
    """

    def __init__(self, n_features: int):
        self.m = np.zeros(n_features)
        self.count, self.mean_u, self.m2 = 0, np.zeros(n_features), np.zeros(n_features)
        self.lo, self.hi = torch.full((n_features,), math.inf, dtype=torch.float64), None
        self.n_rows = 0

    def add_max(self, x: np.ndarray) -> None:
        if len(x):
            self.m = np.maximum(self.m, np.abs(x).max(0))

    def add_range(self, x: torch.Tensor) -> None:
        """Every row's (not only the training rows'): the column minima and maxima."""
        if len(x):
            lo, hi = torch.aminmax(x, dim=0)
            self.lo = torch.minimum(self.lo, lo)
            self.hi = hi if self.hi is None else torch.maximum(self.hi, hi)
            self.n_rows += len(x)

    def check_magnitude(self, mean: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        """The in-memory path's :func:`~torchglm._validation.check_magnitude` of the
        standardized features, from the column minima and maxima (:meth:`add_range`):
        ``(x - mean) / scale`` is increasing in ``x``, so those two rows, standardized
        as every row is (:func:`standardize`), hold the data's extremes and column
        magnitudes.

        Raises:
            InputError: standardized features whose squares overflow or underflow ``dtype``.
        """
        if self.hi is not None:
            z = standardize(torch.stack([self.lo, self.hi]), mean, scale, dtype)
            check_magnitude("X", z, remedy=MAGNITUDE_REMEDY, n_samples=self.n_rows)

    def add_moments(self, x: np.ndarray) -> None:
        if not len(x):
            return
        # torch's column sums are cascaded (NumPy's down a column are sequential):
        # the rounding of standardization()'s own reductions, whatever the chunk
        u = torch.as_tensor(np.asarray(x, dtype=np.float64)) / torch.from_numpy(
            np.where(self.m > 0, self.m, 1.0)
        )
        k, mu = len(u), u.mean(0)
        u.sub_(mu)
        mu = mu.numpy()
        delta = mu - self.mean_u
        self.m2 += u.square_().sum(0).numpy() + delta**2 * self.count * k / (self.count + k)
        self.mean_u += delta * k / (self.count + k)
        self.count += k

    def result(self, enabled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, scale)`` as :func:`standardization` gives them (0 and 1 when not ``enabled``)."""
        d = len(self.m)
        if not enabled:
            return torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)
        m = np.where(self.m > 0, self.m, 1.0)
        mean = torch.from_numpy(self.mean_u * m)
        std = torch.from_numpy(np.sqrt(self.m2 / self.count) * m)
        return mean, torch.where(std > 0, std, torch.ones_like(std))


def standardization(x_train: torch.Tensor, enabled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Column means and scales of the training rows, in float64 (``enabled=False``:
    0 and 1). A constant training column carries no information: it is left unscaled
    (scale 1) instead of divided by zero.

    Each column is first divided by its largest magnitude ``m_j = max_i |x_ij|``, so
    ``u_ij = x_ij / m_j`` lies in ``[-1, 1]``, then the variance is a sum of squares
    shifted by the mean (``sum_i (u_ij - ubar_j)^2 / n``, never ``E[u^2] - ubar^2``)::

        mean_j = m_j ubar_j,        scale_j = m_j sqrt(mean_i (u_ij - ubar_j)^2)

    exact up to rounding at any magnitude the dtype holds: squaring ``x`` itself
    overflows beyond ``|x| ~ 1e154`` (every scale ``inf``, every standardized
    feature 0) and underflows below ``1e-154``. (Chan, Golub & LeVeque, "Algorithms
    for computing the sample variance", 1983; Higham, *Accuracy and Stability of
    Numerical Algorithms*, §1.9.) The statistics are those of this process's rows:
    every process of a distributed fit holds all of them, so nothing is all-reduced
    (unlike the generative models' :class:`~torchglm.models._moments.ClassMoments`).
    """
    d = x_train.shape[1]
    if not enabled:
        return torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)
    x64 = x_train.to(torch.float64)
    lo, hi = torch.aminmax(x64, dim=0)
    m = torch.maximum(-lo, hi)
    m = torch.where(m > 0, m, torch.ones_like(m))
    u = x64 / m
    mean_u, std_u = u.mean(0), u.std(0, unbiased=False)
    mean, std = mean_u * m, std_u * m
    return mean, torch.where(std > 0, std, torch.ones_like(std))


def standardize(x: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(x - mean) / scale`` computed in the statistics' precision (float64), then
    cast to the model's ``dtype``."""
    return ((x.to(mean) - mean) / scale).to(dtype)


def feature_map(pl_module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The task's map from standardized features to the model's inputs (``phi``), or
    ``None`` when the model reads the standardized columns themselves."""
    if getattr(pl_module, "basis", None) is None:
        return None
    return pl_module.phi
