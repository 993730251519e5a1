"""``glm_results`` as named steps (inputs -> curvature -> per-observation sums ->
covariance and tests -> notes) and ``fit_glm``, which fits and reports in one call."""

from __future__ import annotations

import inspect
import math
from typing import Iterable, NamedTuple

import torch

from .._validation import as_tensor, fail, feature_names_of
from ..data.batches import Batch, TensorBatches
from ..passes import FitResult
from ..solvers.layout import flat_parameters
from ..solvers.pass_sums import hessian_and_gradient
from .covariance import (
    Identifiability,
    _diverging_direction,
    _diverging_from_solver,
    _pearson_scale,
    _wald,
    identifiability,
    identifiability_of_factor,
    information_factor,
)
from .observations import check_cov_type, check_row_order, group_codes, robust_covariance
from .results import _COV_DESCRIPTIONS, GLMResults, _FitContext
from .statistics import _categorical_stats, _FitStats, _log_likelihood, _scalar_stats

__all__ = ["glm_results", "fit_glm", "glm_solver"]


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
    cov_type: str = "nonrobust",
    groups=None,
    freq_weights: torch.Tensor | None = None,
    var_weights: torch.Tensor | None = None,
) -> GLMResults:
    """Inference for a fitted GLM (see :mod:`torchglm.inference`).

    Softmax regression is reported as contrasts ``w_k - w_0`` against class 0
    (statsmodels' ``MNLogit`` parametrization): they are estimable although the
    symmetric parameters are not, and ``J G J^T`` is their covariance for any
    generalized inverse ``G`` of the information. Its offset is the model's: one
    value per sample added to every class's ``eta``, which the class probabilities
    do not see (``softmax(eta + o 1) = softmax(eta)``); the results equal those
    without it, and a note says so.

    Args:
        model: a fitted :class:`~torchglm.models.GeneralizedLinearModel`.
        x, y, weight, offset: the training data (checked like ``model.loss``),
            or ``batches``: re-iterable batches of checked data (e.g. the data
            module's ``train_batches()``); exactly one of the two.
        fit_result: the solver's :class:`~torchglm.passes.FitResult`
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
        cov_type: ``"nonrobust"`` (``phi`` times the inverse information), or a sandwich
            covariance robust to a misspecified variance (statsmodels'
            ``fit(cov_type=...)``, R's ``sandwich``): ``"HC0"``, ``"HC1"``, ``"HC2"``,
            ``"HC3"`` (``sandwich::vcovHC(type=...)``) or ``"cluster"``
            (``cov_kwds={"groups": groups}``, ``sandwich::vcovCL``); one more pass (see
            :func:`~torchglm.inference.observations.robust_covariance`). Scalar
            families only.
        groups: with ``cov_type="cluster"``, one cluster label per row of ``x`` (in the
            batches' order).
        freq_weights, var_weights: frequency and variance (prior) weights, as for
            :func:`fit_glm` (``freq_weights`` is another name of ``weight``); the model
            must have been fitted with their product. ``var_weights`` with ``x`` and
            ``y`` only.

    Returns:
        A :class:`GLMResults`.

    Raises:
        InputError: missing or duplicated data, an unknown ``information`` or
            ``cov_type``, ``groups`` without ``cov_type="cluster"`` (or the reverse, or
            not one label per row), parameters where the Hessian is not finite, both
            ``weight`` and ``freq_weights``, or ``var_weights`` that are not positive,
            with batches, with the binomial or categorical family, or with a robust
            ``cov_type``.

    Example:
        >>> x = torch.randn(200, 2); y = torch.poisson(torch.exp(0.5 * x[:, 0] - 0.3 * x[:, 1]))
        >>> m = GeneralizedLinearModel(2, "poisson")
        >>> fr = m.fit(x, y, solver="irls")
        >>> print(glm_results(m, x, y, fit_result=fr).summary())
                               Generalized linear model results
        ==============================================================================
        Family:                        poisson  No. observations:                  200
        Link:                              log  Df residuals:                      197
        Solver:                           irls  Df model:                            2
        ...
                           coef    std err        z    P>|z|      [0.025      0.975]
        ------------------------------------------------------------------------------
        x0 ...
        x1 ...
        intercept ...
        ==============================================================================
    """
    weight, var_weights = _prior_weights(model, weight, freq_weights, var_weights, x is not None, cov_type)
    batches, feature_names, information, freq, var = _inputs(
        model, x, y, weight, offset, batches, fit_result, information, alpha, feature_names, var_weights
    )
    check_cov_type(model, cov_type, groups)
    grad, H = _curvature(model, batches, information, dtype)
    stats_of = _categorical_stats if model.family.multi_output else _scalar_stats
    fs = stats_of(model, batches, dtype, feature_names)
    if var is not None:
        # the observations are the rows (each counted f_i times), not the sum of f_i v_i
        fs = fs._replace(nobs=float(fs.n_rows if freq is None else freq.sum()))
    factor = information_factor(model, batches, information == "expected", fs.S, dtype)
    est = _estimate(model, batches, dtype, fs, H, use_t, alpha, factor, var)
    fs = est.fs
    theta = flat_parameters(model, dtype).to(H.device)
    normalized_cov = est.J @ est.ident.inverse @ est.J.T
    n_groups = None
    if cov_type != "nonrobust":
        est, n_groups = _robust(model, theta, batches, fs, est, information, cov_type, groups, use_t, alpha)
    unidentified = [n for n, u in zip(fs.names, est.unident.tolist()) if u]
    diverging = _diverging_from_solver(fit_result, fs.names, est.J)
    if fs.saturated > 0 and model.l2 == 0 and not diverging:
        diverging = _diverging_direction(H, grad, fs.names, est.J)
    return GLMResults(
        names=fs.names,
        params=est.params,
        bse=est.bse,
        statistic=est.statistic,
        pvalues=est.pvalues,
        conf_int=est.conf_int,
        cov_params=est.cov,
        family=model.family.name,
        link=model.family.link.name,
        solver=None if fit_result is None else fit_result.solver,
        information=information,
        nobs=fs.nobs,
        n_rows=fs.n_rows,
        df_model=float(est.df_model),
        df_resid=float(est.df_resid),
        scale=float(fs.scale),
        llf=fs.llf,
        llf_mle=fs.llf,
        llnull=fs.llnull,
        deviance=fs.deviance,
        null_deviance=fs.null_deviance,
        pearson_chi2=fs.pearson,
        aic=-2 * fs.llf + 2 * est.rank,
        bic=-2 * fs.llf + est.rank * math.log(fs.nobs),
        n_iter=None if fit_result is None else int(fit_result.n_iter),
        converged=None if fit_result is None else bool(fit_result.converged),
        l2=float(model.l2),
        unidentified=unidentified,
        diverging=diverging,
        use_t=use_t,
        alpha=alpha,
        notes=_notes(model, fs, est, unidentified, diverging, fit_result, cov_type, n_groups),
        cov_type=cov_type,
        n_groups=n_groups,
        df_inference=float(est.df_resid if n_groups is None else n_groups - 1),
        normalized_cov_params=normalized_cov,
        _fit=_FitContext(model, theta, batches, information == "expected", var is not None),
    )


