"""Statistical inference for a fitted GLM: covariance, tests, deviance, AIC/BIC.

At the maximum-likelihood estimate ``beta^`` of a GLM (seed 000, "Newton-Raphson
and IRLS"), the asymptotic covariance is the inverse Fisher information times the
dispersion::

    Cov(beta^) = phi * I(beta^)^{-1},   I = sum_i s_i x~_i h_i x~_i^T = S * H,

where ``H`` is the Hessian of the solvers' objective (the weighted *mean* NLL at
``phi = 1``, so the information of the summed log-likelihood is ``S = sum_i s_i``
times it) and ``h_i`` is the observed second derivative of the NLL in ``eta``
(``information="observed"``) or the expected one ``mu'(eta)^2 / V(mu)``
(``"expected"``, Fisher scoring / IRLS; the two coincide for canonical links).
For a penalized fit (``l2 > 0``) ``H`` includes the penalty, so ``phi (S H)^{-1}``
is the covariance of the Laplace approximation to the posterior at the MAP
estimate (seed 003's Gaussian prior), not a sampling covariance.

The dispersion is estimated after the fit as Pearson's ``X^2 / (n - p)``
(statsmodels' default; 1 for Bernoulli, binomial, Poisson and exponential).
Log-likelihood, deviance, null deviance, AIC and BIC follow statsmodels' GLM
conventions (see :class:`GLMResults`), so the numbers can be compared one to one.

Every quantity is a sum over batches (one pass each), so the same code serves
in-memory tensors, larger-than-memory batches and many processes.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

import torch
from scipy import stats

from ._validation import fail, feature_names_of
from .data.batches import Batch, TensorBatches
from .solvers.base import FitResult, all_reduce_sum
from .solvers.derivatives import eta_derivatives, flat_parameters, hessian_and_gradient

__all__ = ["GLMResults", "glm_results", "fit_glm", "identifiability", "Identifiability"]

#: eigenvalues of the correlation-scaled information below this are null directions
_RANK_TOL = 1e-10


@dataclass
class GLMResults:
    """Results of a GLM fit, with statsmodels' ``GLMResults`` names and conventions.

    Coefficients are in the model's flat order: the weights (named by
    ``feature_names``) then the intercept; for softmax regression the contrasts
    ``w_k - w_0``, ``k = 1..K-1``, each class's features then its intercept
    (named ``k:feature``, ``k:intercept``), as statsmodels' ``MNLogit``.

    Attributes:
        names: coefficient names.
        params: estimates ``beta^``.
        bse: standard errors ``sqrt(diag(Cov))`` (NaN for unidentified coefficients).
        statistic: ``params / bse`` (z, or t when ``use_t``).
        pvalues: two-sided p-values from the normal (or Student t, ``df_resid``).
        conf_int: ``(p, 2)`` confidence bounds at level ``1 - alpha``.
        cov_params: ``phi J (S H)^{-1} J^T`` (a generalized inverse when the
            information is singular; ``J`` is the identity, or the softmax
            contrasts).
        family, link, solver, information: what was fitted, how, and which
            information the covariance uses (``"observed"`` or ``"expected"``).
        nobs: number of observations: the sum of the frequency weights, or the
            number of rows for the binomial (whose weights are trials).
        df_model: ``rank - 1`` (``rank - (K - 1)`` for softmax); df_resid:
            ``nobs - rank`` (statsmodels).
        scale: dispersion ``phi`` (Pearson ``X^2 / df_resid`` or 1).
        llf: log-likelihood; for the Gaussian with the identity link at the
            MLE ``phi = RSS / nobs`` (the concentrated likelihood), otherwise at
            ``scale`` (statsmodels' ``llf``).
        llnull: log-likelihood of the intercept-only model at ``scale``.
        deviance, null_deviance: ``sum_i s_i d(y_i, mu_i)`` for the fit and for
            the intercept-only model (refitted with the offsets, if any).
        pearson_chi2: ``sum_i s_i (y_i - mu_i)^2 / V(mu_i)``.
        aic: ``-2 llf + 2 rank``; bic: ``-2 llf + rank log(nobs)`` (statsmodels'
            ``bic_llf``, its default ``bic`` since 0.14; the dispersion is not
            counted as a parameter).
        explained_deviance: ``1 - deviance / null_deviance`` (R^2 for the Gaussian).
        n_iter, converged: from the solver (``None`` when no fit result was given).
        l2: penalty strength; ``> 0`` makes the covariance the Laplace/MAP one.
        unidentified: coefficients along null directions of the information
            (collinear or constant columns): not estimable, bse NaN.
        diverging: coefficients along a direction the likelihood keeps
            improving on (separation): reported by the solver or detected here.
        use_t, alpha: test distribution and confidence level.
        notes: human-readable warnings printed under the table.
    """

    names: list[str]
    params: torch.Tensor
    bse: torch.Tensor
    statistic: torch.Tensor
    pvalues: torch.Tensor
    conf_int: torch.Tensor
    cov_params: torch.Tensor
    family: str
    link: str
    solver: str | None
    information: str
    nobs: float
    n_rows: int
    df_model: float
    df_resid: float
    scale: float
    llf: float
    llnull: float
    deviance: float
    null_deviance: float
    pearson_chi2: float
    aic: float
    bic: float
    n_iter: int | None
    converged: bool | None
    l2: float
    unidentified: list[str] = field(default_factory=list)
    diverging: list[str] = field(default_factory=list)
    use_t: bool = False
    alpha: float = 0.05
    notes: list[str] = field(default_factory=list)

    @property
    def explained_deviance(self) -> float:
        return 1.0 - self.deviance / self.null_deviance if self.null_deviance > 0 else float("nan")

    @property
    def penalized(self) -> bool:
        return self.l2 > 0

    def summary(self) -> str:
        """A text table in the layout of statsmodels' ``GLMResults.summary()``."""
        stat = "t" if self.use_t else "z"
        lo, hi = f"[{self.alpha / 2:.3g}", f"{1 - self.alpha / 2:.3g}]"
        width = 78
        it = "n/a" if self.n_iter is None else f"{self.converged} ({self.n_iter} iter.)"
        left = [
            ("Family:", self.family),
            ("Link:", self.link),
            ("Solver:", self.solver or "n/a"),
            ("Converged:", it),
            ("Covariance:", self.information + (" + L2 (Laplace/MAP)" if self.penalized else "")),
            ("Log-likelihood:", f"{self.llf:.6g}"),
            ("AIC:", f"{self.aic:.6g}"),
        ]
        right = [
            ("No. observations:", f"{self.nobs:g}"),
            ("Df residuals:", f"{self.df_resid:g}"),
            ("Df model:", f"{self.df_model:g}"),
            ("Scale:", f"{self.scale:.6g}"),
            ("Deviance:", f"{self.deviance:.6g}"),
            ("Null deviance:", f"{self.null_deviance:.6g}"),
            ("BIC:", f"{self.bic:.6g}"),
        ]
        lines = ["Generalized linear model results".center(width), "=" * width]
        for (a, b), (c, d) in zip(left, right):
            lines.append(f"{a:<16}{b:>22}  {c:<20}{d:>18}")
        lines.append("=" * width)
        name_w = max(12, max(len(n) for n in self.names) + 1)
        head = f"{'':<{name_w}}{'coef':>11}{'std err':>11}{stat:>9} {f'P>|{stat}|':>8}{lo:>12}{hi:>12}"
        lines += [head, "-" * max(width, len(head))]
        for i, n in enumerate(self.names):
            lines.append(
                f"{n:<{name_w}}{_fmt(self.params[i]):>11}{_fmt(self.bse[i]):>11}"
                f"{_fmt(self.statistic[i], 3):>9} {_fmt_p(self.pvalues[i]):>8}"
                f"{_fmt(self.conf_int[i, 0]):>12}{_fmt(self.conf_int[i, 1]):>12}"
            )
        lines.append("=" * max(width, len(head)))
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (non-finite numbers become ``None``)."""
        coef = {
            n: {
                "coef": _num(self.params[i]),
                "std_err": _num(self.bse[i]),
                "statistic": _num(self.statistic[i]),
                "p_value": _num(self.pvalues[i]),
                "ci_low": _num(self.conf_int[i, 0]),
                "ci_high": _num(self.conf_int[i, 1]),
            }
            for i, n in enumerate(self.names)
        }
        out = {
            "family": self.family,
            "link": self.link,
            "solver": self.solver,
            "converged": self.converged,
            "n_iter": self.n_iter,
            "information": self.information,
            "penalized": self.penalized,
            "l2": self.l2,
            "covariance": "Laplace/MAP (penalized)" if self.penalized else "inverse information",
            "statistic": "t" if self.use_t else "z",
            "alpha": self.alpha,
            "nobs": self.nobs,
            "df_model": self.df_model,
            "df_resid": self.df_resid,
        }
        for k in ("scale", "llf", "llnull", "deviance", "null_deviance", "pearson_chi2", "aic", "bic",
                  "explained_deviance"):
            out[k] = _num(getattr(self, k))
        out.update(
            coefficients=coef,
            cov_params=[[_num(v) for v in row] for row in self.cov_params],
            unidentified=list(self.unidentified),
            diverging=list(self.diverging),
            notes=list(self.notes),
        )
        return out

    def to_json(self, path=None, **kwargs) -> str:
        """``json.dumps(self.to_dict())``; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, **kwargs)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def __str__(self) -> str:
        return self.summary()


