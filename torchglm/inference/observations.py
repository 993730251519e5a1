"""Per-observation quantities of a fitted scalar GLM, each computed in one pass over the
batches: the sandwich (heteroscedasticity- and cluster-robust) covariances, residuals,
leverage and Cook's distance.

Notation (the passes' own): ``x~_i = [x_i, 1]`` the design row with the intercept,
``s_i`` the sample weight (frequency weight; trials for the binomial), ``d_i`` the
derivative of the per-unit NLL in ``eta`` at ``phi = 1`` (the score is ``-d_i x~_i``),
``w_i`` the curvature in ``eta`` (the IRLS weight ``mu'(eta)^2 / V(mu)`` for the expected
information, the second derivative for the observed one) and ``G = (sum_i s_i w_i x~_i
x~_i^T + penalty)^{-1}`` the (generalized) inverse of the information at ``phi = 1``. The
leverage ``h_i = s_i w_i x~_i^T G x~_i`` (the diagonal of the hat matrix ``W^{1/2} X G X^T
W^{1/2}``, McCullagh & Nelder §12.5) is computed row by row: no ``n x n`` matrix is formed.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .._validation import fail
from ..passes import all_reduce_sum
from ..solvers.eta_derivatives import eta_derivatives

#: the covariance types of :func:`robust_covariance` (statsmodels' ``cov_type`` names;
#: R's ``sandwich::vcovHC(type=...)`` and ``sandwich::vcovCL``)
COV_TYPES = ("nonrobust", "HC0", "HC1", "HC2", "HC3", "cluster")


class _Rows(NamedTuple):
    """One batch's per-row parts at the estimate (all in the computation dtype)."""

    xt: torch.Tensor  # (n, p) design with the intercept column
    y: torch.Tensor
    s: torch.Tensor  # sample weights (ones without)
    eta: torch.Tensor
    mu: torch.Tensor
    d1: torch.Tensor  # dNLL/deta at phi = 1, per unit
    w: torch.Tensor  # curvature in eta, per unit


def _rows(model, theta, batch, dtype, expected: bool) -> _Rows:
    x = batch.x.to_dense() if batch.x.layout != torch.strided else batch.x
    x = x.to(dtype)
    offset = None if batch.offset is None else batch.offset.to(dtype)
    eta = model.linear_predictor(theta, x, offset)
    y = batch.y.to(dtype)
    _, d1, w = eta_derivatives(model.family, eta, y, order=2, expected=expected)
    s = torch.ones_like(eta) if batch.weight is None else batch.weight.to(dtype)
    xt = torch.cat([x, torch.ones_like(x[:, :1])], 1) if model.has_intercept else x
    return _Rows(xt, y, s, eta, model.family.mean(eta), d1, w)


def check_cov_type(model, cov_type: str, groups) -> None:
    """``cov_type`` is one of :data:`COV_TYPES`, ``groups`` given exactly for ``"cluster"``,
    and a robust type only for the scalar families."""
    if cov_type not in COV_TYPES:
        raise fail("cov_type", f"one of {list(COV_TYPES)}", repr(cov_type))
    if (groups is None) == (cov_type == "cluster"):
        raise fail(
            "groups", "group labels (one per row) exactly with cov_type='cluster'", type(groups).__name__
        )
    if cov_type != "nonrobust" and model.family.multi_output:
        raise fail("cov_type", "'nonrobust' for the categorical family", repr(cov_type))


def check_row_order(batches, what: str) -> None:
    """Per-row inputs and outputs follow the batches' order: refuse shuffled batches."""
    if getattr(batches, "shuffle", False):
        raise fail("batches", f"batches in a fixed row order (shuffle=False) for {what}", "shuffled batches")


def group_codes(groups, n_rows: int) -> tuple[torch.Tensor, int]:
    """Integer codes ``0..G-1`` of the rows' group labels (any hashable NumPy-able labels)."""
    labels = np.asarray(groups.cpu() if isinstance(groups, torch.Tensor) else groups)
    if labels.ndim != 1 or labels.shape[0] != n_rows:
        raise fail("groups", f"one label per row ({n_rows})", f"shape {labels.shape}")
    _, codes = np.unique(labels, return_inverse=True)
    n_groups = int(codes.max()) + 1
    if n_groups < 2:
        raise fail("groups", "at least 2 clusters", n_groups)
    return torch.from_numpy(codes.reshape(-1)), n_groups


