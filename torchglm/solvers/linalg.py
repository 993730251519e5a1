"""Solving the Newton system ``H delta = -g`` robustly.

Cholesky first (``H`` is symmetric positive definite for a convex loss with
an identifiable model, seed 003); when it fails or the pivots reveal a
numerically singular ``H`` (a duplicated column, separation, an unpenalized
softmax) or an indefinite one (a non-canonical link far from the optimum), an
eigendecomposition gives the modified step

    delta = -sum_i [ |lambda_i| > r ] u_i u_i^T g / |lambda_i|,
    r = max(p, 10) eps max_i |lambda_i|,

the minimum-norm step on the well-determined eigen-directions, always a
descent direction (Nocedal & Wright, "Numerical Optimization", 2nd ed., 3.4).
"""

from __future__ import annotations

import torch

__all__ = ["newton_direction", "shift_null_projector"]


def newton_direction(H: torch.Tensor, g: torch.Tensor, rtol: float | None = None):
    """Solve ``H delta = -g`` by Cholesky, with an eigenvalue fallback.

    Args:
        H: symmetric (p, p) Hessian (or expected information).
        g: gradient, shape (p,).
        rtol: relative cutoff, on the squared pivot ratio of the Cholesky factor and
            on the eigenvalues of the fallback (default ``max(p, 10) eps``: below it
            ``H`` is singular to working precision).

    Returns:
        ``(delta, note)``: the step and ``None``, or a short description of the
        fallback that was needed ("singular", "indefinite").
    """
    p = g.numel()
    eps = torch.finfo(H.dtype).eps
    rtol = max(p, 10) * eps if rtol is None else rtol
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) == 0:
        piv = L.diagonal()
        # (min pivot / max pivot)^2 bounds the reciprocal condition number from above:
        # a tiny value means H is singular to working precision.
        if float((piv.min() / piv.max()) ** 2) > rtol:
            return torch.cholesky_solve(-g.unsqueeze(-1), L).squeeze(-1), None
    evals, evecs = torch.linalg.eigh(H)
    scale = evals.abs().max()
    keep = evals.abs() > rtol * scale
    inv = torch.where(keep, 1.0 / evals.abs().clamp_min(torch.finfo(H.dtype).tiny), 0.0)
    delta = -(evecs @ (inv * (evecs.T @ g)))
    n_neg = int((evals < -rtol * scale).sum())
    n_drop = int((~keep).sum())
    notes = []
    if n_drop:
        notes.append(f"singular (rank {p - n_drop} of {p}; minimum-norm step on the rest)")
    if n_neg:
        notes.append(f"indefinite ({n_neg} negative eigenvalues; their signs flipped)")
    return delta, "; ".join(notes) or "ill-conditioned (eigendecomposition solve)"


def shift_null_projector(m: int, d: int, has_bias: bool, unpenalized: torch.Tensor,
                         dtype=None, device=None) -> torch.Tensor:
    """Projector onto the softmax shift directions of the unpenalized columns.

    Adding one vector ``c`` to every class row of ``[W, b]`` leaves
    ``softmax(eta)`` unchanged, so ``u_j = (1/sqrt(m)) sum_k e_{(k, j)}`` spans the
    Hessian's null space for each column ``j`` that the penalty does not touch.
    ``(H + s N) delta = -g`` with ``g`` orthogonal to those directions gives
    exactly the minimum-norm Newton step ``-H^+ g`` while ``H + s N`` stays
    positive definite, so Cholesky still applies.

    Args:
        m, d: number of outputs (classes) and of features.
        has_bias: whether the bias column exists.
        unpenalized: bool (d + has_bias,) mask of columns without penalty.

    Returns:
        ``N`` of shape (p, p) in the flat order of :mod:`.derivatives`.
    """
    cols = torch.nonzero(unpenalized).flatten().tolist()
    p = m * d + (m if has_bias else 0)
    N = torch.zeros(p, p, dtype=dtype, device=device)
    for j in cols:
        idx = [m * d + k for k in range(m)] if j == d else [k * d + j for k in range(m)]
        idx_t = torch.tensor(idx, device=device)
        N[idx_t.unsqueeze(1), idx_t.unsqueeze(0)] = 1.0 / m
    return N
