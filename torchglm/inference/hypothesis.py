"""Tests between and within fitted GLMs: the likelihood-ratio (analysis of deviance) test
of nested fits and the Wald test of linear hypotheses ``R beta = q``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._validation import fail

__all__ = ["LRTestResults", "WaldTestResults", "lr_test", "wald_test"]


@dataclass(frozen=True)
class LRTestResults:
    """An analysis-of-deviance test (R's ``anova(small, big, test=...)`` row).

    Attributes:
        statistic: the chi-square statistic ``D / phi`` or the F statistic
            ``(D / df) / phi``.
        pvalue: its upper tail probability.
        df_diff: ``df_resid(small) - df_resid(big)``.
        deviance_diff: ``D = deviance(small) - deviance(big)`` (R's ``Deviance`` column).
        test: ``"chisq"`` or ``"F"``.
        scale: ``phi``, the bigger model's dispersion (1 for families without one).
    """

    statistic: float
    pvalue: float
    df_diff: float
    deviance_diff: float
    test: str
    scale: float


def lr_test(small, big, test: str = "chisq") -> LRTestResults:
    """Likelihood-ratio test of a fit ``small`` nested in ``big`` (same data, family and
    link; ``small``'s columns span a subspace of ``big``'s).

    The deviance difference ``D = dev(small) - dev(big)`` is ``2 (llf(big) - llf(small))``
    at ``phi = 1``; under the smaller model ``D / phi ~ chi^2(df)`` asymptotically, with
    ``df = df_resid(small) - df_resid(big)`` (McCullagh & Nelder §4.4.3). Where ``phi`` is
    estimated (Gaussian, Gamma) R's ``anova.glm`` divides by the bigger model's Pearson
    dispersion: ``test="chisq"`` is R's ``test="Chisq"`` (``D / phi`` against chi-square),
    ``test="F"`` R's ``test="F"`` (``(D / df) / phi`` against ``F(df, df_resid(big))``,
    exact for the Gaussian with the identity link: statsmodels' OLS ``compare_f_test``).
    For Bernoulli, binomial, Poisson, exponential and categorical ``phi = 1``: the
    statistic is the likelihood ratio ``2 (llf(big) - llf(small))``.

    Args:
        small, big: :class:`~torchglm.inference.GLMResults` of the two fits.
        test: ``"chisq"`` or ``"F"``.

    Returns:
        :class:`LRTestResults`.

    Raises:
        InputError: different families, links or observations, ``big`` not the bigger
            model, an unknown ``test``, or a penalized fit (its deviance is not a
            likelihood ratio).

    Example:
        >>> x = torch.randn(200, 2, dtype=torch.float64)
        >>> y = torch.poisson(torch.exp(0.3 + 0.5 * x[:, 0]))
        >>> big = fit_glm(GeneralizedLinearModel(2, "poisson", dtype=torch.float64), x, y)
        >>> small = fit_glm(GeneralizedLinearModel(1, "poisson", dtype=torch.float64), x[:, :1], y)
        >>> r = lr_test(small, big)
        >>> r.df_diff, 0 <= r.pvalue <= 1
        (1.0, True)
    """
    from scipy import stats  # on first use: most of `import torchglm` before

    if test not in ("chisq", "F"):
        raise fail("test", "'chisq' or 'F'", repr(test))
    if (small.family, small.link) != (big.family, big.link):
        raise fail("big", f"a {small.family}/{small.link} fit like small", f"{big.family}/{big.link}")
    if small.nobs != big.nobs:
        raise fail("big", f"a fit to the same {small.nobs:g} observations", f"{big.nobs:g}")
    if small.penalized or big.penalized:
        raise fail("small/big", "unpenalized fits (l2 = 0)", f"l2 = {small.l2:g} and {big.l2:g}")
    df = small.df_resid - big.df_resid
    if df <= 0:
        raise fail("big", "the bigger model (fewer residual degrees of freedom than small)", f"{df:g} fewer")
    dev = small.deviance - big.deviance
    scale = big.scale
    if test == "F":
        stat = dev / df / scale
        p = float(stats.f.sf(stat, df, big.df_resid))
    else:
        stat = dev / scale
        p = float(stats.chi2.sf(stat, df))
    return LRTestResults(float(stat), p, float(df), float(dev), test, float(scale))


@dataclass(frozen=True)
class WaldTestResults:
    """A Wald test of ``R beta = q`` (statsmodels' ``ContrastResults`` names).

    Attributes:
        statistic: ``W = (R b - q)^T (R V R^T)^{-1} (R b - q)`` (chi-square), or
            ``W / df_num`` (F).
        pvalue: its upper tail probability.
        df_num: the number of restrictions (rows of ``R``).
        df_denom: the F test's denominator degrees of freedom (``None`` for chi-square).
        distribution: ``"chi2"`` or ``"F"``.
    """

    statistic: float
    pvalue: float
    df_num: int
    df_denom: float | None
    distribution: str


def wald_test(params, cov, R, q=None, use_f: bool = False, df_denom: float | None = None) -> WaldTestResults:
    """Wald test of ``R beta = q`` with the covariance ``V`` (Wald 1943; Greene §5.4):
    ``W = (R b - q)^T (R V R^T)^{-1} (R b - q) ~ chi^2(m)``, or ``W / m ~ F(m, df_denom)``.
    See :meth:`GLMResults.wald_test`."""
    from scipy import stats  # on first use: most of `import torchglm` before

    p = params.shape[0]
    R = torch.as_tensor(np.asarray(R, dtype=float), dtype=params.dtype, device=params.device)
    if R.dim() == 1:
        R = R.unsqueeze(0)
    if R.dim() != 2 or R.shape[1] != p:
        raise fail("R", f"a restriction matrix with {p} columns", f"shape {tuple(R.shape)}")
    m = R.shape[0]
    q = torch.zeros(m, dtype=params.dtype) if q is None else torch.as_tensor(np.asarray(q, dtype=float))
    q = q.to(params).reshape(-1)
    if q.shape[0] != m:
        raise fail("q", f"{m} values (one per row of R)", q.shape[0])
    d = R @ params - q
    RVR = R @ cov @ R.T
    if not bool(torch.isfinite(RVR).all()) or int(torch.linalg.matrix_rank(RVR)) < m:
        raise fail("R", "linearly independent restrictions on identified coefficients", "a singular R V R^T")
    W = float(d @ torch.linalg.solve(RVR, d))
    if use_f:
        return WaldTestResults(W / m, float(stats.f.sf(W / m, m, df_denom)), m, float(df_denom), "F")
    return WaldTestResults(W, float(stats.chi2.sf(W, m)), m, None, "chi2")
