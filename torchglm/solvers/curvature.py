"""The curvature of one batch on the eta scale, and the Hessian blocks it adds.

The Hessian of ``E`` is ``X~^T diag(h) X~ / S`` with per-sample curvature ``h``
(:mod:`.eta_derivatives`): one scalar per sample, or a ``K x K`` block for the
softmax. A dense design adds it as one matrix product ``x^T [h_kl x]`` over every
class pair ``k <= l`` per row chunk (:mod:`.products`), a sparse one as
sparse-sparse products; Newton-CG keeps ``h`` itself (:class:`Curvature`) for its
Hessian-vector products.
"""

from __future__ import annotations

import torch

from . import products

__all__ = ["Curvature", "add_hessian", "add_hessian_and_gradient", "add_hessian_sparse", "scale_rows"]


class Curvature:
    """The eta-curvature of one batch: ``h`` (n,) per sample, ``K x K`` blocks
    (n, K, K), or for the canonical softmax (``probs``) the means ``mu`` (n, K) and
    sample weights ``s``, ``H_i = s_i (diag(mu_i) - mu_i mu_i^T)`` (O(nK), not O(nK^2))."""

    def __init__(self, d2: torch.Tensor, weight: torch.Tensor | None = None, probs: bool = False):
        self.d2, self.weight, self.probs = d2, weight, probs
        self._d2t: torch.Tensor | None = None  # the softmax's means transposed (:meth:`apply_t`)

    def diagonal(self) -> torch.Tensor:
        """``H_i[k, k]``, shape (n, m)."""
        d2 = self.d2
        if self.probs:
            h = d2 * (1 - d2)
            return h if self.weight is None else scale_rows(h, self.weight)
        return d2.unsqueeze(-1) if d2.dim() == 1 else torch.diagonal(d2, dim1=-2, dim2=-1)

    def block_sum(self) -> torch.Tensor:
        """``sum_i H_i``, shape (m, m): the bias-bias block of ``X~^T H X~`` (the
        batch's share; ``(1, 1)`` for one output)."""
        d2 = self.d2
        if self.probs:
            w = d2 if self.weight is None else scale_rows(d2, self.weight)
            return torch.diag(w.sum(0)) - w.T @ d2  # sum_i s_i (diag(mu_i) - mu_i mu_i^T)
        if d2.dim() == 1:
            return d2.sum().reshape(1, 1)
        return d2.sum(0)

    def floor(self) -> torch.Tensor:
        """A lower bound ``f_i`` on each block, shape (n,): ``H_i >= f_i (I - 11^T/m)``
        where ``H_i 1 = 0`` (the softmax: for ``u`` orthogonal to ``1``,
        ``u^T H_i u = s_i Var_{mu_i}(u) >= s_i min_k mu_ik ||u||^2``), ``H_i >= f_i I``
        otherwise (``h_i`` itself for one output, the least eigenvalue of a block)."""
        d2 = self.d2
        if self.probs:
            f = d2.amin(-1)
            return f if self.weight is None else f * self.weight
        return d2 if d2.dim() == 1 else torch.linalg.eigvalsh(d2)[:, 0]

    def apply(self, u: torch.Tensor) -> torch.Tensor:
        """``H_i u_i`` for ``u`` of shape (n, m)."""
        d2 = self.d2
        if self.probs:
            # mu * u - mu (mu^T u) with one n x K temporary (at K = 1,000 the four
            # temporaries took 3.6x the time of this).
            t = d2 * u
            hu = t.addcmul_(d2, t.sum(-1, keepdim=True), value=-1)
            return hu if self.weight is None else scale_rows(hu, self.weight)
        return d2.unsqueeze(-1) * u if d2.dim() == 1 else torch.einsum("nkl,nl->nk", d2, u)

    def apply_t(self, ut: torch.Tensor) -> torch.Tensor:
        """``(H_i u_i)_i`` as :meth:`apply`, for ``u`` given as its transpose (m, n) and
        returned so: a Newton-CG product's layout on a small dense batch
        (:meth:`.PassSums.hvp`), where the softmax's means are kept transposed once
        for all its products."""
        d2 = self.d2
        if self.probs:
            if self._d2t is None:
                self._d2t = d2.T.contiguous()
            mt = self._d2t
            t = mt * ut
            hu = torch.addcmul(t, mt, t.sum(0, keepdim=True), value=-1)  # mu (u - mu^T u)
            return hu if self.weight is None else hu * self.weight
        if d2.dim() == 1:
            return ut * d2
        return torch.einsum("nkl,ln->kn", d2, ut)


