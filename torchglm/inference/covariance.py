"""Covariance and tests at the estimate: the identifiable part of the information
(a generalized inverse), the Pearson dispersion, Wald statistics and p-values, and
the directions along which a separated fit diverges."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._validation import warn
from ..solvers.eta_derivatives import eta_derivatives
from ..solvers.layout import flat_parameters
from ..solvers.least_squares import Triangle, equilibrated_svd, penalty_rows

__all__ = ["Identifiability", "identifiability", "identifiability_of_factor", "information_factor"]

#: eigenvalues of the correlation-scaled information below this are null directions
_RANK_TOL = 1e-10


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


def information_factor(model, batches, expected: bool, S: torch.Tensor, dtype) -> torch.Tensor | None:
    """A triangle ``R`` with ``R^T R = S H``, the information of the summed negative
    log-likelihood plus the penalty, without forming it: the QR (:class:`Triangle`) of
    the rows ``sqrt(s_i h_i) [x_i, 1]`` (``h_i``: the per-sample curvature on the eta
    scale, ``s_i``: the sample weight) and of ``sqrt(l2 S)`` rows on the penalized
    weights. Possible where the information is a Gram matrix: a scalar family with
    every ``h_i >= 0`` (the expected information, or the observed one of a canonical
    link); ``None`` otherwise (softmax, a non-canonical link's observed information with
    a negative ``h_i``, a sparse design), where :func:`identifiability` of ``S H`` serves.
    """
    if model.family.multi_output:
        return None
    closed_form = expected or model.family.is_canonical
    theta = flat_parameters(model, dtype).to(model.param_device)
    triangle = Triangle()
    for batch in batches:
        if batch.x.layout != torch.strided:
            return None
        x = batch.x.to(dtype)
        eta = model.linear_predictor(theta, x, batch.offset)
        _, _, h = eta_derivatives(model.family, eta, batch.y, order=2, expected=closed_form)
        if batch.weight is not None:
            h = h * batch.weight.to(h.dtype)
        if not bool((h >= 0).all()):  # negative, or NaN
            return None
        cols = [x, torch.ones_like(x[:, :1])] if model.has_intercept else [x]
        triangle.add(torch.cat(cols, 1) * h.sqrt().unsqueeze(-1))
    R = triangle.gather()
    if R is None:
        return None
    if model.l2 > 0:
        triangle.add(penalty_rows(model, S, dtype, R.device))
        R = triangle.R
    return R


def identifiability_of_factor(R: torch.Tensor) -> Identifiability:
    """:func:`identifiability` of ``A = R^T R`` from its factor ``R``: the SVD of ``R``
    with unit column norms (the unit-diagonal scaling of ``A``), whose condition number
    is the square root of ``A``'s, so the covariance keeps twice the digits (NIST's
    Filip: about 7 correct digits of every standard deviation, none through ``A``), and
    the least-squares fit's own rank rule (:func:`~torchglm.solvers.least_squares.equilibrated_svd`),
    so inference and the ``qr`` fit agree on what is determined."""
    c, _, sv, Vh, keep = equilibrated_svd(R)
    keep = keep & (sv > 0)
    s = 1.0 / c
    V = Vh.T
    inv_c = (V[:, keep] / sv[keep] ** 2) @ V[:, keep].T
    return Identifiability(int(keep.sum()), inv_c * s.unsqueeze(0) * s.unsqueeze(1), V[:, ~keep], s)


def _pearson_scale(pearson: float, df_resid: float) -> float:
    """``phi = X^2 / df_resid``; with ``df_resid <= 0`` it is undefined: like
    statsmodels (a division warning, then ``inf`` or ``nan``) return ``X^2 / 0``'s
    IEEE value, ``inf`` (``nan`` for a perfect fit), and warn (at the caller of
    ``glm_results``)."""
    if df_resid > 0:
        return pearson / df_resid
    warn(
        f"df_resid = {df_resid:g}: no residual degrees of freedom, the dispersion "
        "(scale) is undefined; standard errors and tests are inf/nan",
        RuntimeWarning,
    )
    return math.inf if pearson > 0 else math.nan


def _wald(params, cov, unident, use_t: bool, df_resid: float, alpha: float):
    """Standard errors, z (or t) statistics, two-sided p-values and intervals."""
    from scipy import stats  # on first use: most of `import torchglm` before

    var = torch.diagonal(cov).clone()
    var[unident] = float("nan")
    bse = var.sqrt()
    statistic = params / bse
    if use_t:
        pvalues = torch.as_tensor(
            2 * stats.t.sf(statistic.abs().cpu().numpy(), df_resid), dtype=params.dtype
        ).to(params.device)
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


def _diverging_from_solver(fit_result, names, J: torch.Tensor) -> list[str]:
    """Names the solver flagged as diverging (``FitResult.extra.separation``)."""
    if fit_result is None:
        return []
    sep = fit_result.extra.separation
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