def _prior_weights(model, weight, freq_weights, var_weights, in_memory: bool, cov_type: str):
    """The frequency weights (``weight`` or ``freq_weights``) and the variance weights,
    checked for the combinations this module supports."""
    if weight is not None and freq_weights is not None:
        raise fail("freq_weights", "either weight or freq_weights (two names of the same weights)", "both")
    weight = freq_weights if freq_weights is not None else weight
    if var_weights is None:
        return weight, None
    fam = model.family
    if not in_memory:
        raise fail("var_weights", "x and y (in-memory data; batches carry one weight)", "batches")
    if fam.weight_is_trials or fam.multi_output:
        raise fail("var_weights", "a family whose weight is not trials or classes", repr(fam.name))
    if cov_type != "nonrobust":
        raise fail("cov_type", "'nonrobust' with var_weights", repr(cov_type))
    return weight, var_weights


def _var_weights(var_weights, x: torch.Tensor) -> torch.Tensor:
    """Variance weights as a tensor like ``x``'s rows: finite and positive (``phi / v_i``
    is a row's dispersion)."""
    v = as_tensor("var_weights", var_weights, x)
    if not isinstance(v, torch.Tensor) or v.shape != (x.shape[0],):
        raise fail("var_weights", f"one positive weight per row ({x.shape[0]})", getattr(v, "shape", v))
    if not bool((torch.isfinite(v) & (v > 0)).all()):
        raise fail("var_weights", "finite positive weights", f"min {float(v.min())}")
    return v