def robust_covariance(
    model, theta, batches, G, cov_type: str, codes, n_groups: int, nobs: float, rank: int, expected: bool
) -> torch.Tensor:
    """The sandwich ``G M G`` (Huber 1967; White 1980; Zeileis 2006, R's ``sandwich``),
    robust to a misspecified variance function, in one pass.

    The meat ``M`` sums the scores ``u_i = d_i x~_i`` (per unit; ``s_i d_i x~_i`` for the
    binomial, whose weight is the trials of one observation):

    * ``HC0``: ``M = sum_i s_i u_i u_i^T`` (White; statsmodels' GLM ``cov_type="HC0"``);
    * ``HC1``: HC0 times ``nobs / (nobs - rank)``;
    * ``HC2``, ``HC3``: each term divided by ``1 - h_i`` or ``(1 - h_i)^2`` (MacKinnon &
      White 1985), ``h_i`` the leverage of one unit (``h_i / s_i`` for frequency weights,
      so a weight of 2 is the row twice). These are ``sandwich::vcovHC``'s for a ``glm``;
      statsmodels' GLM returns HC0 for all four types;
    * ``cluster``: ``M = sum_g U_g U_g^T``, ``U_g = sum_{i in g} s_i u_i``, times
      ``G/(G-1) (nobs-1)/(nobs-rank)`` (statsmodels' ``cov_type="cluster"`` with its
      default ``use_correction=True``; Stata's CRV1).

    ``phi`` cancels: the scores and the information both carry ``1/phi``. For a penalized
    fit ``G`` includes the penalty (the meat does not: the penalty is not random). The sums are
    all-reduced under ``torch.distributed``; for ``cluster`` every process must then see
    the same set of group labels (the codes index one shared ``(G, p)`` sum).
    """
    trials = model.family.weight_is_trials
    p = G.shape[0]
    meat = torch.zeros(p, p, dtype=G.dtype, device=G.device)
    U = torch.zeros(n_groups, p, dtype=G.dtype, device=G.device) if cov_type == "cluster" else None
    start = 0
    for batch in batches:
        r = _rows(model, theta, batch, G.dtype, expected)
        u = r.d1.unsqueeze(1) * r.xt
        if U is not None:
            rows = codes[start : start + u.shape[0]].to(G.device)
            start += u.shape[0]
            U.index_add_(0, rows, r.s.unsqueeze(1) * u)
            continue
        if trials:  # one observation of s_i trials: its score is s_i u_i, counted once
            u, count = r.s.unsqueeze(1) * u, torch.ones_like(r.s)
        else:  # s_i copies of the unit score
            count = r.s
        omega = count
        if cov_type in ("HC2", "HC3"):
            h_unit = (r.s if trials else 1.0) * r.w * ((r.xt @ G) * r.xt).sum(1)
            omega = omega / (1 - h_unit) ** (1 if cov_type == "HC2" else 2)
        meat += (u * omega.unsqueeze(1)).T @ u
    if U is not None:
        all_reduce_sum(U)
        meat = U.T @ U * (n_groups / (n_groups - 1) * (nobs - 1) / (nobs - rank))
    else:
        all_reduce_sum(meat)
        if cov_type == "HC1":
            meat = meat * (nobs / (nobs - rank))
    return G @ meat @ G


class GLMInfluence(NamedTuple):
    """Residuals, leverage and Cook's distance of every row, (n,) each (statsmodels'
    ``GLMInfluence`` names; its ``cooks_distance`` is a pair with p-values, this one the
    distances only). See :func:`observations`."""

    resid_response: torch.Tensor
    resid_working: torch.Tensor
    resid_pearson: torch.Tensor
    resid_deviance: torch.Tensor
    hat_matrix_diag: torch.Tensor
    cooks_distance: torch.Tensor


def observations(model, theta, batches, G, scale: float, rank: int, expected: bool) -> GLMInfluence:
    """Residuals (statsmodels' and R's definitions), leverage and Cook's distance, one pass.

    With ``a_i`` the trials for the binomial and 1 otherwise (a frequency weight does not
    change a row's residual):

    * response ``y - mu``; working ``(y - mu) / mu'(eta)`` (``(y - mu) g'(mu)``); for the
      binomial on the proportions' scale, as R's ``residuals.glm`` (statsmodels multiplies
      the response residual by the trials and the working residual by their square);
    * Pearson ``sqrt(a_i) (y - mu) / sqrt(V(mu))``; deviance ``sign(y - mu) sqrt(a_i d(y, mu))``;
    * leverage ``h_i = s_i w_i x~_i^T G x~_i`` (R's ``hatvalues``; statsmodels'
      ``get_hat_matrix_diag``: it sums to the rank);
    * Cook's distance ``r_P,i^2 h_i / (phi rank (1 - h_i)^2)`` (R's ``cooks.distance``;
      McCullagh & Nelder §12.7.3).
    """
    fam = model.family
    parts = {k: [] for k in GLMInfluence._fields}
    for batch in batches:
        r = _rows(model, theta, batch, G.dtype, expected)
        a = r.s if fam.weight_is_trials else torch.ones_like(r.s)
        resid = r.y - r.mu
        h = r.s * r.w * ((r.xt @ G) * r.xt).sum(1)
        pearson = a.sqrt() * resid / fam.variance(r.mu).sqrt()
        parts["resid_response"].append(resid)
        parts["resid_working"].append(resid / fam.link.inverse_derivative(r.eta))
        parts["resid_pearson"].append(pearson)
        parts["resid_deviance"].append(resid.sign() * (a * fam.unit_deviance(r.y, r.mu)).clamp_min(0).sqrt())
        parts["hat_matrix_diag"].append(h)
        parts["cooks_distance"].append(pearson**2 * h / (scale * rank * (1 - h) ** 2))
    return GLMInfluence(*(torch.cat(parts[k]) for k in GLMInfluence._fields))
