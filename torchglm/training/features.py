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

from .._validation import fail

__all__ = ["FeatureSpec", "MISSING_POLICIES", "feature_map", "standardization", "standardize"]

#: What ``data.missing`` may say about a missing cell of a used column.
MISSING_POLICIES = ("error", "drop", "mean", "most_frequent")
#: Rows a missing-value message lists before "..." .
_SHOWN_ROWS = 8


def _rows(index: np.ndarray) -> str:
    shown = ", ".join(str(int(i)) for i in index[:_SHOWN_ROWS])
    return f"{len(index)} row{'s' if len(index) != 1 else ''} ({shown}{', ...' if len(index) > _SHOWN_ROWS else ''})"


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
        real = np.array([str(t).strip().lower().lstrip("+-") != "nan" for t in text])
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
        mask = np.zeros(len(frame), dtype=bool)
        for c in columns:
            m = missing_cells(frame[c])
            if m.any() and self.missing == "error":
                raise fail(
                    f"{where} column '{c}'",
                    "no missing cells (or data.missing: drop, mean or most_frequent)",
                    f"missing cells in {_rows(np.flatnonzero(m))} (rows from 0)",
                )
            mask |= m
        return mask

    def fit(self, frame, columns: Sequence[str], train_rows: np.ndarray | None, where: str = "data") -> None:
        """Learn the levels (every row) and fill values (the training rows, ``train_rows``;
        ``None`` when nothing is imputed) of ``columns``.

        Raises:
            InputError: a categorical column that is not among ``columns``; a column
                with no value to impute from; text in a numeric column.
        """
        unknown = [c for c in self.categorical if c not in columns]
        if unknown:
            raise fail("categorical", f"feature columns of the data (one of {list(columns)})", unknown)
        self.columns, self.levels, self.fill = list(columns), {}, {}
        for c in self.columns:
            present = ~missing_cells(frame[c])
            if c in self.categorical:
                text = np.asarray(frame[c], dtype=object)
                self.levels[c] = sorted({str(v) for v in text[present]})
                if not self.levels[c]:
                    raise fail(f"{where} column '{c}'", "at least one present value", "only missing cells")
            if self.missing not in ("mean", "most_frequent"):
                continue
            present = present[train_rows]
            if not present.any():
                raise fail(f"{where} column '{c}'", "a value in the training rows to impute from", "none")
            if c in self.levels:
                values = [str(v) for v in np.asarray(frame[c], dtype=object)[train_rows][present]]
            else:
                # the whole column is converted, so a bad cell is named by its row in the file
                values = numeric_column(frame[c], where, c)[train_rows][present]
            if c in self.levels or self.missing == "most_frequent":
                uniq, counts = np.unique(np.asarray(values), return_counts=True)
                # the most frequent value; a tie goes to the smallest, so the choice is reproducible
                best = uniq[int(np.argmax(counts))]
                self.fill[c] = str(best) if c in self.levels else float(best)
            else:
                self.fill[c] = float(np.mean(values))

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
                    f"missing cells in {_rows(np.flatnonzero(missing) + first_row)}",
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
