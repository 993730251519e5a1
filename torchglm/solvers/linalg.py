"""Solving the Newton system ``H delta = -g`` robustly.

The system is first equilibrated (Jacobi-scaled to a unit diagonal), then
Cholesky (``H`` is symmetric positive definite for a convex loss with
an identifiable model: the lecture notes on probabilistic classification, §14); when it fails or the
pivots reveal a numerically singular ``H`` (a duplicated column, separation, an unpenalized
softmax) or an indefinite one (a non-canonical link far from the optimum), an
eigendecomposition gives the modified step

    delta = -sum_i [ |lambda_i| > r ] u_i u_i^T g / |lambda_i|,
    r = max(p, 10) eps max_i |lambda_i|   (eigenvalues of the equilibrated H),

the minimum-norm step on the well-determined eigen-directions, always a
descent direction (Nocedal & Wright, "Numerical Optimization", 2nd ed., 3.4).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "cg_solve",
    "equilibrate",
    "jacobi_inverse",
    "jacobi_preconditioner",
    "newton_direction",
    "shift_null_projector",
]


def equilibrate(H: torch.Tensor) -> torch.Tensor:
    """Jacobi scaling ``D = diag(|H_jj|)^{-1/2}`` (1 where ``H_jj`` is 0 or not finite).

    ``D H D`` has a unit diagonal and does not change when a column of the design
    is multiplied by a constant (``H_jj`` scales by its square), so every rank
    and conditioning decision made on it is scale-invariant; among diagonal
    scalings it is within a factor ``p`` of the best condition number (van der
    Sluis, 1969).
    """
    h = H.diagonal().abs()
    r = h.clamp_min(torch.finfo(H.dtype).tiny).rsqrt()
    # h r > 0 leaves out h = 0 (0 r), NaN, and an infinite h (inf 0 = NaN): h > 0 and
    # r > 0 in one comparison (h r = sqrt(h), or h / sqrt(tiny) > 0 below tiny).
    return torch.where(h * r > 0, r, 1.0)


def _pivot_ratio_squared(L: torch.Tensor) -> float:
    """``(min pivot / max pivot)^2`` of a Cholesky factor, in its dtype. In float64 from
    one host read of the pivots, in Python's float64 arithmetic (the same roundings as
    the tensor's: a small Newton fit's reduction kernels cost more than its solve)."""
    if L.dtype != torch.float64:
        lo, hi = L.diagonal().aminmax()
        return float((lo / hi) ** 2)
    pivots = L.diagonal().tolist()
    ratio = min(pivots) / max(pivots)
    return ratio * ratio


def newton_direction(H: torch.Tensor, g: torch.Tensor, rtol: float | None = None):
    """Solve ``H delta = -g`` on the equilibrated system, Cholesky with an eigen fallback.

    With ``D`` from :func:`equilibrate`, ``(D H D) z = -D g`` and ``delta = D z``:
    the same step in exact arithmetic, but the pivots, the rank decision and the
    cutoff ``r`` (module docstring) are those of ``D H D``, so a design whose
    columns differ in scale by ``1e8`` is not mistaken for a singular one
    (``cond(H) = cond(X)^2`` for the raw design).

    Args:
        H: symmetric (p, p) Hessian (or expected information).
        g: gradient, shape (p,).
        rtol: relative cutoff, on the squared pivot ratio of the Cholesky factor and
            on the eigenvalues of the fallback (default ``max(p, 10) eps``: below it
            ``D H D`` is singular to working precision).

    Returns:
        ``(delta, note, flat, rcond, hidden, n_neg)``: the step; ``None`` or a short
        description of the fallback that was needed ("singular", "indefinite"); the
        norm of the equilibrated gradient ``D g`` along the directions dropped as
        singular (0 when none were); ``rcond``, the reciprocal condition estimate of
        ``D H D`` (squared Cholesky pivot ratio, or the ratio of the smallest kept to
        the largest eigenvalue); and ``hidden = flat^2 / (2 r)``, the least decrease
        of the quadratic model along the dropped directions (their curvature is at
        most the cutoff ``r``; ``delta^T H delta`` is the same in equilibrated units).
        Where ``hidden`` exceeds the tolerance on ``E``, the objective still changes
        by more than that along directions whose curvature is lost in rounding: its
        optimum there is not determined in this dtype (nearly collinear columns,
        ``cond(X) ~ 1/sqrt(eps)``); exactly collinear columns give ``flat`` at the
        gradient's rounding and ``hidden`` far below any tolerance. ``n_neg``: the
        number of eigenvalues of ``D H D`` below ``-r`` (0 after Cholesky): with any,
        ``H`` is indefinite and ``g^T |H|^-1 g`` of the modified step is no Newton
        decrement (it bounds nothing about ``E - E*``; not a minimum).
    """
    p = g.numel()
    eps = torch.finfo(H.dtype).eps
    rtol = max(p, 10) * eps if rtol is None else rtol
    d = equilibrate(H)
    Hs = (H * d).mul_(d.unsqueeze(1))
    gs = g * d
    L, info = torch.linalg.cholesky_ex(Hs)
    if int(info) == 0:
        # (min pivot / max pivot)^2 bounds the reciprocal condition number from above:
        # a tiny value means D H D is singular to working precision.
        rcond = _pivot_ratio_squared(L)
        if rcond > rtol:
            return d * torch.cholesky_solve(-gs.unsqueeze(-1), L).squeeze(-1), None, 0.0, rcond, 0.0, 0
    evals, evecs = torch.linalg.eigh(Hs)
    scale = evals.abs().max()
    keep = evals.abs() > rtol * scale
    inv = torch.where(keep, 1.0 / evals.abs().clamp_min(torch.finfo(H.dtype).tiny), 0.0)
    delta = -d * (evecs @ (inv * (evecs.T @ gs)))
    n_neg = int((evals < -rtol * scale).sum())
    n_drop = int((~keep).sum())
    notes = []
    if n_drop:
        notes.append(
            f"singular (rank {p - n_drop} of {p} after column equilibration; minimum-norm step on the rest)"
        )
    if n_neg:
        notes.append(f"indefinite ({n_neg} negative eigenvalues; their signs flipped)")
    flat = float((evecs[:, ~keep].T @ gs).norm()) if n_drop else 0.0
    cutoff = float(rtol * scale)
    hidden = flat * flat / (2 * cutoff) if flat and cutoff > 0 else (math.inf if flat else 0.0)
    rcond = float(evals.abs()[keep].min() / scale) if bool(keep.any()) else 0.0
    return delta, "; ".join(notes) or "ill-conditioned (eigendecomposition solve)", flat, rcond, hidden, n_neg


def shift_null_projector(
    m: int, d: int, has_bias: bool, unpenalized: torch.Tensor, dtype=None, device=None
) -> torch.Tensor:
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
        ``N`` of shape (p, p) in the flat order of :mod:`.layout`.
    """
    cols = torch.nonzero(unpenalized).flatten().tolist()
    p = m * d + (m if has_bias else 0)
    N = torch.zeros(p, p, dtype=dtype, device=device)
    for j in cols:
        idx = [m * d + k for k in range(m)] if j == d else [k * d + j for k in range(m)]
        idx_t = torch.tensor(idx, device=device)
        N[idx_t.unsqueeze(1), idx_t.unsqueeze(0)] = 1.0 / m
    return N


