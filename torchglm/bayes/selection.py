"""Choosing the prior variance ``lambda`` from data.

* **Validation sweep** (the lecture notes on probabilistic classification, §14: the hyperparameter
  is "determined by validation set"): fit the MAP on the training split for each ``lambda`` on a
  grid and score the validation split (NLL and accuracy); pick the smallest validation NLL.
* **Evidence maximization** (type-II maximum likelihood, MacKay 1992; PRML 4.4.1):
  maximize the Laplace estimate
  ``ln Z(lambda) ~= ln p(D|w*) + ln p(w*) + (D/2) ln 2 pi - (1/2) ln |H|``
  over ``lambda``: a log-spaced grid, then golden-section refinement on
  ``ln lambda`` between the neighbours of the best grid point. No validation data
  is spent; the curve is smooth and has an interior maximum when the data are
  informative.

* **Evidence fixed point** (MacKay 1992; PRML 3.5.2 and 4.5): at a stationary point of
  the Laplace evidence ``lambda = ||w*||^2 / gamma`` with ``gamma = M - tr(S_ww) / lambda``
  the number of well-determined weights (``= sum_i l_i / (l_i + 1/lambda)`` over the
  eigenvalues ``l_i`` of the data Hessian when every coefficient has the prior);
  iterate ``MAP -> gamma -> lambda``. Like MacKay it holds the data Hessian fixed in
  ``d ln|H| / d lambda``, so it lands on the maximum up to that neglected term.
* **Variational bound** (PRML 10.6): the Jaakkola-Jordan lower bound on ``ln Z(lambda)``
  on a grid with the same golden-section refinement (its own EM update is
  ``variational_posterior(..., optimize_prior=True)``).

The curves return a :class:`LambdaCurve` (the curve, the chosen ``lambda``, whether the
optimum sits on the edge of the grid); the fixed point an :class:`EvidenceFixedPoint`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import torch

from .._validation import ConvergenceWarning, check_positive, fail, warn
from ._layout import as_batches, check_dispersion, check_glm, check_model
from .laplace import fit_map, laplace_posterior
from .metrics import predictive_metrics
from .prior import GaussianPrior
from .variational import variational_posterior

__all__ = [
    "EvidenceFixedPoint",
    "LambdaCurve",
    "default_lambdas",
    "evidence_curve",
    "evidence_fixed_point",
    "validation_curve",
    "variational_curve",
]


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


def _maximize(score, grid: list[float], refine_steps: int):
    """``score`` on the grid, then golden-section search on ``ln lambda`` between the
    neighbours of the best grid point. Returns (values, best_lambda, best, at_boundary, trace)."""
    values = [score(lam) for lam in grid]
    i = max(range(len(grid)), key=values.__getitem__)
    best_lambda, best = grid[i], values[i]
    at_boundary = i in (0, len(grid) - 1)
    trace: list[tuple[float, float]] = []
    if refine_steps > 0 and not at_boundary:
        # Golden-section search for the maximum of ln Z on [ln lambda_{i-1}, ln lambda_{i+1}].
        g = (math.sqrt(5) - 1) / 2
        a, b = math.log(grid[i - 1]), math.log(grid[i + 1])
        c, d = b - g * (b - a), a + g * (b - a)
        fc, fd = score(math.exp(c)), score(math.exp(d))
        trace += [(math.exp(c), fc), (math.exp(d), fd)]
        for _ in range(refine_steps):
            if fc > fd:
                b, d, fd = d, c, fc
                c = b - g * (b - a)
                fc = score(math.exp(c))
                trace.append((math.exp(c), fc))
            else:
                a, c, fc = c, d, fd
                d = a + g * (b - a)
                fd = score(math.exp(d))
                trace.append((math.exp(d), fd))
        lam, val = max(trace, key=lambda t: t[1])
        if val > best:
            best_lambda, best = lam, val
    return values, best_lambda, best, at_boundary, trace


def evidence_curve(
    model,
    data,
    lambdas=None,
    bias_variance: float | None = None,
    refine_steps: int = 20,
    solver: str = "newton",
    dispersion: float | None = None,
    **options,
) -> LambdaCurve:
    """Laplace log evidence ``ln Z(lambda)`` on a grid, maximized (exact for the
    Gaussian with the identity link: ridge regression's evidence, PRML 3.86).

    Args:
        model: a GLM of any family (a template: it is copied, not changed).
        data: ``(x, y)`` or ``(x, y, weight)``.
        lambdas: grid of prior variances (default :func:`default_lambdas`).
        bias_variance: the bias prior (``None``: flat; the evidence then holds a
            constant that does not depend on ``lambda``).
        refine_steps: golden-section steps on ``ln lambda`` around the best grid point
            (0 to keep the grid point).
        solver, **options: for the MAP fits.
        dispersion: ``phi`` for a family with a dispersion (held fixed; see
            :func:`~torchglm.bayes.laplace_posterior`).

    Returns:
        :class:`LambdaCurve` with ``criterion="log_evidence"``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(200, 5); y = (x.sum(1) + torch.randn(200) > 0).float()
        >>> curve = evidence_curve(LogisticRegression(5), (x, y))
        >>> round(curve.best_lambda, 1), curve.at_boundary
        (4.2, False)
    """
    check_dispersion(check_glm(model), dispersion)
    grid = _check_grid(default_lambdas() if lambdas is None else lambdas)
    work = copy.deepcopy(model)

    def log_z(lam: float) -> float:
        prior = GaussianPrior(lam, bias_variance)
        post = laplace_posterior(work, data, prior, solver=solver, dispersion=dispersion, **options)
        return post.log_evidence

    values, best_lambda, best, at_boundary, trace = _maximize(log_z, grid, refine_steps)
    return LambdaCurve("log_evidence", grid, {"log_evidence": values}, best_lambda, best, at_boundary, trace)


def validation_curve(
    model, train, val, lambdas=None, bias_variance: float | None = None, solver: str = "newton", **options
) -> LambdaCurve:
    """MAP validation NLL and accuracy per ``lambda``; the smallest NLL wins.

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
    return LambdaCurve(
        "val_nll", grid, {"val_nll": nll, "val_accuracy": acc}, grid[i], nll[i], i in (0, len(grid) - 1)
    )


def variational_curve(
    model,
    data,
    lambdas=None,
    bias_variance: float | None = None,
    refine_steps: int = 20,
    tol: float = 1e-9,
    max_iter: int = 1000,
) -> LambdaCurve:
    """The Jaakkola-Jordan evidence lower bound (PRML 10.159) per ``lambda``, maximized
    on the grid and by golden-section search between the best point's neighbours.

    Args:
        model: a logistic regression (only its layout is used).
        data: ``(x, y)``, ``(x, y, weight)`` or a re-iterable of ``Batch``.
        lambdas: grid of prior variances (default :func:`default_lambdas`).
        bias_variance: the bias prior (``None``: flat).
        refine_steps: golden-section steps (0 keeps the grid point).
        tol, max_iter: for :func:`~torchglm.bayes.variational_posterior`.

    Returns:
        :class:`LambdaCurve` with ``criterion="elbo"``.
    """
    check_model(model)
    grid = _check_grid(default_lambdas() if lambdas is None else lambdas)

    def bound(lam: float) -> float:
        return variational_posterior(
            model, data, GaussianPrior(lam, bias_variance), tol=tol, max_iter=max_iter
        ).elbo

    values, best_lambda, best, at_boundary, trace = _maximize(bound, grid, refine_steps)
    return LambdaCurve("elbo", grid, {"elbo": values}, best_lambda, best, at_boundary, trace)


@dataclass
class EvidenceFixedPoint:
    """The result of MacKay's re-estimation of ``lambda``.

    Attributes:
        best_lambda: the last ``lambda``.
        log_evidence: the Laplace ``ln Z`` there.
        gamma: the effective number of well-determined weights there.
        converged: ``|ln lambda_new - ln lambda| <= lambda_tol`` (and the same for the
            dispersion, where it is re-estimated) was reached.
        history: ``(lambda, gamma, log_evidence)`` per iteration.
        dispersion: the last ``phi`` (``1 / beta`` for the Gaussian; 1 for the families
            without a dispersion).
    """

    best_lambda: float
    log_evidence: float
    gamma: float
    converged: bool
    history: list[tuple[float, float, float]]
    dispersion: float = 1.0


def _pearson(model, theta, batches) -> tuple[float, float]:
    """``(sum_i s_i (y_i - mu_i)^2 / V(mu_i), sum_i s_i)`` at ``theta`` (one pass)."""
    fam = model.family
    chi2, total = 0.0, 0.0
    for batch in batches:
        eta = model.linear_predictor(theta, batch.x.to(theta.dtype), batch.offset)
        mu = fam.mean(eta)
        y = batch.y.to(theta.dtype)
        s = torch.ones_like(y) if batch.weight is None else batch.weight.to(theta.dtype)
        chi2 += float((s * (y - mu) ** 2 / fam.variance(mu)).sum())
        total += float(s.sum())
    return chi2, total


def _start_dispersion(model, batches) -> float:
    """The intercept-only model's Pearson estimate ``sum s (y - ybar)^2 / V(ybar) / S``
    (the weighted variance of ``y`` for the Gaussian): a start that needs no fit."""
    wy, total = 0.0, 0.0
    for batch in batches:
        s = torch.ones_like(batch.y) if batch.weight is None else batch.weight
        wy += float((s * batch.y).sum())
        total += float(s.sum())
    ybar = torch.tensor(wy / total, dtype=torch.float64)
    chi2 = 0.0
    for batch in batches:
        y = batch.y.to(torch.float64)
        s = torch.ones_like(y) if batch.weight is None else batch.weight.to(torch.float64)
        chi2 += float((s * (y - ybar) ** 2).sum() / model.family.variance(ybar))
    return chi2 / total


def evidence_fixed_point(
    model,
    data,
    prior_variance: float = 1.0,
    bias_variance: float | None = None,
    lambda_tol: float = 1e-8,
    max_iter: int = 200,
    solver: str = "newton",
    dispersion: float | None = None,
    estimate_dispersion: bool | None = None,
    **options,
) -> EvidenceFixedPoint:
    """MacKay's fixed-point maximization of the Laplace evidence over ``lambda`` (and
    over the Gaussian's noise precision ``beta = 1 / phi``).

    With ``alpha = 1 / lambda``, setting ``d ln Z / d alpha = 0`` while holding the
    data Hessian fixed gives ``alpha ||w*||^2 = gamma``, ``gamma = M - alpha tr(S_ww)``
    (``S = H^{-1}`` the Laplace covariance, ``S_ww`` its weight block, ``M`` weights);
    when every coefficient carries the prior ``gamma = sum_i l_i / (l_i + alpha)`` over
    the eigenvalues ``l_i`` of the data Hessian (PRML 3.91-3.92, 4.5; MacKay 1992).
    Each iteration fits the MAP at ``lambda``, then sets ``lambda <- ||w*||^2 / gamma``.

    For a family with a dispersion, ``phi`` is re-estimated in the same iteration by
    ``phi <- sum_i s_i (y_i - mu_i)^2 / V(mu_i) / (S - gamma_all)`` with ``gamma_all =
    D - sum_j pi_j S_jj`` the well-determined coefficients of all ``D`` (``pi_j`` the
    prior precisions; a coefficient with a flat prior counts 1). For the Gaussian with
    the identity link this is PRML 3.95, ``1 / beta = ||y - X m_N||^2 / (N - gamma)``,
    and with 3.92 it reaches the exact evidence's stationary point (scikit-learn's
    ``BayesianRidge`` without hyperpriors). For the Gamma it is the analogous moment
    estimate, not the evidence's maximum over ``phi``.

    Args:
        model: a GLM of any family (a template: it is copied, not changed).
        data: ``(x, y)`` or ``(x, y, weight)``.
        prior_variance: the starting ``lambda``.
        bias_variance: the bias prior (``None``: flat).
        lambda_tol: stop when ``|ln lambda_new - ln lambda| <= lambda_tol`` (and the same
            for ``phi``; the MAP fits' own ``tol``/``gtol`` go in ``options``: ``lambda`` is
            only as accurate as ``w*``).
        max_iter: at most this many MAP fits (stopping there warns).
        solver, **options: for the MAP fits.
        dispersion: a family with a dispersion: the (starting) ``phi``; default the
            intercept-only model's Pearson estimate (``y``'s variance for the Gaussian).
            ``None`` for the others.
        estimate_dispersion: re-estimate ``phi`` (default: for the families with a
            dispersion); ``False`` holds the given ``dispersion`` fixed.

    Returns:
        :class:`EvidenceFixedPoint`.

    Raises:
        InputError: for a bad start, ``lambda_tol`` or ``max_iter``, a dispersion given for
            a family without one, or ``w* = 0`` (no signal: the evidence then grows as
            ``lambda -> 0``).
    """
    check_glm(model)
    check_positive("prior_variance", prior_variance)
    check_positive("lambda_tol", lambda_tol)
    check_positive("max_iter", max_iter)
    has_phi = model.family.has_dispersion
    if estimate_dispersion is None:
        estimate_dispersion = has_phi
    if estimate_dispersion and not has_phi:
        raise fail("estimate_dispersion", f"False (the {model.family.name} family has phi = 1)", True)
    if has_phi and dispersion is None:
        if not estimate_dispersion:
            check_dispersion(model, None)  # raises: a fixed phi must be given
        dispersion = _start_dispersion(model, as_batches(data, model))
    phi = check_dispersion(model, dispersion)
    work = copy.deepcopy(model)
    m = work.n_weights
    lam, history, converged = float(prior_variance), [], False

    def posterior(lam: float, phi: float):
        prior = GaussianPrior(lam, bias_variance)
        return laplace_posterior(
            work, data, prior, solver=solver, dispersion=phi if has_phi else None, **options
        )

    for _ in range(int(max_iter)):
        post = posterior(lam, phi)
        w2 = float((post.mean[:m] ** 2).sum())
        gamma = m - float(torch.diagonal(post.covariance)[:m].sum()) / lam
        history.append((lam, gamma, post.log_evidence))
        if not w2 > 0 or not gamma > 0:
            raise fail(
                "data",
                "a MAP with non-zero weights (the evidence has an interior maximum)",
                f"||w*||^2 = {w2:.3g}, gamma = {gamma:.3g}",
            )
        new = w2 / gamma
        done = abs(math.log(new) - math.log(lam)) <= lambda_tol
        if estimate_dispersion:
            prec = post.prior.precision(m, work.n_bias, post.mean)
            gamma_all = post.mean.shape[0] - float((prec * torch.diagonal(post.covariance)).sum())
            chi2, total = _pearson(work, post.mean, as_batches(data, work))
            if not total - gamma_all > 0:
                raise fail("data", "more observations than well-determined coefficients", total)
            new_phi = chi2 / (total - gamma_all)
            done = done and abs(math.log(new_phi) - math.log(phi)) <= lambda_tol
            phi = new_phi
        lam = new
        if done:
            converged = True
            break
    post = posterior(lam, phi)
    gamma = m - float(torch.diagonal(post.covariance)[:m].sum()) / lam
    if not converged:
        warn(f"evidence_fixed_point: max_iter={max_iter} reached at lambda={lam:.6g}", ConvergenceWarning)
    return EvidenceFixedPoint(lam, post.log_evidence, gamma, converged, history, phi)