def _inputs(model, x, y, weight, offset, batches, fit_result, information, alpha, feature_names, var=None):
    """Check the arguments; the data as re-iterable batches (with the product of the
    frequency and variance weights, the objective's), the coefficient names' source, the
    information to use, and the frequency and variance weights."""
    if (batches is None) == (x is None):
        raise fail("x/batches", "either x and y or batches", "both" if x is not None else "neither")
    if feature_names is None:
        feature_names = feature_names_of(x) or getattr(model, "feature_names", None)
    if batches is None:
        x, y, weight, offset = model.as_data(x, y, weight, offset)
        if var is not None:
            var = _var_weights(var, x)
        prior = var if weight is None else (weight if var is None else weight * var)
        x, y = model.check_data(x, y, prior, offset)
        batches = TensorBatches(x, y, prior, offset)
    if information is None:
        information = "expected" if fit_result is not None and fit_result.solver == "irls" else "observed"
    if information not in ("observed", "expected"):
        raise fail("information", "'observed' or 'expected'", repr(information))
    if not 0 < alpha < 1:
        raise fail("alpha", "a level in (0, 1)", alpha)
    return batches, feature_names, information, weight, var


def _curvature(model, batches, information: str, dtype):
    """Gradient and Hessian ``H`` of the objective (a weighted mean) at the estimate."""
    _, grad, H = hessian_and_gradient(model, batches, expected=information == "expected", dtype=dtype)
    if not bool(torch.isfinite(H).all()):
        raise fail(
            "model",
            "parameters where the likelihood and its curvature are finite (a fitted model)",
            "a non-finite Hessian: eta lies outside the family's mean domain",
        )
    return grad, H


class _Estimate(NamedTuple):
    """The reported coefficients ``J theta``, their covariance and Wald tests."""

    fs: _FitStats  # with the dispersion (and the log-likelihoods at it) filled in
    ident: Identifiability
    J: torch.Tensor
    params: torch.Tensor
    cov: torch.Tensor
    bse: torch.Tensor
    statistic: torch.Tensor
    pvalues: torch.Tensor
    conf_int: torch.Tensor
    unident: torch.Tensor
    rank: int
    df_model: float
    df_resid: float


def _estimate(
    model,
    batches,
    dtype,
    fs: _FitStats,
    H,
    use_t: bool,
    alpha: float,
    factor: torch.Tensor | None = None,
    var: torch.Tensor | None = None,
) -> _Estimate:
    """``Cov(J theta^) = phi J (S H)^- J^T`` (a generalized inverse of the information
    ``S H``, from its factor ``R^T R = S H`` where there is one), the dispersion ``phi``
    and the Wald statistics. With variance weights ``v_i`` row ``i`` has the dispersion
    ``phi / v_i`` in the log-likelihoods (statsmodels' ``var_weights``)."""
    ident = identifiability(fs.S * H) if factor is None else identifiability_of_factor(factor)
    J = fs.J if fs.J is not None else torch.eye(H.shape[0], dtype=dtype, device=H.device)
    theta = flat_parameters(model, dtype).to(H.device)
    params = J @ theta
    unident = ident.unidentified(None if fs.J is None else J)
    # statsmodels counts the rank of the design; for softmax contrasts, the estimable ones
    rank = ident.rank if fs.J is None else int((~unident).sum())
    df_model = rank - fs.n_constants
    df_resid = fs.nobs - rank
    # the dispersion's maximum-likelihood estimate where it has a closed form (RSS / n for
    # the Gaussian, every link; R's logLik): llf is then the maximized likelihood, and AIC
    # compares fits across links. Else (the Gamma) the Pearson scale, as statsmodels.
    phi_mle = model.family.mle_dispersion(fs.pearson, fs.nobs) if fs.scale_from_pearson else None
    if fs.scale_from_pearson:
        scale = _pearson_scale(fs.pearson, df_resid)
        llf_scale = scale if phi_mle is None else phi_mle
        fs = fs._replace(
            scale=scale,
            llf=float(_log_likelihood(model, batches, dtype, llf_scale, var_weight=var)),
            llnull=float(_log_likelihood(model, batches, dtype, scale, intercept=fs.null_b0, var_weight=var)),
        )
    cov = fs.scale * (J @ ident.inverse @ J.T)
    bse, statistic, pvalues, conf_int = _wald(params, cov, unident, use_t, df_resid, alpha)
    return _Estimate(
        fs,
        ident,
        J,
        params,
        cov,
        bse,
        statistic,
        pvalues,
        conf_int,
        unident,
        rank,
        df_model,
        df_resid,
    )