def scale_rows(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``t`` with row ``i`` multiplied by ``s_i`` (any trailing shape)."""
    return t * s.view(-1, *([1] * (t.dim() - 1)))


def add_hessian(
    H: torch.Tensor,
    x,
    d2: torch.Tensor,
    m: int,
    d: int,
    has_bias: bool,
    precision: str,
    augmented: torch.Tensor | None = None,
) -> None:
    """``X~^T diag(h_kl) X~`` for every class pair ``k <= l`` (``h`` symmetric):
    per row chunk one matrix product ``x^T [h_kl x]`` over all pairs at once.
    ``augmented``: ``[x, 1]``, where the caller keeps it (one output, one chunk)."""
    if m == 1 and d2.dim() == 1:
        return _add_hessian_one(H, x, d2, d, has_bias, precision, augmented)
    md = m * d
    pairs = torch.triu_indices(m, m, device=x.device)  # (2, P), k <= l
    P = pairs.shape[1]
    hp = d2.unsqueeze(-1) if d2.dim() == 1 else d2[:, pairs[0], pairs[1]]  # (n, P)
    B = torch.zeros(d, P * d, dtype=x.dtype, device=x.device)
    rows = products.chunk_rows(x, P * d)
    for i in range(0, x.shape[0], rows):
        xc, hc = x[i : i + rows], hp[i : i + rows]
        hx = (xc.unsqueeze(1) * hc.unsqueeze(-1)).reshape(xc.shape[0], P * d)
        products.add_product(B, xc.T, hx, precision)
    # Into the flat order [W.reshape(-1), b]: H[(k, i), (l, j)] = B_kl[i, j].
    B = B.view(d, P, d).permute(1, 0, 2)  # (P, d, d)
    full = torch.zeros(m, m, d, d, dtype=x.dtype, device=x.device)
    full[pairs[0], pairs[1]] = B
    full[pairs[1], pairs[0]] = B.transpose(1, 2)
    H[:md, :md] += full.permute(0, 2, 1, 3).reshape(md, md)
    if has_bias:
        cross = torch.zeros(m, m, d, dtype=x.dtype, device=x.device)
        Bb = products.rt_x(hp, x)  # (P, d): sum_i h_kl,i x_i
        cross[pairs[0], pairs[1]] = Bb
        cross[pairs[1], pairs[0]] = Bb
        H[:md, md:] += cross.permute(0, 2, 1).reshape(md, m)
        H[md:, :md] += cross.permute(1, 0, 2).reshape(m, md)
        corner = torch.zeros(m, m, dtype=x.dtype, device=x.device)
        hs = hp.sum(0)
        corner[pairs[0], pairs[1]] = hs
        corner[pairs[1], pairs[0]] = hs
        H[md:, md:] += corner


def _add_hessian_one(
    H: torch.Tensor, x, h: torch.Tensor, d: int, has_bias: bool, precision: str, xa: torch.Tensor | None
) -> None:
    """:func:`add_hessian` for one output (``h`` of shape (n,)), with no class-pair
    bookkeeping (on a small batch that bookkeeping, a dozen small tensors, cost more
    than the product). A batch of one chunk adds ``X~^T [h X~]`` over the augmented
    design ``X~ = [x, 1]`` as one product into the whole of ``H``; a larger one adds
    ``x^T [h x]`` per row chunk into the weight block, then the bias row ``h^T x`` and
    the corner ``sum_i h_i``. ``xa``: ``[x, 1]`` kept by the caller, or ``None``."""
    n = x.shape[0]
    rows = products.chunk_rows(x, d + has_bias)
    if has_bias and n <= rows:
        xa = torch.cat([x, x.new_ones(n, 1)], 1) if xa is None else xa
        products.add_product(H, xa.T, xa * h.unsqueeze(-1), precision)
        return
    Hw = H[:d, :d]
    for i in range(0, n, rows):
        xc = x[i : i + rows]
        products.add_product(Hw, xc.T, xc * h[i : i + rows].unsqueeze(-1), precision)
    if has_bias:
        hx = products.rt_x(h.unsqueeze(-1), x)[0]  # sum_i h_i x_i
        H[:d, d].add_(hx)
        H[d, :d].add_(hx)
        H[d, d].add_(h.sum())


def add_hessian_and_gradient(out: torch.Tensor, x: torch.Tensor, h: torch.Tensor, r: torch.Tensor) -> bool:
    """One output's Hessian and gradient products over the dense batch ``x``, row chunk by
    row chunk: ``out += x^T [h x, r, h]`` (``out`` of shape (d, d + 2): the weight block,
    the gradient's weights and the Hessian's bias column; (d, d + 1) without the bias
    column), so each chunk is read once for the three, where a separate ``r^T x`` and
    ``h^T x`` read the whole slab twice more (Poisson 500,000 x 30, one thread: 41 against
    35 ms a float32 pass, 94 against 83 in float64). In the working dtype (the
    ``"highest"`` precision of :func:`~.products.add_product`); the caller sums ``out``
    into the Hessian and the gradient once per pass (:meth:`.PassSums.finish`).

    Returns ``False``, adding nothing, for a batch of one chunk (there the one product
    over ``[x, 1]`` of :func:`add_hessian` is cheaper)."""
    n, d = x.shape
    w = out.shape[1]
    rows = products.chunk_rows(x, w - 1)
    if n <= rows:
        return False
    buf = torch.empty(rows, w, dtype=x.dtype, device=x.device)
    for i in range(0, n, rows):
        xc, hc = x[i : i + rows], h[i : i + rows]
        b = buf[: xc.shape[0]]
        torch.mul(xc, hc.unsqueeze(-1), out=b[:, :d])
        b[:, d] = r[i : i + rows]
        if w > d + 1:
            b[:, d + 1] = hc
        out.addmm_(xc.T, b)
    return True


def add_hessian_sparse(H: torch.Tensor, x, d2: torch.Tensor, m: int, d: int, has_bias: bool) -> None:
    """``X^T diag(h_kl) X`` for a sparse COO ``x``: a sparse-sparse product per class
    pair, densified only as the (d x d) Hessian block (never the n x d design)."""
    md = m * d
    blocks = d2.view(-1, 1, 1) if d2.dim() == 1 else d2
    x = x.coo
    xt = x.t()
    for k in range(m):
        for l in range(k, m):
            h = blocks[:, k, l]
            xh = x * h.unsqueeze(-1)
            xx = torch.sparse.mm(xt, xh).to_dense()
            H[k * d : (k + 1) * d, l * d : (l + 1) * d] += xx
            if l != k:
                H[l * d : (l + 1) * d, k * d : (k + 1) * d] += xx.T
            if has_bias:
                xh_sum = torch.sparse.sum(xh, 0).to_dense()
                hs = h.sum()
                for a, b in ((k, l), (l, k)) if l != k else ((k, l),):
                    H[a * d : (a + 1) * d, md + b] += xh_sum
                    H[md + b, a * d : (a + 1) * d] += xh_sum
                    H[md + a, md + b] += hs