def jacobi_inverse(diag: torch.Tensor) -> torch.Tensor:
    """``1 / diag(H)`` where positive and finite, 1 elsewhere (Jacobi's preconditioner)."""
    return torch.where(
        torch.isfinite(diag) & (diag > 0),
        1.0 / diag.clamp_min(torch.finfo(diag.dtype).tiny),
        torch.ones_like(diag),
    )


def jacobi_preconditioner(diag: torch.Tensor):
    """``v -> diag(H)^{-1} v`` (:func:`jacobi_inverse`): CG's default preconditioner."""
    pre = jacobi_inverse(diag)
    return lambda v: pre * v


def cg_solve(
    hvp,
    g: torch.Tensor,
    diag: torch.Tensor,
    forcing: float = 0.5,
    max_iter: int | None = None,
    precondition=None,
    floor: float = 0.0,
    target: float | None = None,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
    step_product: list | None = None,
):
    """Truncated, preconditioned conjugate gradients for ``H x = -g``.

    ``H`` is reached only through ``hvp(v) = H v``. The preconditioner ``P`` is
    Jacobi's, ``diag(H)^{-1}`` (:func:`equilibrate` squared), or ``precondition(v) =
    P v`` for another symmetric positive definite ``P`` that transforms like ``H^{-1}``
    under column scaling (an L-BFGS inverse Hessian started from the Jacobi one).
    Residuals are measured in the scale-invariant norm ``||r||_P = sqrt(r^T P r)``;
    CG stops at ``||r||_P <= max(floor, min(forcing, sqrt(||g||_P)) ||g||_P)``
    (Nocedal & Wright 7.1; ``floor``: no more accuracy than the caller can use), at
    ``||r||_P <= target`` where given, at ``max_iter`` products, or on non-positive
    curvature. ``start = (x0, H x0)`` continues from ``x0`` (a certificate asking
    for a smaller residual, :class:`~.certify.ResidualBound`).

    Returns:
        ``(x, n_iter, exact)``: the step (``-g`` when the first direction already has
        non-positive curvature), the number of products, and whether the residual
        target was met with a trustworthy decrement: from ``x_0 = 0``,
        ``-g^T x_k = sum_{j<k} alpha_j r_j^T P r_j > 0`` in exact arithmetic (each term
        positive for ``p_j^T H p_j > 0``); where rounding broke that identity by more
        than a factor 2 (a Hessian singular to working precision, e.g. every sample
        saturated), ``-g^T x`` is no Newton decrement and ``exact`` is False. From a
        ``start``, ``exact`` says only that the target was met (the caller bounds the
        decrement itself).

    ``step_product``: a list to which ``H x`` is appended where CG ends after one step
    from ``x_0 = 0``: there ``x = alpha p`` and ``H x = alpha (H p)``, the step's own
    product times the same scalar (no recursion: the rounding of one product and one
    scaling, as of ``H x`` evaluated afresh), which a certificate reuses
    (:class:`~.certify.ResidualBound`). After more steps ``H x`` would be a sum over them
    whose recursive residual drifts from the true one, and nothing is appended.
    """
    if precondition is None:
        precondition = jacobi_preconditioner(diag)
    # Beyond p products only in finite precision (ill-conditioned H), so 2p, capped.
    max_iter = min(max(2 * g.numel(), 50), 500) if max_iter is None else max_iter
    gnorm = math.sqrt(max(float(g @ precondition(g)), 0.0))
    if target is None:
        target = max(min(forcing, math.sqrt(gnorm)) * gnorm, floor)
    x, r = (torch.zeros_like(g), -g) if start is None else (start[0].clone(), -g - start[1])
    z = precondition(r)
    p = z.clone()
    rz = float(r @ z)
    decrease = 0.0  # sum_j alpha_j r_j^T P r_j
    n = 0
    if start is not None and math.sqrt(max(rz, 0.0)) <= target:
        return x, n, True
    for n in range(1, max_iter + 1):
        Ap = hvp(p)
        pAp = float(p @ Ap)
        if pAp <= 0:
            # Negative or zero curvature along p: keep what CG has (or -g at first).
            return (-g if n == 1 and start is None else x), n, False
        alpha = rz / pAp
        decrease += alpha * rz
        x.add_(p, alpha=alpha)  # in place: a small problem's CG is bound by the ops' count
        r.sub_(Ap, alpha=alpha)
        z = precondition(r)
        rz_new = float(r @ z)
        if math.sqrt(max(rz_new, 0.0)) <= target:
            if step_product is not None and n == 1 and start is None:
                step_product.append(Ap * alpha)
            gx = -float(g @ x)
            return x, n, start is not None or 0.5 * decrease <= gx <= 2.0 * decrease
        p.mul_(rz_new / rz).add_(z)
        rz = rz_new
    return x, n, False