def _robust(
    model, theta, batches, fs: _FitStats, est: _Estimate, information, cov_type, groups, use_t, alpha
):
    """The estimate with a sandwich covariance and its Wald tests (t tests of a cluster
    covariance on ``G - 1`` degrees of freedom, statsmodels' ``df_correction``)."""
    codes, n_groups = None, None
    if cov_type == "cluster":
        check_row_order(batches, "cluster labels")
        codes, n_groups = group_codes(groups, fs.n_rows)
    cov = robust_covariance(
        model,
        theta,
        batches,
        est.ident.inverse,
        cov_type,
        codes,
        n_groups,
        fs.nobs,
        est.rank,
        information == "expected",
    )
    df = est.df_resid if n_groups is None else n_groups - 1
    bse, statistic, pvalues, conf_int = _wald(est.params, cov, est.unident, use_t, df, alpha)
    est = est._replace(cov=cov, bse=bse, statistic=statistic, pvalues=pvalues, conf_int=conf_int)
    return est, n_groups


def _notes(
    model,
    fs: _FitStats,
    est: _Estimate,
    unidentified,
    diverging,
    fit_result,
    cov_type="nonrobust",
    n_groups=None,
) -> list[str]:
    """The warnings printed under the table."""
    notes = []
    if cov_type != "nonrobust":
        groups = f" over {n_groups} clusters" if n_groups is not None else ""
        notes.append(f"covariance: {_COV_DESCRIPTIONS[cov_type]}{groups}")
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
    if fs.shift_offset:
        notes.append(
            "the offset is added to every class's eta; softmax probabilities are invariant to a "
            "common shift, so it changes no estimate (a class-specific offset is not supported)"
        )
    if unidentified:
        notes.append(
            f"information matrix has rank {est.ident.rank} < {est.J.shape[1]}: coefficients "
            f"{unidentified} are not identified (collinear or constant columns); "
            "their standard errors are NaN"
        )
    if fs.saturated > 0 and model.l2 == 0:
        notes.append(
            f"{fs.saturated} fitted probabilities are numerically 0 or 1: the data "
            f"look (quasi-)separated; coefficients {diverging} diverge and their standard "
            "errors are meaningless. Use an L2 penalty (l2 > 0)."
        )
    elif diverging:
        notes.append(f"the solver reported separation: coefficients {diverging} diverge")
    if est.df_resid <= 0:
        notes.append(
            f"no residual degrees of freedom (nobs {fs.nobs:g} <= rank {est.rank}): "
            "the dispersion, and with it every standard error, is undefined"
        )
    if fit_result is not None and not fit_result.converged:
        notes.append(f"the solver did not converge: {fit_result.message}")
    return notes


def glm_solver(model, x, options: dict) -> str:
    """The solver :func:`fit_glm`'s ``"auto"`` picks: ``qr`` for the Gaussian family with
    its identity link, ``irls`` (Fisher scoring, R's and statsmodels' ``glm``) otherwise.

    Least squares by IRLS (one Newton step) solves the normal equations, whose
    condition number is ``cond(X~)^2``: on NIST's Filip (``cond ~ 1e15`` after
    centring) no digit is left, where Householder QR keeps about 7.5 (its error grows
    like ``eps cond(X~)``; Higham, "Accuracy and Stability of Numerical Algorithms",
    2002, 19.3). QR takes batches, offsets, weights and the L2 penalty; a sparse design
    (densified per batch there) and options QR does not take (e.g. ``gtol``) keep IRLS.
    """
    if not model.family.least_squares or x.layout != torch.strided:
        return "irls"
    from ..solvers.api import fit
    from ..solvers.least_squares import QRFitter

    # fit's own arguments (batch_size, dtype, ...) and QR's options
    taken = set(inspect.signature(QRFitter.__init__).parameters) | set(inspect.signature(fit).parameters)
    return "qr" if set(options) <= taken else "irls"


