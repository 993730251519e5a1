"""Loss, gradient and Hessian of a GLM as sums over batches.

The objective of :class:`~torchglm.models.GeneralizedLinearModel` is

    E(theta) = sum_i s_i l(eta_i, y_i) / sum_i s_i + (l2 / 2) ||W||^2,
    eta_i = W x_i + b (+ offset_i),

with per-sample loss ``l = family.nll`` and sample weights ``s_i``. By the chain
rule (seed 000, "Newton-Raphson and logistic regression"), with the augmented
design ``x~_i = [x_i, 1]``::

    grad E = X~^T (s * dl/deta) / S + l2 [W, 0]                     (seed 000: X^T (y - t))
    hess E = X~^T diag(s * d2l/deta2) X~ / S + l2 diag([1_W, 0_b])  (seed 003: X^T Y X + I / lambda)

so the only per-sample derivatives needed are those of ``l`` with respect to
``eta``. They come from :mod:`torch.func` for any family and link: since ``l`` is
a sum of per-sample terms, ``grad`` of the sum gives every ``dl/deta_i``, and
the Hessian of the sum with respect to ``eta`` is block diagonal (one scalar,
or one ``K x K`` block for softmax, per sample), so ``grad`` of the summed first
derivatives gives its diagonal exactly (a ``vmap`` over the ``K`` unit vectors
gives the softmax blocks). The ``n x n`` matrix ``Y`` of the lecture is never
formed: it is the weight vector ``h`` in one weighted product ``X^T (h * X)``.

**Parameter order.** Every flat vector or matrix here is ordered like
``torch.cat([model.coef.reshape(-1), model.intercept])``: the weight
rows (output ``k``, feature ``j`` at index ``k * n_features + j``), then the
biases (index ``n_outputs * n_features + k``). :func:`parameter_names` names them.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch.func import grad, vmap

from ..data.batches import Batch
from ..penalty import L2Penalty
from ..passes import all_reduce_sum

__all__ = [
    "eta_derivatives",
    "flat_parameters",
    "set_flat_parameters",
    "parameter_names",
    "penalty_mask",
    "hessian_cost",
    "PassSums",
    "HESSIAN_PRECISIONS",
    "hessian_and_gradient",
]


# -- per-sample derivatives on the eta scale ------------------------------------
def eta_derivatives(family, eta: torch.Tensor, y: torch.Tensor, order: int = 2, expected: bool = False):
    """Per-sample loss and its first (and second) derivatives with respect to eta.

    Args:
        family: a :class:`~torchglm.families.Family`.
        eta: linear predictor, shape (n,) or (n, K) for multi-output families.
        y: targets, shape (n,).
        order: 1 for ``(nll, d1)``, 2 for ``(nll, d1, d2)``.
        expected: give the expected information instead of ``d2`` (Fisher
            scoring, seed 000's IRLS weights): ``(dmu/deta)^2 / V(mu)`` for
            single-output families. Multi-output families (the categorical with
            its canonical softmax link) have ``d2`` free of ``y``, so the
            expected and observed information coincide and ``d2`` is returned.

    Returns:
        ``nll`` (n,), ``d1`` like ``eta`` and, for ``order=2``, ``d2`` of shape (n,)
        or (n, K, K).

    Closed forms come from :meth:`Family.nll_derivatives` where the family has
    them (logit, probit, canonical softmax: one elementwise pass); otherwise
    :mod:`torch.func` differentiates ``family.nll``.
    """

    if order == 2 and expected and eta.dim() == 1:
        nll, d1 = eta_derivatives(family, eta, y, order=1)
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
    closed = family.nll_derivatives(eta, y, order)
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


# -- parameter layout -----------------------------------------------------------
def flat_parameters(model, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``[W.reshape(-1), b]`` as one detached vector (a copy), in ``dtype`` (the
    model's :meth:`~torchglm.models.GeneralizedLinearModel.flat_parameters`)."""
    return model.flat_parameters(dtype)


def set_flat_parameters(model, theta: torch.Tensor) -> None:
    """Write a flat ``[W.reshape(-1), b]`` vector into the model (in its dtype; the
    model's :meth:`~torchglm.models.GeneralizedLinearModel.set_flat_parameters`)."""
    model.set_flat_parameters(theta)


def parameter_names(model) -> list[str]:
    """Names of the flat parameters: ``weight[k,j]`` then ``bias[k]`` (the model's
    :meth:`~torchglm.models.GeneralizedLinearModel.parameter_names`)."""
    return model.parameter_names()


def hessian_cost(model) -> float:
    """Hessian entries per sample, ``d~ K (K + 1) / 2`` (``d~`` for one output): the
    cost of one exact-Hessian pass in units of one gradient evaluation."""
    m, d = model.n_outputs, model.n_features
    dt = d + model.has_intercept
    return dt * m * (m + 1) / 2 if m > 1 else dt


def penalty_mask(model, dtype=None, device=None) -> torch.Tensor:
    """1 for penalized (weight) entries, 0 for the bias, in the flat order."""
    m, d = model.n_outputs, model.n_features
    n_bias = model.n_bias
    return torch.cat(
        [torch.ones(m * d, dtype=dtype, device=device), torch.zeros(n_bias, dtype=dtype, device=device)]
    )


# -- one pass of sums -------------------------------------------------------------
class PassSums:
    """Sums of loss, gradient and curvature over the batches of one pass.

    ``add(batch)`` evaluates the model at the flat parameters ``theta`` on one
    batch and adds its sums; ``finish()`` all-reduces them (when
    ``torch.distributed`` is initialized), divides by the total sample weight
    and adds the penalty. After ``finish``: ``loss``, ``grad``, and ``hess``
    (``curvature="full"`` or ``"expected"``), ``diag`` (``"diag"``), or ``diag``
    and the stored per-batch curvature for :meth:`hvp` (``"hvp"``); ``n_invalid`` counts samples
    whose eta left the link's domain (plus one when the summed loss is not
    finite), and
    ``n_saturated`` samples whose loss is below ``saturation`` (fitted
    probability numerically 0 or 1: a sign of separation), ``n_samples`` the
    rows seen, ``n_offset`` the rows with an offset and ``y_sum`` the weighted sum of
    the targets (when asked): a scalar, or for the categorical family the weight of
    each class, shape (K,).

    Args:
        model: a ``GeneralizedLinearModel`` (family, layout, ``l2``).
        theta: flat parameters (see the module docstring for the order).
        curvature: ``None``, ``"full"``, ``"expected"``, ``"diag"`` or ``"hvp"``.
        saturation: per-sample loss below which a sample counts as saturated
            (0 skips the count).
        y_sum: also sum the (weighted) targets (for an intercept-only start; the class
            weights show a declared class without samples).
        targets_only: sum only the weights, the row counts and the targets, never
            reading the features (the start pass of a fit from ``theta = 0``, which
            only needs the mean target); ``loss`` and ``grad`` are then the penalty's.
        sparse_cache: a dict that outlives the pass (the fitter's), where a sparse
            batch keeps its transposed CSR between passes (:class:`SparseRows`).
        hessian_precision: the precision of the products ``X~^T [h X~]`` of a dense
            Hessian (:data:`HESSIAN_PRECISIONS`); everything else is summed in
            ``theta``'s dtype.
    """

    def __init__(
        self,
        model,
        theta: torch.Tensor,
        curvature: str | None = "full",
        saturation: float = 0.0,
        y_sum: bool = False,
        targets_only: bool = False,
        sparse_cache: dict | None = None,
        hessian_precision: str = "highest",
    ):
        self.family = model.family
        self.hessian_precision = hessian_precision
        self.sparse_cache = sparse_cache
        self.penalty = L2Penalty(model.l2)
        m, d = model.n_outputs, model.n_features
        self.m, self.d = m, d
        self.has_bias = model.has_intercept
        self.scalar = not model.family.multi_output
        self.theta = theta
        self.W = theta[: m * d].view(m, d)
        self.b = theta[m * d :] if self.has_bias else None
        self.curvature = curvature
        # For a canonical link d2l/deta2 = (dmu/deta)^2 / V(mu) exactly (observed =
        # expected information), so the closed form replaces a second autodiff pass.
        self.expected = curvature == "expected" or (self.scalar and model.family.is_canonical)
        self.saturation = saturation
        # Only links that restrict eta (inverse, negative reciprocal) need the mask;
        # a non-finite loss anywhere shows in the summed loss.
        self.restricted = model.family.link.restricts_eta
        p = theta.numel()
        opts = dict(dtype=theta.dtype, device=theta.device)
        self.p = p
        self.loss_sum = torch.zeros((), **opts)
        self.weight_sum = torch.zeros((), **opts)
        self.counts = torch.zeros(4, **opts)  # n_invalid, n_saturated, n_samples, n_offset
        self.want_y_sum = y_sum or targets_only
        self.y_sum = torch.zeros(() if self.scalar else (m,), **opts)
        self.targets_only = targets_only
        if targets_only:
            curvature = self.curvature = None
        self.grad = torch.zeros(p, **opts)
        self.hess = torch.zeros(p, p, **opts) if curvature in ("full", "expected") else None
        self.diag = torch.zeros(p, **opts) if curvature in ("diag", "hvp") else None
        self.stored: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.mask = penalty_mask(model, **opts)

    def eta(self, x: torch.Tensor, offset: torch.Tensor | None) -> torch.Tensor:
        eta = x @ self.W.T
        if self.has_bias:
            eta = eta + self.b
        if self.scalar:
            eta = eta.squeeze(-1)
        if offset is not None:
            # one value per sample, added to every output's eta (the model's linear_predictor)
            offset = offset.to(eta.dtype)
            eta = eta + (offset if self.scalar else offset.unsqueeze(-1))
        return eta

    def add(self, batch: Batch) -> None:
        if self.targets_only:
            return self._add_targets(batch.y, batch.offset, batch.weight)
        if batch.x.layout != torch.strided:
            # Sparse counts (bag of words) stay sparse, in CSR with a cached CSR of x^T.
            x = SparseRows.of(batch.x, self.sparse_cache, self.theta.dtype)
        else:
            x = batch.x.to(self.theta.dtype)
        rows = _fused_rows(x)
        if rows is None:
            return self._add(x, batch.y, batch.offset, batch.weight)
        # On a CPU, rows in slabs of a few MB: eta = x W^T and the products back onto
        # x (gradient, diagonal, kept curvature for hvp) then read each slab from cache,
        # not the whole design twice from memory.
        for i in range(0, x.shape[0], rows):
            j = i + rows
            self._add(
                x[i:j],
                batch.y[i:j],
                None if batch.offset is None else batch.offset[i:j],
                None if batch.weight is None else batch.weight[i:j],
            )
        return None

    def _add_targets(self, y, offset, s) -> None:
        """Weight sum, row counts and (asked for) weighted target sum of one batch."""
        n = y.shape[0]
        self.weight_sum += n if s is None else s.to(self.theta.dtype).sum()
        self.counts[2] += n
        if offset is not None:
            self.counts[3] += n
        if self.want_y_sum and self.scalar:
            yt = y.to(self.theta.dtype)
            self.y_sum += (yt if s is None else s.to(yt.dtype) * yt).sum()
        elif self.want_y_sum:
            # The one-hot targets summed: the weight of each class.
            w = torch.ones_like(y, dtype=self.theta.dtype) if s is None else s.to(self.theta.dtype)
            self.y_sum.index_add_(0, y.long(), w)

    def _add(self, x, y, offset, s) -> None:
        eta = self.eta(x, offset)
        # Canonical softmax under "diag"/"hvp": the curvature is kept as mu (n, K)
        # (H_i = diag(mu_i) - mu_i mu_i^T), never as n K x K blocks.
        probs = not self.scalar and self.family.is_canonical and self.curvature in ("diag", "hvp")
        if self.curvature is None or probs:
            nll, d1 = eta_derivatives(self.family, eta, y, order=1)
            d2 = self.family.mean(eta) if probs else None
        else:
            nll, d1, d2 = eta_derivatives(self.family, eta, y, order=2, expected=self.expected)
        # The weight sum, row counts and target sum: the targets-only pass's sums.
        self._add_targets(y, offset, s)
        if s is not None:
            s = s.to(eta.dtype)
        if self.restricted:
            # The family knows its mean's domain (a Gaussian mean may be negative
            # under the inverse link; a binomial mean must stay below 1 under log).
            valid = self.family.valid_eta(eta)
            self.counts[0] += (~valid).sum() if valid.dim() == 1 else (~valid.all(-1)).sum()
        if self.saturation > 0:
            self.counts[1] += (nll < self.saturation).sum()
        if s is not None:
            nll, d1 = s * nll, _scale(d1, s)
            if d2 is not None and not probs:
                d2 = _scale(d2, s)
        self.loss_sum += nll.sum()
        r = d1 if d1.dim() == 2 else d1.unsqueeze(-1)  # (n, m)
        m, d = self.m, self.d
        self.grad[: m * d] += _rt_x(r, x).reshape(-1)
        if self.has_bias:
            self.grad[m * d :] += r.sum(0)
        if d2 is None:
            return
        if self.hess is not None and x.is_sparse:
            self._add_hessian_sparse(x, d2)
        elif self.hess is not None:
            self._add_hessian(x, d2)
        else:
            curv = _Curvature(d2, s if probs else None, probs)
            self._add_diag(x, curv)
            if self.curvature == "hvp":
                self.stored.append((x, curv))

    def _add_hessian(self, x, d2):
        """``X~^T diag(h_kl) X~`` for every class pair ``k <= l`` (``h`` symmetric):
        per row chunk one matrix product ``x^T [h_kl x]`` over all pairs at once."""
        m, d = self.m, self.d
        md = m * d
        pairs = torch.triu_indices(m, m, device=x.device)  # (2, P), k <= l
        P = pairs.shape[1]
        hp = d2.unsqueeze(-1) if d2.dim() == 1 else d2[:, pairs[0], pairs[1]]  # (n, P)
        B = torch.zeros(d, P * d, dtype=x.dtype, device=x.device)
        rows = _chunk_rows(x, P * d)
        for i in range(0, x.shape[0], rows):
            xc, hc = x[i : i + rows], hp[i : i + rows]
            hx = (xc.unsqueeze(1) * hc.unsqueeze(-1)).reshape(xc.shape[0], P * d)
            _add_product(B, xc.T, hx, self.hessian_precision)
        # Into the flat order [W.reshape(-1), b]: H[(k, i), (l, j)] = B_kl[i, j].
        B = B.view(d, P, d).permute(1, 0, 2)  # (P, d, d)
        full = torch.zeros(m, m, d, d, dtype=x.dtype, device=x.device)
        full[pairs[0], pairs[1]] = B
        full[pairs[1], pairs[0]] = B.transpose(1, 2)
        H = self.hess
        H[:md, :md] += full.permute(0, 2, 1, 3).reshape(md, md)
        if self.has_bias:
            cross = torch.zeros(m, m, d, dtype=x.dtype, device=x.device)
            Bb = _rt_x(hp, x)  # (P, d): sum_i h_kl,i x_i
            cross[pairs[0], pairs[1]] = Bb
            cross[pairs[1], pairs[0]] = Bb
            H[:md, md:] += cross.permute(0, 2, 1).reshape(md, m)
            H[md:, :md] += cross.permute(1, 0, 2).reshape(m, md)
            corner = torch.zeros(m, m, dtype=x.dtype, device=x.device)
            hs = hp.sum(0)
            corner[pairs[0], pairs[1]] = hs
            corner[pairs[1], pairs[0]] = hs
            H[md:, md:] += corner

    def _add_hessian_sparse(self, x, d2):
        """``X^T diag(h_kl) X`` for a sparse COO ``x``: a sparse-sparse product per class
        pair, densified only as the (d x d) Hessian block (never the n x d design)."""
        m, d = self.m, self.d
        md = m * d
        blocks = d2.view(-1, 1, 1) if d2.dim() == 1 else d2
        x = x.coo
        H, xt = self.hess, x.t()
        for k in range(m):
            for l in range(k, m):
                h = blocks[:, k, l]
                xh = x * h.unsqueeze(-1)
                xx = torch.sparse.mm(xt, xh).to_dense()
                H[k * d : (k + 1) * d, l * d : (l + 1) * d] += xx
                if l != k:
                    H[l * d : (l + 1) * d, k * d : (k + 1) * d] += xx.T
                if self.has_bias:
                    xh_sum = torch.sparse.sum(xh, 0).to_dense()
                    hs = h.sum()
                    for a, b in ((k, l), (l, k)) if l != k else ((k, l),):
                        H[a * d : (a + 1) * d, md + b] += xh_sum
                        H[md + b, a * d : (a + 1) * d] += xh_sum
                        H[md + a, md + b] += hs

    def _add_diag(self, x, curv: "_Curvature"):
        m, d = self.m, self.d
        h = curv.diagonal()  # (n, m)
        self.diag[: m * d] += _rt_x(h, x, square=True).reshape(-1)
        if self.has_bias:
            self.diag[m * d :] += h.sum(0)

    def finish(self) -> "PassSums":
        """All-reduce, normalize by the total weight and add the penalty."""
        sums = [self.loss_sum, self.weight_sum, self.counts, self.y_sum, self.grad]
        if self.hess is not None:
            sums.append(self.hess)
        if self.diag is not None:
            sums.append(self.diag)
        all_reduce_sum(*sums)
        S = self.weight_sum
        # A finite loss with an overflowed gradient or Hessian (huge features, exp(eta)
        # times x^2) is no usable point either: counted as one invalid sample, so a trial
        # there is rejected like one outside the link's domain. One host read per pass.
        finite = torch.isfinite(self.loss_sum) & torch.isfinite(self.grad).all()
        for t in (self.hess, self.diag):
            if t is not None:
                finite = finite & torch.isfinite(t).all()
        no_loss = ~torch.isfinite(self.loss_sum)
        invalid, saturated, n, n_offset, overflow, infinite = torch.cat(
            [self.counts, torch.stack([~finite, no_loss]).to(self.counts.dtype).reshape(2)]
        ).tolist()
        self.n_invalid = int(invalid) + int(overflow)
        # A point without a likelihood (eta outside the link's domain, or a target of zero
        # likelihood: y > 0 at a Poisson mean 0), as opposed to finite sums that overflowed.
        self.no_likelihood = invalid > 0 or infinite > 0
        self.n_saturated = int(saturated)
        self.n_samples = int(n)
        self.n_offset = int(n_offset)
        w, pen = self.theta * self.mask, self.penalty
        self.loss = self.loss_sum / S + pen.value(w)
        self.grad = self.grad / S + pen.grad(w)
        if self.hess is not None:
            self.hess = self.hess / S + torch.diag(pen.curvature(self.mask))
        if self.diag is not None:
            self.diag = self.diag / S + pen.curvature(self.mask)
        return self

    def hvp(self, v: torch.Tensor) -> torch.Tensor:
        """Hessian-vector product ``H v`` from the stored per-batch curvature.

        ``H v = X~^T (h * (X~ V)) / S + l2 mask * v``: the forward (``jvp``) and
        backward (``vjp``) products of the linear map around the per-sample
        curvature from :func:`eta_derivatives`; ``H`` is never formed. Every
        process calls it the same number of times (one all-reduce each).
        """
        m, d = self.m, self.d
        V = v[: m * d].view(m, d)
        c = v[m * d :] if self.has_bias else None
        out = torch.zeros_like(v)
        for x, curv in self.stored:
            u = x @ V.T  # (n, m): the directional change of eta
            if c is not None:
                u = u + c
            hu = curv.apply(u)
            out[: m * d] += _rt_x(hu, x).reshape(-1)
            if c is not None:
                out[m * d :] += hu.sum(0)
        all_reduce_sum(out)
        return out / self.weight_sum + self.penalty.curvature(self.mask) * v


class _Curvature:
    """The eta-curvature of one batch: ``h`` (n,) per sample, ``K x K`` blocks
    (n, K, K), or for the canonical softmax (``probs``) the means ``mu`` (n, K) and
    sample weights ``s``, ``H_i = s_i (diag(mu_i) - mu_i mu_i^T)`` (O(nK), not O(nK^2))."""

    def __init__(self, d2: torch.Tensor, weight: torch.Tensor | None = None, probs: bool = False):
        self.d2, self.weight, self.probs = d2, weight, probs

    def diagonal(self) -> torch.Tensor:
        """``H_i[k, k]``, shape (n, m)."""
        d2 = self.d2
        if self.probs:
            h = d2 * (1 - d2)
            return h if self.weight is None else _scale(h, self.weight)
        return d2.unsqueeze(-1) if d2.dim() == 1 else torch.diagonal(d2, dim1=-2, dim2=-1)

    def apply(self, u: torch.Tensor) -> torch.Tensor:
        """``H_i u_i`` for ``u`` of shape (n, m)."""
        d2 = self.d2
        if self.probs:
            hu = d2 * u - d2 * (d2 * u).sum(-1, keepdim=True)
            return hu if self.weight is None else _scale(hu, self.weight)
        return d2.unsqueeze(-1) * u if d2.dim() == 1 else torch.einsum("nkl,nl->nk", d2, u)


#: Precisions of a dense Hessian's products (:class:`PassSums`): ``"highest"``, the
#: working dtype; ``"tf32"``, float32 products on TF32 tensor cores (CUDA; the working
#: dtype elsewhere, where there are none); ``"bf16"``, bfloat16 operands (8 bits of
#: mantissa) with each chunk's product added in the working dtype (on a CUDA device
#: the product itself is accumulated and returned in float32).
HESSIAN_PRECISIONS = ("highest", "tf32", "bf16")


def _add_product(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, precision: str) -> None:
    """``out += a @ b`` in the given precision (:data:`HESSIAN_PRECISIONS`)."""
    if precision == "bf16":
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        if out.is_cuda and out.dtype == torch.float32:
            out += torch.mm(a, b, out_dtype=torch.float32)  # cuBLAS: float32 accumulate and result
        else:
            # (no float32 result for bfloat16 operands on a CPU: each chunk's result is
            # rounded to bfloat16, about 1e-3 relative on a CPU's chunks)
            out += torch.mm(a, b).to(out.dtype)
    elif precision == "tf32" and out.is_cuda and out.dtype == torch.float32:
        matmul = torch.backends.cuda.matmul  # the fp32_precision API (the legacy flag must not mix with it)
        before = matmul.fp32_precision
        matmul.fp32_precision = "tf32"
        try:
            out.addmm_(a, b)
        finally:
            matmul.fp32_precision = before
    else:
        out.addmm_(a, b)


def _fused_rows(x: torch.Tensor) -> int | None:
    """Rows per slab of a pass over a dense design on a CPU (about 4 MB each), or
    ``None`` for one piece: sparse, on an accelerator, or small enough for cache."""
    if x.is_sparse or x.device.type != "cpu" or x.numel() * x.element_size() <= 2**23:
        return None
    return _chunk_rows(x, x.shape[1], cpu_budget=2**19)


#: Elements per product chunk on an accelerator (few, large kernels).
ACCELERATOR_CHUNK = 2**26


def _chunk_rows(x: torch.Tensor, width: int, cpu_budget: int = 2**16) -> int:
    """Rows per chunk for products over ``width`` columns: about ``cpu_budget``
    elements on a CPU (2^16: the chunk and its products stay in cache),
    :data:`ACCELERATOR_CHUNK` on an accelerator."""
    budget = cpu_budget if x.device.type == "cpu" else ACCELERATOR_CHUNK
    return max(256, budget // max(width, 1))


class SparseRows:
    """A sparse batch of rows for the products of a pass, kept in CSR.

    ``x @ W^T`` is a CSR product; the products back onto ``x`` (gradient ``x^T r``,
    diagonal ``(x * x)^T h``, Hessian-vector products) use a CSR of ``x^T`` (and of
    ``(x * x)^T`` when asked), built once and kept in ``cache`` (the fitter's dict)
    for the later passes over the same batch: measured on a 25,000 x 10,000 design
    with 150 entries per row (one thread), ``x^T r`` takes 9 ms this way against
    220 ms through COO (and 380 ms as a transposed CSR), for one 180 ms build. A
    batch is known again by its column-index and value storage (the contiguous row
    slices of :class:`~torchglm.data.batches.TensorBatches` are views); the entry
    holds those tensors, so their memory cannot be reused while it lives, and lives
    while the passes use it (:meth:`evict_unseen`). The Hessian of a sparse design
    (small ``d``) is formed from the COO form.
    """

    is_sparse = True

    def __init__(self, csr: torch.Tensor, entry: dict):
        self.csr, self.entry = csr, entry
        self.shape, self.dtype, self.device = csr.shape, csr.dtype, csr.device

    @classmethod
    def of(cls, x: torch.Tensor, cache: dict | None, dtype: torch.dtype) -> "SparseRows":
        """The batch ``x`` as given (CSR or COO, any dtype) in CSR and ``dtype``; the
        conversion too is kept in ``cache`` with the transposes (a float32 batch of a
        float64 fit is cast once, not every pass)."""
        sparse_csr = x.layout == torch.sparse_csr
        parts = (x.col_indices(), x.values(), x.crow_indices()) if sparse_csr else (x._indices(), x._values())
        key = (
            x.layout,
            parts[0].data_ptr(),
            parts[1].data_ptr(),
            parts[1].numel(),
            tuple(x.shape),
            x.dtype,
            dtype,
            str(x.device),
        )
        entry = None if cache is None else cache.get(key)
        if entry is None:
            csr = x if sparse_csr else x.to_sparse_csr()
            entry = {"pinned": parts, "csr": csr.to(dtype)}
            if cache is not None:
                cache[key] = entry
        entry["seen"] = True
        return cls(entry["csr"], entry)

    @staticmethod
    def evict_unseen(cache: dict) -> None:
        """Drop the entries no batch of the last pass used (shuffled batches are new
        tensors every pass: without this the cache would grow by a pass's batches per
        pass), and start watching the next pass."""
        for key in [k for k, e in cache.items() if not e.get("seen")]:
            del cache[key]
        for e in cache.values():
            e["seen"] = False

    def __matmul__(self, w: torch.Tensor) -> torch.Tensor:
        return self.csr @ w

    def transposed(self, square: bool = False) -> torch.Tensor:
        """CSR of ``x^T`` (or of ``(x * x)^T``), built on first use."""
        if square:
            if "t_square" not in self.entry:
                t = self.transposed()  # the same pattern, squared values
                self.entry["t_square"] = torch.sparse_csr_tensor(
                    t.crow_indices(), t.col_indices(), t.values() ** 2, size=t.shape
                )
            return self.entry["t_square"]
        if "t" not in self.entry:
            csr = self.csr
            n, d = csr.shape
            col, values = csr.col_indices(), csr.values()
            rows = torch.repeat_interleave(torch.arange(n, device=col.device), csr.crow_indices().diff())
            order = torch.argsort(col, stable=True)  # by column, rows ascending within
            ccol = torch.zeros(d + 1, dtype=col.dtype, device=col.device)
            ccol[1:] = torch.bincount(col, minlength=d).cumsum(0)
            self.entry["t"] = torch.sparse_csr_tensor(
                ccol, rows[order].to(col.dtype), values[order], size=(d, n)
            )
        return self.entry["t"]

    @property
    def coo(self) -> torch.Tensor:
        if "coo" not in self.entry:
            self.entry["coo"] = self.csr.to_sparse_coo().coalesce()
        return self.entry["coo"]


def _rt_x(r: torch.Tensor, x, square: bool = False) -> torch.Tensor:
    """``r^T x`` (or ``r^T (x * x)`` with ``square``) for a dense ``r`` (n, m) and a
    dense ``x`` (n, d) or :class:`SparseRows`; dense products are summed over row
    chunks, so neither ``x * x`` nor a badly shaped ``(m x n) (n x d)`` product is
    formed whole."""
    if isinstance(x, SparseRows):
        return (x.transposed(square) @ r).T
    n = x.shape[0]
    rows = _chunk_rows(x, x.shape[1])
    if not square and (r.shape[1] == 1 or rows >= n):
        return r.T @ x
    out = torch.zeros(r.shape[1], x.shape[1], dtype=x.dtype, device=x.device)
    for i in range(0, n, rows):
        xc = x[i : i + rows]
        out.addmm_(r[i : i + rows].T, xc * xc if square else xc)
    return out


def _scale(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return t * s.view(-1, *([1] * (t.dim() - 1)))


def hessian_and_gradient(
    model, batches: Iterable[Batch], expected: bool = False, dtype: torch.dtype = torch.float64
):
    """Objective, gradient and Hessian at the model's current parameters.

    Sums over ``batches`` (all-reduced across processes when ``torch.distributed``
    is initialized) of the penalized objective ``E`` of the model (mean NLL +
    ``(l2/2)||W||^2``), its gradient and its Hessian (seed 003: at the MAP
    estimate, the Hessian is the precision of the Laplace posterior; its
    inverse, the asymptotic covariance of the estimate, divided by ``sum_i s_i``).

    Parameter order: ``[W.reshape(-1), b]``, i.e. ``weight[k, j]`` at index
    ``k * n_features + j``, then ``bias[k]`` at ``n_outputs * n_features + k``
    (see :func:`parameter_names`).

    Args:
        model: a fitted or unfitted ``GeneralizedLinearModel``.
        batches: iterable of :class:`~torchglm.data.batches.Batch` (e.g.
            ``TensorBatches(x, y)``); targets in the dtype ``family.check_target`` gives.
        expected: return the expected (Fisher) information instead of the
            observed Hessian (they coincide for canonical links).
        dtype: computation dtype (float64 by default).

    Returns:
        ``(loss, grad, H)``: a 0-d tensor, shape (p,) and (p, p), where
        ``p = n_outputs * (n_features + fit_intercept)``. All are scaled like the
        objective (divided by the total sample weight); multiply ``H`` by
        ``sum_i s_i`` for the Hessian of the summed negative log-likelihood.

    Example:
        >>> from torchglm.data import TensorBatches
        >>> x = torch.randn(200, 3); y = (x[:, 0] + torch.randn(200) > 0).float()
        >>> m = LogisticRegression(3, l2=0.1)
        >>> loss, g, H = hessian_and_gradient(m, TensorBatches(x, y))
        >>> g.shape, H.shape, H.dtype
        (torch.Size([4]), torch.Size([4, 4]), torch.float64)
    """
    theta = flat_parameters(model, dtype).to(model.param_device)
    sums = PassSums(model, theta, "expected" if expected else "full")
    for batch in batches:
        sums.add(batch)
    sums.finish()
    return sums.loss, sums.grad, sums.hess
