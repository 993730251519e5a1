"""Per-sample derivatives of the loss on the eta scale.

The objective of :class:`~torchglm.models.GeneralizedLinearModel` is

    E(theta) = sum_i s_i l(eta_i, y_i) / sum_i s_i + (l2 / 2) ||W||^2,
    eta_i = W x_i + b (+ offset_i),

with per-sample loss ``l = family.nll`` and sample weights ``s_i``. By the chain
rule (the lecture notes on probabilistic classification, §8; Bishop PRML §4.3.3), with the augmented
design ``x~_i = [x_i, 1]``::

    grad E = X~^T (s * dl/deta) / S + l2 [W, 0]                     (§8: X^T (y - t))
    hess E = X~^T diag(s * d2l/deta2) X~ / S + l2 diag([1_W, 0_b])  (§14: X^T Y X + I / lambda)

so the only per-sample derivatives needed are those of ``l`` with respect to
``eta`` (here; :class:`~.pass_sums.PassSums` sums the products with ``X~``). They
come from :mod:`torch.func` for any family and link: since ``l`` is
a sum of per-sample terms, ``grad`` of the sum gives every ``dl/deta_i``, and
the Hessian of the sum with respect to ``eta`` is block diagonal (one scalar,
or one ``K x K`` block for softmax, per sample), so ``grad`` of the summed first
derivatives gives its diagonal exactly (a ``vmap`` over the ``K`` unit vectors
gives the softmax blocks). The ``n x n`` matrix ``Y`` of the lecture is never
formed: it is the weight vector ``h`` in one weighted product ``X^T (h * X)``.
"""

from __future__ import annotations

import torch
from torch.func import grad, vmap

__all__ = ["eta_derivatives"]


def eta_derivatives(
    family,
    eta: torch.Tensor,
    y: torch.Tensor,
    order: int = 2,
    expected: bool = False,
    y_term: torch.Tensor | None = None,
):
    """Per-sample loss and its first (and second) derivatives with respect to eta.

    Args:
        family: a :class:`~torchglm.families.Family`.
        eta: linear predictor, shape (n,) or (n, K) for multi-output families.
        y: targets, shape (n,).
        order: 1 for ``(nll, d1)``, 2 for ``(nll, d1, d2)``.
        expected: give the expected information instead of ``d2`` (Fisher
            scoring, the IRLS weights of §8): ``(dmu/deta)^2 / V(mu)`` for
            single-output families. Multi-output families (the categorical with
            its canonical softmax link) have ``d2`` free of ``y``, so the
            expected and observed information coincide and ``d2`` is returned.
        y_term: the family's :meth:`~torchglm.families.Family.nll_y_term` of ``y``
            (kept by the caller across passes), for its closed forms; ``None``: none
            kept (the closed forms evaluate it).

    Returns:
        ``nll`` (n,), ``d1`` like ``eta`` and, for ``order=2``, ``d2`` of shape (n,)
        or (n, K, K).

    Closed forms come from :meth:`Family.nll_derivatives` where the family has
    them (logit, probit, canonical softmax: one elementwise pass); otherwise
    :mod:`torch.func` differentiates ``family.nll``.
    """

    if order == 2 and expected and eta.dim() == 1:
        closed = _closed(family, eta, y, 2, y_term) if family.is_canonical else None
        if closed is not None:
            # A canonical link's observed curvature is the expected one, |dmu/deta| = V(mu)
            # (from the same elementwise pass as the loss: no second mean).
            nll, d1, d2 = closed
            return nll, d1, d2.abs()
        nll, d1 = eta_derivatives(family, eta, y, order=1, y_term=y_term)
        link = family.link
        dmu = link.inverse_derivative(eta)
        if family.is_canonical:
            # A canonical link has V(mu) = |dmu/deta|, so (dmu/deta)^2 / V(mu) is
            # |dmu/deta|: no 0/0 where the fitted mean saturates (separation).
            d2 = dmu.abs()
        else:
            v = family.variance(link.inverse(eta))
            # Where V(mu) underflows to 0 the weight's limit is 0 (dmu/deta -> 0 faster).
            d2 = torch.where(v > 0, dmu * dmu / v, torch.zeros_like(v))
        return nll, d1, d2
    closed = _closed(family, eta, y, order, y_term)
    if closed is not None:
        return closed

    def total(e):
        nll = family.nll(e, y)
        return nll.sum(), nll

    if order == 1:
        d1, nll = grad(total, has_aux=True)(eta)
        return nll, d1
    if eta.dim() == 1:

        def d1_sum(e):
            d1, nll = grad(total, has_aux=True)(e)
            return d1.sum(), (d1, nll)

        # The Hessian of sum_i l_i w.r.t. eta is diagonal, so grad(sum_i dl_i/deta_i) is it.
        d2, (d1, nll) = grad(d1_sum, has_aux=True)(eta)
        return nll, d1, d2
    d1, nll = grad(total, has_aux=True)(eta)

    def hessian_row(v):
        # Row k of every per-sample block: d/deta of sum_i dl_i/deta_ik.
        return grad(lambda e: (grad(total, has_aux=True)(e)[0] * v).sum())(eta)

    eye = torch.eye(eta.shape[1], dtype=eta.dtype, device=eta.device)
    d2 = vmap(hessian_row)(eye).permute(1, 0, 2)
    return nll, d1, d2


def _closed(family, eta, y, order, y_term):
    """The family's closed forms, given its kept ``y_term`` (only a family whose
    :meth:`~torchglm.families.Family.nll_y_term` gave one takes it)."""
    if y_term is None:
        return family.nll_derivatives(eta, y, order)
    return family.nll_derivatives(eta, y, order, y_term=y_term)