def _num(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _fmt(v, digits: int = 4) -> str:
    v = float(v)
    if not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return f"{v:.{digits}f}" if 1e-3 <= abs(v) < 1e6 or v == 0 else f"{v:.{digits}g}"


def _fmt_p(v) -> str:
    # statsmodels' table convention (3 decimals); to_dict() keeps the exact value
    v = float(v)
    return f"{v:.3f}" if math.isfinite(v) else "nan"


class Identifiability(NamedTuple):
    """What :func:`identifiability` finds in an information matrix ``A``.

    Attributes:
        rank: numerical rank.
        inverse: a generalized inverse ``G`` (``A G A = A``): ``A^{-1}`` when
            ``A`` is regular, else the pseudo-inverse of the unit-diagonal
            scaling, mapped back. ``J G J^T`` is the covariance of every
            estimable ``J theta``, whatever the generalized inverse.
        null: orthonormal basis (columns) of the null space of the scaled matrix.
        scale: ``D^{-1/2}``, the scaling (``theta = scale * phi``).
    """

    rank: int
    inverse: torch.Tensor
    null: torch.Tensor
    scale: torch.Tensor

    def unidentified(self, J: torch.Tensor | None = None, tol: float = 1e-6) -> torch.Tensor:
        """Mask of the rows of ``J theta`` (default: each coefficient) that are not
        estimable: a linear function is estimable iff it vanishes on the null space."""
        if J is None:
            return (self.null * self.null).sum(1) > tol
        Js = J * self.scale.unsqueeze(0)  # J theta = (J D^{-1/2}) phi
        num = ((Js @ self.null) ** 2).sum(1)
        return num > tol * (Js * Js).sum(1)


def identifiability(info: torch.Tensor, tol: float = _RANK_TOL) -> Identifiability:
    """Rank, generalized inverse and null directions of a symmetric information matrix.

    The matrix is first scaled to unit diagonal (``C = D^{-1/2} I D^{-1/2}``), so
    that badly scaled but identified columns are not mistaken for collinear ones;
    eigenvalues of ``C`` below ``tol * max`` span the null space.
    """
    d = torch.diagonal(info)
    # a column without information (all zeros, or zero weight) is unidentified outright;
    # any other scale is taken out by the unit-diagonal scaling below
    zero = d <= torch.finfo(d.dtype).tiny
    s = torch.where(zero, torch.ones_like(d), d.rsqrt())
    C = info * s.unsqueeze(0) * s.unsqueeze(1)
    C = torch.where(zero.unsqueeze(0) | zero.unsqueeze(1), torch.zeros_like(C), C)
    evals, evecs = torch.linalg.eigh(0.5 * (C + C.T))
    keep = evals > tol * evals.max()
    inv_c = (evecs[:, keep] / evals[keep]) @ evecs[:, keep].T
    return Identifiability(int(keep.sum()), inv_c * s.unsqueeze(0) * s.unsqueeze(1), evecs[:, ~keep], s)


def _features(model, feature_names) -> list[str]:
    """The columns' names: ``feature_names`` (checked), else ``x0, x1, ...``."""
    if feature_names is None:
        return [f"x{j}" for j in range(model.n_features)]
    if len(feature_names) != model.n_features:
        raise fail("feature_names", f"{model.n_features} names", len(feature_names))
    return list(feature_names)


class _Sums:
    """One pass of the per-observation statistics at fixed parameters."""

    def __init__(self, family, dtype, device):
        z = lambda: torch.zeros((), dtype=dtype, device=device)  # noqa: E731
        self.family = family
        self.dtype = dtype
        self.weight, self.rows, self.wy, self.deviance, self.pearson, self.saturated = (z() for _ in range(6))
        self.has_offset = False

    def add(self, eta, y, w):
        fam = self.family
        mu = fam.mean(eta)
        w = torch.ones_like(eta) if w is None else w.to(self.dtype)
        self.weight += w.sum()
        self.rows += eta.shape[0]
        self.wy += (w * y).sum()
        self.deviance += (w * fam.unit_deviance(y, mu)).sum()
        if fam.is_classifier or fam.weight_is_trials:
            # fitted probabilities numerically 0 or 1 on the side of y: separation
            sat = ((mu < 1e-10) & (y == 0)) | ((mu > 1 - 1e-10) & (y == 1))
            self.saturated += (sat & (w > 0)).sum()
        self.pearson += (w * (y - mu) ** 2 / fam.variance(mu)).sum()

    def finish(self):
        all_reduce_sum(self.weight, self.rows, self.wy, self.deviance, self.pearson, self.saturated)
        return self


def _batch_eta(model, batch: Batch, dtype):
    """``eta`` at the model's parameters (the model's ``linear_predictor``), targets and
    weights, all in ``dtype``."""
    theta = flat_parameters(model, dtype)
    offset = None if batch.offset is None else batch.offset.to(dtype)
    eta = model.linear_predictor(theta, batch.x.to(dtype), offset)
    y = batch.y.to(dtype) if batch.y.is_floating_point() else batch.y
    w = None if batch.weight is None else batch.weight.to(dtype)
    return eta, y, w


def _log_likelihood(model, batches, dtype, scale, intercept=None):
    """``sum_i s_i log p(y_i | eta_i, phi)`` at the model (or at ``eta = intercept + offset``)."""
    fam = model.family
    total = None
    for batch in batches:
        eta, y, w = _batch_eta(model, batch, dtype)
        if intercept is not None:
            eta = _null_eta(batch, eta, intercept, dtype)
        ll = fam.log_likelihood(eta, y, w, scale=scale)
        total = ll if total is None else total + ll
    all_reduce_sum(total)
    return total


def _null_eta(batch, eta, intercept, dtype):
    off = torch.zeros_like(eta) if batch.offset is None else batch.offset.to(dtype)
    return off + intercept


def _null_intercept(model, batches, dtype, sums: _Sums, max_iter: int = 100):
    """MLE of the intercept-only model ``eta_i = b + offset_i``.

    Without offsets ``mu^ = sum s_i y_i / sum s_i`` for every link (the score
    equation of a constant mean); with offsets, Fisher scoring on ``b`` with
    step halving, one pass per iteration.
    """
    fam = model.family
    mean = (sums.wy / sums.weight).to(dtype)
    b = fam.link.link(mean)
    if not sums.has_offset:
        return b
    for _ in range(max_iter):
        g = torch.zeros((), dtype=dtype, device=b.device)
        h, loss = torch.zeros_like(g), torch.zeros_like(g)
        for batch in batches:
            eta, y, w = _batch_eta(model, batch, dtype)
            eta = _null_eta(batch, eta, b, dtype)
            nll, d1, d2 = eta_derivatives(fam, eta, y, order=2, expected=True)
            w = torch.ones_like(eta) if w is None else w
            loss, g, h = loss + (w * nll).sum(), g + (w * d1).sum(), h + (w * d2).sum()
        all_reduce_sum(loss, g, h)
        step = g / h
        if abs(float(step)) < 1e-13 * (1 + abs(float(b))):
            break
        t = 1.0
        while t > 1e-10:
            cand = b - t * step
            new = torch.zeros_like(g)
            for batch in batches:
                eta, y, w = _batch_eta(model, batch, dtype)
                nll = fam.nll(_null_eta(batch, eta, cand, dtype), y)
                new = new + (nll if w is None else w * nll).sum()
            all_reduce_sum(new)
            if bool(torch.isfinite(new)) and float(new) <= float(loss):
                break
            t *= 0.5
        b = cand
    return b


def _diverging_from_solver(fit_result, names, J: torch.Tensor) -> list[str]:
    """Names the solver flagged as diverging (``FitResult.extra["separation"]``)."""
    if fit_result is None:
        return []
    sep = fit_result.extra.get("separation")
    if not sep:
        return []
    if isinstance(sep, dict):
        direction = sep.get("direction")
        if direction is not None:
            v = torch.as_tensor(direction, dtype=J.dtype, device=J.device).reshape(-1)
            if v.numel() == J.shape[1]:
                v = J @ v
                big = v.abs() > 0.05 * v.abs().max()
                return [n for n, b in zip(names, big.tolist()) if b]
    return []


def glm_results(
    model,
    x: torch.Tensor | None = None,
    y: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    offset: torch.Tensor | None = None,
    *,
    batches: Iterable[Batch] | None = None,
    fit_result: FitResult | None = None,
    information: str | None = None,
    alpha: float = 0.05,
    use_t: bool = False,
    feature_names: list[str] | None = None,
    dtype: torch.dtype = torch.float64,
) -> GLMResults:
    """Inference for a fitted GLM (see the module docstring).

    Softmax regression is reported as contrasts ``w_k - w_0`` against class 0
    (statsmodels' ``MNLogit`` parametrization): they are estimable although the
    symmetric parameters are not, and ``J G J^T`` is their covariance for any
    generalized inverse ``G`` of the information.

    Args:
        model: a fitted :class:`~torchglm.models.GeneralizedLinearModel`.
        x, y, weight, offset: the training data (checked like ``model.loss``),
            or ``batches``: re-iterable batches of checked data (e.g. the data
            module's ``train_batches()``); exactly one of the two.
        fit_result: the solver's :class:`~torchglm.solvers.base.FitResult`
            (iterations, convergence, separation info, solver name).
        information: ``"observed"`` or ``"expected"``; default ``"expected"``
            after an IRLS fit (statsmodels' GLM default) and ``"observed"``
            otherwise (the two coincide for canonical links).
        alpha: the confidence intervals have level ``1 - alpha``.
        use_t: Student t with ``df_resid`` degrees of freedom instead of the
            normal for p-values and intervals (statsmodels' ``use_t``).
        feature_names: names of the ``n_features`` columns; default: the columns
            of ``x`` when it is a DataFrame, else ``model.feature_names`` (set by a
            fit on a DataFrame), else ``x0, x1, ...``.
        dtype: computation dtype.

    Returns:
        A :class:`GLMResults`.

    Raises:
        InputError: missing or duplicated data, an unknown ``information``,
            offsets with softmax regression, or parameters where the Hessian is
            not finite.

    Example:
        >>> m = GeneralizedLinearModel(2, "poisson")
        >>> fr = m.fit(x, y, solver="irls")
        >>> print(glm_results(m, x, y, fit_result=fr).summary())
    """
    fam = model.family
    if (batches is None) == (x is None):
        raise fail("x/batches", "either x and y or batches", "both" if x is not None else "neither")
    if feature_names is None:
        feature_names = feature_names_of(x) or getattr(model, "feature_names", None)
    if batches is None:
        x, y, weight, offset = model.as_data(x, y, weight, offset)
        x, y = model.check_data(x, y, weight, offset)
        batches = TensorBatches(x, y, weight, offset)
    if information is None:
        information = "expected" if fit_result is not None and fit_result.solver == "irls" else "observed"
    if information not in ("observed", "expected"):
        raise fail("information", "'observed' or 'expected'", repr(information))
    if not 0 < alpha < 1:
        raise fail("alpha", "a level in (0, 1)", alpha)

    _, grad, H = hessian_and_gradient(model, batches, expected=information == "expected", dtype=dtype)
    if not bool(torch.isfinite(H).all()):
        raise fail("model", "parameters where the likelihood and its curvature are finite (a fitted model)",
                   "a non-finite Hessian: eta lies outside the family's mean domain")
    if fam.multi_output:
        fs = _categorical_stats(model, batches, dtype, feature_names)
    else:
        fs = _scalar_stats(model, batches, dtype, feature_names)
    ident = identifiability(fs.S * H)
    J = fs.J if fs.J is not None else torch.eye(H.shape[0], dtype=dtype, device=H.device)
    theta = flat_parameters(model, dtype).to(H.device)
    params = J @ theta
    unident = ident.unidentified(None if fs.J is None else J)
    # statsmodels counts the rank of the design; for softmax contrasts, the estimable ones
    rank = ident.rank if fs.J is None else int((~unident).sum())
    df_model = rank - fs.n_constants
    df_resid = fs.nobs - rank
    if fs.scale_from_pearson:
        scale = _pearson_scale(fs.pearson, df_resid)
        llf_scale = fs.pearson / fs.nobs if fs.concentrated else scale
        fs = fs._replace(scale=scale, llf=float(_log_likelihood(model, batches, dtype, llf_scale)),
                         llnull=float(_log_likelihood(model, batches, dtype, scale, intercept=fs.null_b0)))
    cov = fs.scale * (J @ ident.inverse @ J.T)
    bse, statistic, pvalues, conf_int = _wald(params, cov, unident, use_t, df_resid, alpha)
    names = fs.names
    unidentified = [n for n, u in zip(names, unident.tolist()) if u]
    diverging = _diverging_from_solver(fit_result, names, J)
    notes = []
    if model.l2 > 0:
        notes.append(
            f"penalized fit (l2={model.l2:g}): the covariance is that of the Laplace "
            "approximation at the MAP estimate (posterior, not sampling, uncertainty)"
        )
    if fs.J is not None:
        notes.append(
            "softmax coefficients are reported as contrasts w_k - w_0 against class 0 "
            "(statsmodels' MNLogit parametrization; the fitted probabilities are unchanged)"
        )
    if unidentified:
        notes.append(
            f"information matrix has rank {ident.rank} < {H.shape[0]}: coefficients "
            f"{unidentified} are not identified (collinear or constant columns); "
            "their standard errors are NaN"
        )
    if fs.saturated > 0 and model.l2 == 0:
        if not diverging:
            diverging = _diverging_direction(H, grad, names, J)
        notes.append(
            f"{fs.saturated} fitted probabilities are numerically 0 or 1: the data "
            f"look (quasi-)separated; coefficients {diverging} diverge and their standard "
            "errors are meaningless. Use an L2 penalty (l2 > 0)."
        )
    elif diverging:
        notes.append(f"the solver reported separation: coefficients {diverging} diverge")
    if df_resid <= 0:
        notes.append(f"no residual degrees of freedom (nobs {fs.nobs:g} <= rank {rank}): "
                     "the dispersion, and with it every standard error, is undefined")
    if fit_result is not None and not fit_result.converged:
        notes.append(f"the solver did not converge: {fit_result.message}")

    return GLMResults(
        names=names,
        params=params,
        bse=bse,
        statistic=statistic,
        pvalues=pvalues,
        conf_int=conf_int,
        cov_params=cov,
        family=fam.name,
        link=fam.link.name,
        solver=None if fit_result is None else fit_result.solver,
        information=information,
        nobs=fs.nobs,
        n_rows=fs.n_rows,
        df_model=float(df_model),
        df_resid=float(df_resid),
        scale=float(fs.scale),
        llf=fs.llf,
        llnull=fs.llnull,
        deviance=fs.deviance,
        null_deviance=fs.null_deviance,
        pearson_chi2=fs.pearson,
        aic=-2 * fs.llf + 2 * rank,
        bic=-2 * fs.llf + rank * math.log(fs.nobs),
        n_iter=None if fit_result is None else int(fit_result.n_iter),
        converged=None if fit_result is None else bool(fit_result.converged),
        l2=float(model.l2),
        unidentified=unidentified,
        diverging=diverging,
        use_t=use_t,
        alpha=alpha,
        notes=notes,
    )


def _pearson_scale(pearson: float, df_resid: float) -> float:
    """``phi = X^2 / df_resid``; with ``df_resid <= 0`` it is undefined: like
    statsmodels (a division warning, then ``inf`` or ``nan``) return ``X^2 / 0``'s
    IEEE value, ``inf`` (``nan`` for a perfect fit), and warn."""
    if df_resid > 0:
        return pearson / df_resid
    warnings.warn(f"df_resid = {df_resid:g}: no residual degrees of freedom, the dispersion "
                  "(scale) is undefined; standard errors and tests are inf/nan", RuntimeWarning, stacklevel=3)
    return math.inf if pearson > 0 else math.nan


class _FitStats(NamedTuple):
    """The per-observation sums of one fit, before the covariance."""

    names: list[str]
    J: torch.Tensor | None  # reported coefficients = J theta (None: theta itself)
    S: torch.Tensor  # the objective's normalizer: the Hessian is that of a weighted mean
    nobs: float
    n_rows: int
    n_constants: int  # intercepts in the reported coefficients (df_model = rank - this)
    scale: float
    scale_from_pearson: bool
    concentrated: bool  # Gaussian identity: llf at phi = RSS / nobs
    pearson: float
    llf: float
    llnull: float
    deviance: float
    null_deviance: float
    saturated: int
    null_b0: torch.Tensor | None


def _scalar_stats(model, batches, dtype, feature_names) -> _FitStats:
    fam = model.family
    sums = _Sums(fam, dtype, flat_parameters(model).device)
    for batch in batches:
        eta, yb, w = _batch_eta(model, batch, dtype)
        sums.has_offset |= batch.offset is not None
        sums.add(eta, yb, w)
    sums.finish()
    nobs = float(sums.rows) if fam.weight_is_trials else float(sums.weight)
    b0 = _null_intercept(model, batches, dtype, sums)
    null_dev = torch.zeros((), dtype=dtype, device=sums.weight.device)
    for batch in batches:
        eta, yb, w = _batch_eta(model, batch, dtype)
        d = fam.unit_deviance(yb, fam.mean(_null_eta(batch, eta, b0, dtype)))
        null_dev = null_dev + (d if w is None else w * d).sum()
    all_reduce_sum(null_dev)
    dispersion = fam.has_dispersion
    return _FitStats(
        names=model.parameter_names(_features(model, feature_names)), J=None, S=sums.weight, nobs=nobs, n_rows=int(sums.rows),
        n_constants=1, scale=1.0, scale_from_pearson=dispersion,
        concentrated=fam.least_squares,
        pearson=float(sums.pearson),
        llf=float("nan") if dispersion else float(_log_likelihood(model, batches, dtype, 1.0)),
        llnull=float("nan") if dispersion else float(_log_likelihood(model, batches, dtype, 1.0, intercept=b0)),
        deviance=float(sums.deviance), null_deviance=float(null_dev), saturated=int(sums.saturated), null_b0=b0,
    )


def _categorical_stats(model, batches, dtype, feature_names) -> _FitStats:
    """Softmax regression: contrasts against class 0, multinomial log-likelihoods."""
    fam = model.family
    K, d = model.n_outputs, model.n_features
    has_bias = model.n_bias > 0
    device = flat_parameters(model).device
    counts = torch.zeros(K, dtype=dtype, device=device)
    S, rows, nll_sum, saturated = (torch.zeros((), dtype=dtype, device=device) for _ in range(4))
    for batch in batches:
        if batch.offset is not None:
            raise fail("offset", "no offsets for softmax-regression inference", "offsets")
        eta, yb, w = _batch_eta(model, batch, dtype)
        w = torch.ones(eta.shape[0], dtype=dtype, device=device) if w is None else w
        nll = fam.nll(eta, yb)
        S += w.sum()
        rows += eta.shape[0]
        nll_sum += (w * nll).sum()
        counts += torch.zeros_like(counts).index_add_(0, yb.long(), w)
        saturated += ((nll < 1e-10) & (w > 0)).sum()
    all_reduce_sum(S, rows, nll_sum, counts, saturated)
    llf = -float(nll_sum)
    llnull = float(torch.xlogy(counts, counts / S).sum())
    # J theta = [w_k - w_0, b_k - b_0] for k = 1..K-1 in the flat order [W.reshape(-1), b]
    p = K * d + (K if has_bias else 0)
    cols = d + has_bias
    J = torch.zeros((K - 1) * cols, p, dtype=dtype, device=device)
    features = _features(model, feature_names)
    names = []
    for k in range(1, K):
        for j in range(cols):
            row = (k - 1) * cols + j
            if j < d:
                J[row, k * d + j], J[row, j] = 1.0, -1.0
            else:
                J[row, K * d + k], J[row, K * d] = 1.0, -1.0
            names.append(f"{k}:{features[j] if j < d else 'intercept'}")
    return _FitStats(
        names=names, J=J, S=S, nobs=float(S), n_rows=int(rows), n_constants=(K - 1) if has_bias else 0,
        scale=1.0, scale_from_pearson=False, concentrated=False, pearson=float("nan"), llf=llf, llnull=llnull,
        deviance=-2 * llf, null_deviance=-2 * llnull, saturated=int(saturated), null_b0=None,
    )


def _wald(params, cov, unident, use_t: bool, df_resid: float, alpha: float):
    """Standard errors, z (or t) statistics, two-sided p-values and intervals."""
    var = torch.diagonal(cov).clone()
    var[unident] = float("nan")
    bse = var.sqrt()
    statistic = params / bse
    if use_t:
        pvalues = torch.as_tensor(2 * stats.t.sf(statistic.abs().cpu().numpy(), df_resid),
                                  dtype=params.dtype).to(params.device)
        q = float(stats.t.ppf(1 - alpha / 2, df_resid))
    else:
        # exp(log_ndtr) keeps the far tail (ndtr(-|z|) underflows to 0 near |z| = 8)
        pvalues = 2 * torch.exp(torch.special.log_ndtr(-statistic.abs()))
        q = float(stats.norm.ppf(1 - alpha / 2))
    conf_int = torch.stack([params - q * bse, params + q * bse], dim=1)
    return bse, statistic, pvalues, conf_int


def _diverging_direction(H: torch.Tensor, grad: torch.Tensor, names: list[str], J: torch.Tensor) -> list[str]:
    """Coefficients along the Newton step ``-H^+ g``: under separation the likelihood
    keeps rising along the separating direction, and the Newton step points along it
    (the solvers' own test, :mod:`torchglm.solvers.stepper`)."""
    v = (J @ identifiability(H).inverse @ grad).abs()
    big = v >= 0.1 * v.max()
    return [n for n, b in zip(names, big.tolist()) if b]


def fit_glm(model, x, y, weight=None, offset=None, solver: str = "irls", *, alpha: float = 0.05,
            use_t: bool = False, information: str | None = None, feature_names=None, **options) -> GLMResults:
    """Fit ``model`` with ``solver`` (see :func:`torchglm.solvers.fit`) and return its :class:`GLMResults`.

    ``x``, ``y``, ``weight``, ``offset`` may be tensors or array-likes (NumPy, pandas,
    scipy.sparse); a DataFrame's column names name the coefficients.

    Example:
        >>> res = fit_glm(GeneralizedLinearModel(3, "gamma", link="log"), x, y)
        >>> print(res.summary())
    """
    names = feature_names_of(x)
    x, y, weight, offset = model.as_data(x, y, weight, offset)  # converted once for fit and results
    fit_result = model.fit(x, y, weight=weight, offset=offset, solver=solver, **options)
    model.feature_names = names
    return glm_results(model, x, y, weight, offset, fit_result=fit_result, alpha=alpha, use_t=use_t,
                       information=information, feature_names=feature_names)
