"""Choosing the prior variance ``lambda`` from data.

* **Validation sweep** (seed 003, "Hyperparameter: determined by validation set"):
  fit the MAP on the training split for each ``lambda`` on a grid and score the
  validation split (NLL and accuracy); pick the smallest validation NLL.
* **Evidence maximization** (type-II maximum likelihood, MacKay 1992; PRML 4.4.1):
  maximize the Laplace estimate
  ``ln Z(lambda) ~= ln p(D|w*) + ln p(w*) + (D/2) ln 2 pi - (1/2) ln |H|``
  over ``lambda``: a log-spaced grid, then golden-section refinement on
  ``ln lambda`` between the neighbours of the best grid point. No validation data
  is spent; the curve is smooth and has an interior maximum when the data are
  informative.

Both return a :class:`LambdaCurve` (the curve, the chosen ``lambda``, whether the
optimum sits on the edge of the grid).
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import torch

from .._validation import fail
from ._layout import check_model
from .laplace import fit_map, laplace_posterior
from .metrics import predictive_metrics
from .prior import GaussianPrior

__all__ = ["LambdaCurve", "default_lambdas", "evidence_curve", "validation_curve"]


@dataclass
class LambdaCurve:
    """A criterion as a function of the prior variance ``lambda``.

    Attributes:
        criterion: ``"log_evidence"`` (maximized) or ``"val_nll"`` (minimized).
        lambdas: the grid, increasing.
        scores: one list per reported quantity, aligned with ``lambdas``.
        best_lambda: the chosen ``lambda`` (refined between grid points for the evidence).
        best_score: the criterion at ``best_lambda``.
        at_boundary: the best grid point is the first or last one (widen the grid).
    """

    criterion: str
    lambdas: list[float]
    scores: dict[str, list[float]]
    best_lambda: float
    best_score: float
    at_boundary: bool
    refinement: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def default_lambdas() -> list[float]:
    """``10^-3 .. 10^3``, four points per decade."""
    return [10.0 ** (e / 4) for e in range(-12, 13)]


def _check_grid(lambdas) -> list[float]:
    grid = sorted(float(v) for v in lambdas)
    if len(grid) < 3 or grid[0] <= 0 or any(not math.isfinite(v) for v in grid):
        raise fail("lambdas", "at least 3 positive finite prior variances", lambdas)
    return grid


def evidence_curve(model, data, lambdas=None, bias_variance: float | None = None,
                   refine_steps: int = 20, solver: str = "newton", **options) -> LambdaCurve:
    """Laplace log evidence ``ln Z(lambda)`` on a grid, maximized.

    Args:
        model: a classification GLM (a template: it is copied, not changed).
        data: ``(x, y)`` or ``(x, y, weight)``.
        lambdas: grid of prior variances (default :func:`default_lambdas`).
        bias_variance: the bias prior (``None``: flat; the evidence then holds a
            constant that does not depend on ``lambda``).
        refine_steps: golden-section steps on ``ln lambda`` around the best grid point
            (0 to keep the grid point).
        solver, **options: for the MAP fits.

    Returns:
        :class:`LambdaCurve` with ``criterion="log_evidence"``.

    Example:
        >>> curve = evidence_curve(LogisticRegression(5), (x, y))
        >>> curve.best_lambda, curve.at_boundary
    """
    check_model(model)
    grid = _check_grid(default_lambdas() if lambdas is None else lambdas)
    work = copy.deepcopy(model)

    def log_z(lam: float) -> float:
        post = laplace_posterior(work, data, GaussianPrior(lam, bias_variance), solver=solver, **options)
        return post.log_evidence

    values = [log_z(lam) for lam in grid]
    i = max(range(len(grid)), key=values.__getitem__)
    best_lambda, best = grid[i], values[i]
    at_boundary = i in (0, len(grid) - 1)
    trace: list[tuple[float, float]] = []
    if refine_steps > 0 and not at_boundary:
        # Golden-section search for the maximum of ln Z on [ln lambda_{i-1}, ln lambda_{i+1}].
        g = (math.sqrt(5) - 1) / 2
        a, b = math.log(grid[i - 1]), math.log(grid[i + 1])
        c, d = b - g * (b - a), a + g * (b - a)
        fc, fd = log_z(math.exp(c)), log_z(math.exp(d))
        trace += [(math.exp(c), fc), (math.exp(d), fd)]
        for _ in range(refine_steps):
            if fc > fd:
                b, d, fd = d, c, fc
                c = b - g * (b - a)
                fc = log_z(math.exp(c))
                trace.append((math.exp(c), fc))
            else:
                a, c, fc = c, d, fd
                d = a + g * (b - a)
                fd = log_z(math.exp(d))
                trace.append((math.exp(d), fd))
        lam, val = max(trace, key=lambda t: t[1])
        if val > best:
            best_lambda, best = lam, val
    return LambdaCurve("log_evidence", grid, {"log_evidence": values}, best_lambda, best,
                       at_boundary, trace)


def validation_curve(model, train, val, lambdas=None, bias_variance: float | None = None,
                     solver: str = "newton", **options) -> LambdaCurve:
    """MAP validation NLL and accuracy per ``lambda`` (seed 003); the smallest NLL wins.

    Args:
        model: a classification GLM (a template: it is copied, not changed).
        train: ``(x, y)`` or ``(x, y, weight)`` to fit the MAP on.
        val: ``(x, y)`` to score.
        lambdas: grid of prior variances (default :func:`default_lambdas`).
        bias_variance: the bias prior.
        solver, **options: for the MAP fits.

    Returns:
        :class:`LambdaCurve` with ``criterion="val_nll"`` and scores
        ``val_nll``, ``val_accuracy``.
    """
    check_model(model)
    grid = _check_grid(default_lambdas() if lambdas is None else lambdas)
    x_val, y_val = model.check_data(val[0], val[1], fitting=False)
    work = copy.deepcopy(model)
    nll, acc = [], []
    for lam in grid:
        fit_map(work, train, GaussianPrior(lam, bias_variance), solver=solver, **options)
        with torch.no_grad():
            m = predictive_metrics(work.predict_proba(x_val), y_val)
        nll.append(m["nll"])
        acc.append(m["accuracy"])
    i = min(range(len(grid)), key=nll.__getitem__)
    return LambdaCurve("val_nll", grid, {"val_nll": nll, "val_accuracy": acc}, grid[i], nll[i],
                       i in (0, len(grid) - 1))