def fit_glm(
    model,
    x,
    y,
    weight=None,
    offset=None,
    solver: str = "auto",
    *,
    alpha: float = 0.05,
    use_t: bool = False,
    information: str | None = None,
    feature_names=None,
    cov_type: str = "nonrobust",
    groups=None,
    freq_weights=None,
    var_weights=None,
    **options,
) -> GLMResults:
    """Fit ``model`` with ``solver`` (see :func:`torchglm.solvers.fit`) and return its :class:`GLMResults`.

    ``solver="auto"`` (the default) is :func:`glm_solver`'s choice: Householder QR for
    the Gaussian family with the identity link, IRLS otherwise; ``fit_result.extra``
    records ``solver_choice="auto"`` and ``fit_result.solver`` the solver that ran.

    ``x``, ``y``, ``weight``, ``offset`` may be tensors or array-likes (NumPy, pandas,
    scipy.sparse); a DataFrame's column names name the coefficients. ``cov_type`` and
    ``groups`` choose a robust covariance (:func:`glm_results`; statsmodels'
    ``fit(cov_type="HC1")``, ``fit(cov_type="cluster", cov_kwds={"groups": g})``).

    Two kinds of weights, named as statsmodels' ``GLM`` names them (McCullagh & Nelder
    §2.2.2 for prior weights):

    * ``freq_weights`` ``f_i`` (``weight`` is the same argument under its former name,
      and keeps that meaning): row ``i`` stands for ``f_i`` identical observations. The
      number of observations is ``sum_i f_i`` and ``df_resid = sum_i f_i - p``; for the
      binomial they are the trials.
    * ``var_weights`` ``v_i`` (prior weights): ``Var(y_i) = phi V(mu_i) / v_i``, e.g. a
      mean of ``v_i`` observations. They enter the estimating equations as ``f_i`` does,
      so the coefficients are those of the product ``f_i v_i``, but the rows stay the
      observations: ``nobs = sum_i f_i`` (the rows without ``freq_weights``),
      ``df_resid = nobs - p``, ``phi = sum_i f_i v_i (y_i - mu_i)^2 / V(mu_i) / df_resid``
      and ``llf = sum_i f_i log p(y_i | mu_i, phi / v_i)``.

    R's ``glm(weights = w)`` are prior weights: its coefficients and deviance equal
    either kind's, its dispersion and standard errors (``df.residual = n - p``) those of
    ``var_weights=w``. For the families with a fixed
    dispersion (Poisson, Bernoulli) the two differ only in ``nobs``, ``df_resid`` and BIC.
    ``var_weights`` are refused for the binomial (whose weights are trials) and the
    categorical family, and with a robust ``cov_type``; residuals and influence are
    not available after a ``var_weights`` fit.

    Example:
        >>> x = torch.randn(200, 3)
        >>> y = torch.distributions.Gamma(2.0, 2.0 / torch.exp(0.5 * x[:, 0])).sample()  # mean exp(0.5 x0)
        >>> res = fit_glm(GeneralizedLinearModel(3, "gamma", link="log"), x, y)
        >>> print(res.summary())
                               Generalized linear model results
        ==============================================================================
        Family:                          gamma  No. observations:                  200
        Link:                              log  Df residuals:                      196
        ...
        x0 ...
        x1 ...
        x2 ...
        intercept ...
        ==============================================================================
    """
    check_cov_type(model, cov_type, groups)  # before the fit: a wrong argument costs no fit
    weight, var_weights = _prior_weights(model, weight, freq_weights, var_weights, True, cov_type)
    names = feature_names_of(x)
    x, y, weight, offset = model.as_data(x, y, weight, offset)  # converted once for fit and results
    if groups is not None:
        group_codes(groups, x.shape[0])  # one label per row, checked before the fit
    var = None if var_weights is None else _var_weights(var_weights, x)
    prior = var if weight is None else (weight if var is None else weight * var)
    name = glm_solver(model, x, options) if solver == "auto" else solver
    fit_result = model.fit(x, y, weight=prior, offset=offset, solver=name, **options)
    fit_result.extra.solver_choice = "auto" if solver == "auto" else "user"
    model.feature_names = names
    return glm_results(
        model,
        x,
        y,
        weight,
        offset,
        fit_result=fit_result,
        alpha=alpha,
        use_t=use_t,
        information=information,
        feature_names=feature_names,
        cov_type=cov_type,
        groups=groups,
        var_weights=var,
    )
