"""One pass of sums: loss, gradient and curvature of a GLM over batches.

``E``, ``grad E`` and ``hess E`` are sums over the samples of the per-sample
derivatives on the eta scale (:mod:`.eta_derivatives`, which gives the chain
rule) times products with the augmented design ``x~_i = [x_i, 1]``
(:mod:`.products`); a pass adds them batch by batch and all-reduces them once.
Flat vectors and matrices follow :mod:`.layout`'s parameter order.
"""

from __future__ import annotations

from typing import Iterable

import math

import torch

from ..data.batches import Batch
from ..distributed import rank_and_world
from ..passes import LinearModel, all_reduce_sum, linear_predictor
from ..penalty import L2Penalty
from .eta_derivatives import eta_derivatives
from .layout import flat_parameters, penalty_mask
from . import products
from .curvature import Curvature, add_hessian, add_hessian_and_gradient, add_hessian_sparse, scale_rows
from .sparse_rows import SparseRows

__all__ = ["PassSums", "hessian_and_gradient"]

#: One output's Hessian pass sums the gradient in the Hessian's products
#: (:meth:`PassSums._add_hessian_and_gradient`) from this many features. A float32
#: Hessian pass, fused against unfused (CPU time, one thread, least of 10): 500,000 x 30
#: (Poisson) 32-37 against 40-48 ms, 200,000 x 50 (probit) 37-41 against 44; at
#: 1,000,000 x 20 (logit) 63-70 against 55-60: there the two columns written into every
#: chunk's copy cost more than the two reads of each slab they save.
FUSED_MIN_FEATURES = 24

#: Stored dense batches keep a contiguous ``x^T`` for the Hessian-vector products
#: (:meth:`PassSums._kept_xt`) up to this many entries in all: 2 MB in float64.
HVP_TRANSPOSED_MAX = 2**18

#: A Hessian pass keeps its batches' ``d1`` and ``h`` up to this many rows in all (1 MB
#: in float64) and sums ``d1^2 / h`` only where :attr:`PassSums.gradient_rounding` is
#: read (a Newton step that drops directions); past it, each batch sums its own.
SCORE_KEPT_MAX_ROWS = 2**16
#: Rows of a one-output dense batch up to which a pass in slabs keeps its slabs'
#: ``nll``, ``r`` and ``h`` and sums and counts them once (:meth:`PassSums._add_slabs`):
#: 1 MiB each in float64.
WHOLE_SUMS_MAX_ROWS = 2**17


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
    probability numerically 0 or 1: a sign of separation), ``completely_separated``
    whether the point's own coefficients, as a direction, lower every sample's loss
    strictly (:meth:`~torchglm.families.Family.strictly_separated`: a proof that no
    optimum exists; counted with the saturation, else ``False``; ``False`` too where
    no sample is saturated, the only case that asks for it), ``n_samples`` the
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
        sparse_cache: a dict that outlives the pass (the fitter's), where a batch's
            design keeps what the passes derive from it: a sparse batch's CSR and its
            transposes (:class:`SparseRows`), a small dense one's ``[x, 1]``
            (:meth:`_augmented`).
        hessian_precision: the precision of the products ``X~^T [h X~]`` of a dense
            Hessian (:data:`HESSIAN_PRECISIONS`); everything else is summed in
            ``theta``'s dtype.
        hessian_stride: ``r > 1``: a dense Hessian sums only every ``r``-th row of
            each slab, scaled by the slab's rows over the rows summed (a sketched
            Hessian, :mod:`.sketch`; ``sketched`` then says one was summed): an
            estimate, never a certificate. Loss and gradient use every row.
        target_cache: a dict that outlives the pass (the fitter's), where a batch's
            targets keep the family's :meth:`~torchglm.families.Family.nll_y_term`
            (a Poisson's ``lgamma(y + 1)``, a Bernoulli's float targets and ``1 - y``)
            between passes (:meth:`y_term`).
        diagonal: ``False``: a ``"hvp"`` pass sums no ``diag`` (``None``; its products
            with ``x * x`` cost a dense float64 pass about twice its gradient's), for a
            Newton-CG solve with a preconditioner of its own.
    """

    def __init__(
        self,
        model: LinearModel,
        theta: torch.Tensor,
        curvature: str | None = "full",
        saturation: float = 0.0,
        y_sum: bool = False,
        targets_only: bool = False,
        sparse_cache: dict | None = None,
        hessian_precision: str = "highest",
        hessian_stride: int = 1,
        target_cache: dict | None = None,
        diagonal: bool = True,
    ):
        self.family = model.family
        self.target_cache = target_cache
        self.hessian_precision = hessian_precision
        self.hessian_stride = hessian_stride
        self.sketched = False
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
        self.targets_only = targets_only
        if targets_only:
            curvature = self.curvature = None
        self.want_y_sum = y_sum or targets_only
        # Every sum of the pass in one zeroed buffer (one allocation, one all-reduce, one
        # finiteness test in :meth:`finish`): the 6 counts, the weight sum, the target
        # sum, then the loss, the gradient and the Hessian or its diagonal, contiguous
        # in that order. The counts are n_invalid, n_saturated, n_samples, n_offset,
        # n_unseparated (samples of positive weight that theta's direction does not
        # strictly separate), and the sum behind :attr:`gradient_rounding` (sum of
        # d1^2 / h over the rows).
        ny = 1 if self.scalar else m
        with_diag = curvature == "diag" or (curvature == "hvp" and diagonal)
        curv = p * p if curvature in ("full", "expected") else p if with_diag else 0
        # One output's bias column of the Hessian, X~^T h (:meth:`bias_product`), last.
        nb = d + 1 if curvature == "hvp" and self.scalar and self.has_bias else 0
        self._loss_at = 7 + ny
        self._sums = buf = torch.zeros(self._loss_at + 1 + p + curv + nb, **opts)
        counts, weight_sum, y_sum, loss_sum, self.grad, rest, bias_column = buf.split_with_sizes(
            [6, 1, ny, 1, p, curv, nb]
        )
        self.bias_column = bias_column if nb else None
        self.counts = counts  # (``counts[i].add_``: one view and one op where a count is added)
        self.weight_sum, self.loss_sum = weight_sum.view(()), loss_sum.view(())
        self.y_sum = y_sum.view(()) if self.scalar else y_sum
        self.hess = rest.view(p, p) if curvature in ("full", "expected") else None
        self.diag = rest if with_diag else None
        self._batches = 0  # batches whose unseparated samples were counted or deferred
        self._batches_seen = 0  # batches (row slabs) added
        # A CPU pass's first batch, while none of its samples is saturated: its unseparated
        # samples are counted only where a saturated sample makes them matter (:meth:`_count_unseparated`).
        self._deferred: tuple | None = None
        self._unseparated = False  # an unseparated sample counted (:meth:`_count_unseparated`)
        self.stored: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._sketch_rows: list[tuple] = []  # (x, eta, y, weight) (:meth:`_add_sketch`)
        self._fused: torch.Tensor | None = None  # x^T [h x, r, h] (:meth:`_add_hessian_and_gradient`)
        self._xt: dict[int, torch.Tensor] = {}  # x^T of small stored batches (:meth:`_kept_xt`)
        # entries of the small batches' kept x^T and x * x (:meth:`_keeps`)
        self._kept_entries = {"transposed": 0, "squared": 0}
        self._hvp_penalty: torch.Tensor | None = None
        self._model = model
        # The (d1, h) of the batches whose sum of d1^2 / h waits to be asked for
        # (:meth:`_add_score`); ``None`` once past :data:`SCORE_KEPT_MAX_ROWS`.
        self._scores: list[tuple[torch.Tensor, torch.Tensor]] | None = []
        self._score_rows = 0
        self._rounding: tuple | None = None
        self._rounding_summed = False

    @property
    def mask(self) -> torch.Tensor:
        """1 for the penalized (weight) entries of ``theta``, 0 for the bias
        (:func:`.layout.penalty_mask`), made where a caller asks for it: a pass adds the
        penalty over the leading ``m d`` entries, which are the penalized ones."""
        return penalty_mask(self._model, dtype=self.theta.dtype, device=self.theta.device)

    def eta(self, x: torch.Tensor, offset: torch.Tensor | None) -> torch.Tensor:
        """The batch's linear predictor (:func:`~torchglm.passes.linear_predictor`); for
        one output over a dense batch that :func:`.products.gemv_applies` to, through
        :func:`.products.mv`."""
        # One value of the offset per sample, added to every output's eta, in the
        # pass's dtype (a float32 batch's offset under a float64 fit).
        offset = None if offset is None else offset.to(self.theta.dtype)
        if self.scalar and products.gemv_applies(x):
            eta = products.mv(x, self.W[0], self.b)
            return eta if offset is None else eta.add_(offset)
        return linear_predictor(x, self.W, self.b, offset, not self.scalar)

    def add(self, batch: Batch) -> None:
        if self.targets_only:
            return self._add_targets(batch.y, batch.offset, batch.weight)
        if batch.x.layout != torch.strided:
            # Sparse counts (bag of words) stay sparse, in CSR with a cached CSR of x^T.
            x = SparseRows.of(batch.x, self.sparse_cache, self.theta.dtype)
        else:
            x = batch.x.to(self.theta.dtype)
        if self.scalar and products.gemv_applies(x):
            with products.blas_threads(x):
                return self._add_batch(x, batch)
        return self._add_batch(x, batch)

    def _add_batch(self, x, batch: Batch) -> None:
        """:meth:`add` for a batch in the pass's dtype (a sparse one as :class:`SparseRows`)."""
        rows = products.fused_rows(x, self.m)
        if rows is None:
            return self._add(x, batch.y, batch.offset, batch.weight)
        if self.scalar and self.hess is None:
            return self._add_slabs(x, batch.y, batch.offset, batch.weight, rows)
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

    def _add_slabs(self, x, y, offset, s, rows: int) -> None:
        """One output's loss and gradient (and, in a ``"diag"`` or ``"hvp"`` pass, its
        curvature: the diagonal, the kept per-sample curvature and the bias column) over
        a large dense batch, in slabs of ``rows`` (:func:`.products.fused_rows`) with as
        few operations per slab as its products need: its ``eta`` added in place into a
        batch-long ``eta`` that holds the bias and offset
        (:class:`.products.SlabProducts`), its derivatives, and ``r^T x`` (and ``h``'s
        products) added while the slab is in cache. A batch of at most
        :data:`WHOLE_SUMS_MAX_ROWS` rows (a wide design's many short slabs) keeps its
        slabs' ``nll``, ``r`` and ``h`` and sums and counts them once; a longer one
        counts each slab and adds them into slab-long sums, reduced once.
        (A float32 pass over 50,000 x 500, 48 slabs, spent about 8 of its 20 ms in the
        30-odd small operations per slab of :meth:`_add`, and 1.4 of its 14 ms in the
        per-slab counts and sums; at 500,000 x 30, 30 slabs, batch-long copies of
        ``nll`` and ``r`` took a float64 pass from 15 to 24 ms.)"""
        dt = self.theta.dtype
        y_term = self.y_term(y, dt)
        self._add_targets(y, offset, s)
        s = None if s is None else s.to(dt)
        n, d = x.shape[0], self.d
        order = 1 if self.curvature is None else 2
        slabs = products.SlabProducts(x, self.W[0], self.grad[:d])
        whole = n <= WHOLE_SUMS_MAX_ROWS
        # eta: the batch's (whole) or each slab's afresh (a count may keep it: the
        # deferred count of :meth:`_count_unseparated`); nll, r, h: each slab's or their sums
        eta = self._eta_start(n, offset) if whole else None
        parts = [[], [], []] if whole else torch.zeros(3, min(rows, n), dtype=dt, device=self.theta.device)
        for i in range(0, n, rows):
            j = i + rows
            e = eta[i:j] if whole else self._eta_start(min(j, n) - i, offset, i)
            slabs.add_eta(i, j, e)
            out = eta_derivatives(self.family, e, y[i:j], order, self.expected, _rows(y_term, i, j))
            if not whole:
                self._add_sample_counts(e, y[i:j], _rows(offset, i, j), _rows(s, i, j), out[0])
            if s is not None:
                w = s[i:j]
                out = (out[0] if whole else out[0] * w, *(t * w for t in out[1:]))
            slabs.add_gradient(i, j, out[1])
            if order == 2:
                self._add_slab_curvature(x[i:j], out[2])
            for part, t in zip(parts, out):
                part.append(t) if whole else part[: t.shape[0]].add_(t)
        if whole:
            nll, r, *h = (p[0] if len(p) == 1 else torch.cat(p) for p in parts if p)
            self._add_sample_counts(eta, y, offset, s, nll)
            sums = (nll.sum() if s is None else torch.dot(s, nll), r.sum(), h[0].sum() if h else None)
        else:
            sums = parts.sum(1)
        self.loss_sum += sums[0]
        if self.has_bias:
            self.grad[d:] += sums[1]
        if order == 2 and self.bias_column is not None:
            self.bias_column[d] += sums[2]

    def _add_slab_curvature(self, x, h: torch.Tensor) -> None:
        """A slab's curvature ``h`` (n,) in a one-output ``"diag"``/``"hvp"`` pass
        (:meth:`_add_slabs`): the bias column's ``x^T h`` while the slab is in cache, the
        diagonal and the kept curvature (:meth:`_add_curvature`)."""
        if self.bias_column is not None:
            products.add_rt_v(self.bias_column[: self.d], x, h)
        self._add_curvature(x, h, None, False)

    def _eta_start(self, n: int, offset, i: int = 0) -> torch.Tensor:
        """A new ``eta`` of the batch's ``n`` rows from ``i`` holding their bias and
        offset only, for the slabs' products to add into (:meth:`_add_slabs`)."""
        e = torch.empty(n, dtype=self.theta.dtype, device=self.theta.device)
        if offset is not None:
            e.copy_(offset.reshape(-1)[i : i + n])
            return e.add_(self.b.reshape(())) if self.has_bias else e
        return e.fill_(self.b.reshape(())) if self.has_bias else e.zero_()

    def _add_sample_counts(self, eta, y, offset, s, nll) -> None:
        """A batch's samples outside the link's domain and its saturated ones (with
        their separation, :meth:`_count_unseparated`); ``s``: the weights in ``eta``'s
        dtype."""
        if self.restricted:
            # The family knows its mean's domain (a Gaussian mean may be negative
            # under the inverse link; a binomial mean must stay below 1 under log).
            valid = self.family.valid_eta(eta)
            self.counts[0].add_((~valid).sum() if valid.dim() == 1 else (~valid.all(-1)).sum())
        if self.saturation > 0:
            saturated = (nll < self.saturation).sum()
            self.counts[1].add_(saturated)
            self._count_unseparated(eta, y, offset, s, saturated)

    def _add_targets(self, y, offset, s) -> None:
        """Weight sum, row counts and (asked for) weighted target sum of one batch."""
        n = y.shape[0]
        self.weight_sum += n if s is None else s.to(self.theta.dtype).sum()
        self.counts[2].add_(n)
        if offset is not None:
            self.counts[3].add_(n)
        if self.want_y_sum and self.scalar:
            yt = y.to(self.theta.dtype)
            self.y_sum += (yt if s is None else s.to(yt.dtype) * yt).sum()
        elif self.want_y_sum:
            # The one-hot targets summed: the weight of each class.
            w = torch.ones_like(y, dtype=self.theta.dtype) if s is None else s.to(self.theta.dtype)
            self.y_sum.index_add_(0, y.long(), w)

    def _add(self, x, y, offset, s) -> None:
        self._batches_seen += 1
        eta = self.eta(x, offset)
        # Canonical softmax under "diag"/"hvp": the curvature is kept as mu (n, K)
        # (H_i = diag(mu_i) - mu_i mu_i^T), never as n K x K blocks.
        probs = not self.scalar and self.family.is_canonical and self.curvature in ("diag", "hvp")
        # A sketched Hessian needs the curvature of its rows only (below).
        sketch = self.hess is not None and self.hessian_stride > 1 and not x.is_sparse
        y_term = self.y_term(y, eta.dtype)
        closed = self.family.nll_gradient_and_mean(eta, y) if probs else None
        if closed is not None:
            nll, d1, d2 = closed  # one softmax for the loss, gradient and kept mu
        elif self.curvature is None or probs or sketch:
            nll, d1 = eta_derivatives(self.family, eta, y, order=1, y_term=y_term)
            d2 = self.family.mean(eta) if probs else None
        else:
            nll, d1, d2 = eta_derivatives(self.family, eta, y, order=2, expected=self.expected, y_term=y_term)
        # The weight sum, row counts and target sum: the targets-only pass's sums.
        self._add_targets(y, offset, s)
        if s is not None:
            s = s.to(eta.dtype)
        self._add_sample_counts(eta, y, offset, s, nll)
        if s is not None:
            nll, d1 = s * nll, scale_rows(d1, s)
            if d2 is not None and not probs:
                d2 = scale_rows(d2, s)
        self.loss_sum += nll.sum()
        r = d1 if d1.dim() == 2 else d1.unsqueeze(-1)  # (n, m)
        m, d = self.m, self.d
        if self.has_bias:
            self.grad[m * d :].add_(r.sum(0))
        if sketch:
            self._add_gradient(x, r, d2)
            self._add_sketched_hessian(x, eta, y, s)
        elif d2 is not None and self.hess is not None and self.scalar:
            self._add_score(d1, d2)
            self._add_hessian_and_gradient(x, r, d2)
        else:
            self._add_gradient(x, r, d2)
            if d2 is not None:
                self._add_curvature(x, d2, s if probs else None, probs)

    def _add_hessian_and_gradient(self, x, r: torch.Tensor, d2: torch.Tensor) -> None:
        """One output's Hessian and gradient: a dense batch of several row chunks sums
        both in the same products (:func:`.curvature.add_hessian_and_gradient`, where
        the Hessian's products run in the working dtype), into one buffer for the pass
        that :meth:`finish` spreads; otherwise ``r^T x``, then the Hessian."""
        d, has_bias = self.d, self.has_bias
        fused = not x.is_sparse and self.hessian_precision == "highest" and d >= FUSED_MIN_FEATURES
        # (A batch of one row chunk adds nothing there: no buffer, and none to spread in
        # :meth:`finish`, which cost a small pass two dozen operations adding zeros.)
        fused = fused and not self._one_chunk(x)
        if fused and self._fused is None:
            self._fused = torch.zeros(d, d + 1 + has_bias, dtype=self.theta.dtype, device=self.theta.device)
        if fused and add_hessian_and_gradient(self._fused, x, d2, r[:, 0]):
            if has_bias:
                self.hess[d, d] += d2.sum()
            return
        self._add_gradient(x, r, d2)
        self._add_curvature(x, d2, None, False)

    def _one_chunk(self, x: torch.Tensor) -> bool:
        """Whether a dense batch's Hessian products over ``[x, 1]`` (one output) run as
        one row chunk (:func:`.products.chunk_rows`)."""
        return x.shape[0] <= products.chunk_rows(x, self.d + self.has_bias)

    def _spread_fused(self) -> None:
        """The pass's fused products (:meth:`_add_hessian_and_gradient`) into the Hessian's
        weight block and bias column and the gradient's weights."""
        out, d = self._fused, self.d
        if out is None:
            return
        self._fused = None
        self.hess[:d, :d] += out[:, :d]
        self.grad[:d] += out[:, d]
        if self.has_bias:
            self.hess[:d, d] += out[:, d + 1]
            self.hess[d, :d] += out[:, d + 1]

    def _add_gradient(self, x, r: torch.Tensor, d2: torch.Tensor | None) -> None:
        """``r^T x`` into the gradient; with the bias column (:meth:`bias_product`),
        ``X^T h`` in the same product (one more column over the same rows)."""
        m, d = self.m, self.d
        if m == 1 and products.gemv_applies(x):
            # one product per column over a slab in cache (50,000 x 500 in slabs of 1,046
            # rows, one thread: eta and two columns back 19.8 against 22.5 ms in float64
            # with torch's two-column product)
            products.add_rt_v(self.grad[:d], x, r[:, 0])
            if self.bias_column is not None and d2 is not None:
                products.add_rt_v(self.bias_column[:d], x, d2.view(-1))
                self.bias_column[d].add_(d2.sum())
            return
        if self.bias_column is not None and d2 is not None:
            rx = products.rt_x(torch.cat([r, d2.view(-1, 1)], 1), x)
            self.bias_column[:d].add_(rx[m])
            self.bias_column[d].add_(d2.sum())
            rx = rx[:m]
        else:
            rx = products.rt_x(r, x)
        self.grad[: m * d].add_(rx.reshape(-1))

    def _add_score(self, d1: torch.Tensor, h: torch.Tensor) -> None:
        """The batch's ``sum_i d1_i^2 / h_i`` (:meth:`_gradient_rounding`), kept for
        :attr:`gradient_rounding` to sum where it is read (two tensors held, no
        operation: a Newton step reads it only where it drops directions, and a small
        fit's passes spent five operations each on it) while the kept rows stay within
        :data:`SCORE_KEPT_MAX_ROWS`; past them the kept batches and every later one
        are summed into the pass's buffer, in their order."""
        if self._scores is not None and self._score_rows + d1.shape[0] <= SCORE_KEPT_MAX_ROWS:
            self._scores.append((d1, h))
            self._score_rows += d1.shape[0]
            return
        for a, b in self._scores or ():
            self.counts[5].add_(_score_over_curvature(a, b))
        self._scores = None
        self.counts[5].add_(_score_over_curvature(d1, h))

    def y_term(self, y: torch.Tensor, dtype: torch.dtype):
        """The family's :meth:`~torchglm.families.Family.nll_y_term` of the batch's targets
        ``y`` in ``dtype``, evaluated on the batch's first pass and kept in
        ``target_cache`` (:func:`_kept`)."""
        return _kept(self.target_cache, y, ("y_term", dtype), lambda: self.family.nll_y_term(y.to(dtype)))

    def _augmented(self, x: torch.Tensor) -> torch.Tensor | None:
        """The augmented design ``[x, 1]`` of a one-output Hessian pass's dense batch of one
        row chunk (:func:`.curvature.add_hessian`'s one product over it), kept in
        ``sparse_cache`` between passes (:func:`_kept`; the concatenation was two of a
        small pass's ~100 operations) for a pass's first batch only: a small fit's one
        batch, at most one chunk kept whatever the data's size. ``None`` elsewhere."""
        if not (self.has_bias and self.scalar and self._batches_seen == 1) or x.is_sparse:
            return None
        if not self._one_chunk(x):
            return None
        return _kept(self.sparse_cache, x, "augmented", lambda: torch.cat([x, x.new_ones(x.shape[0], 1)], 1))

    def _add_curvature(self, x, d2, s, probs: bool) -> None:
        """The batch's Hessian (dense or sparse), or its diagonal and the per-sample
        curvature kept for :meth:`hvp`."""
        if self.hess is not None and x.is_sparse:
            add_hessian_sparse(self.hess, x, d2, self.m, self.d, self.has_bias)
        elif self.hess is not None:
            xa = self._augmented(x)
            add_hessian(self.hess, x, d2, self.m, self.d, self.has_bias, self.hessian_precision, xa)
        else:
            curv = Curvature(d2, s, probs)
            if self.diag is not None:
                self._add_diag(x, curv)
            if self.curvature == "hvp":
                self.stored.append((x, curv))
                self._keep_xt(x)

    def _add_sketched_hessian(self, x, eta, y, s) -> None:
        """The Hessian summed over every ``r``-th row of a dense batch, times the rows per
        row kept (the sum over them estimates the batch's, :mod:`.sketch`). The
        curvature ``d2`` is evaluated on those rows only: the pass's own derivatives
        are first order (a probit's second derivative costs an asymptotic series per
        sample, a logit's one more exponential)."""
        r, n = self.hessian_stride, x.shape[0]
        x, eta, y = x[::r], eta[::r], y[::r]
        k = x.shape[0]
        w = torch.full((k,), n / k, dtype=eta.dtype, device=eta.device) if s is None else s[::r] * (n / k)
        self.sketched = True
        # Summed in :meth:`finish`, their curvature evaluated and their product taken once
        # over every slab's rows: a slab keeps a few hundred, and a product per slab cost a
        # third of a probit pass (200k x 50), the derivatives per slab 40 small operations.
        self._sketch_rows.append((x, eta, y, w))

    def _add_sketch(self) -> None:
        """The sketched rows of the pass's slabs: their curvature, one Hessian product."""
        if self._sketch_rows:
            x, eta, y, w = (torch.cat(part) for part in zip(*self._sketch_rows))
            self._sketch_rows = []
            d2 = eta_derivatives(self.family, eta, y, order=2, expected=self.expected)[2]
            add_hessian(
                self.hess, x, scale_rows(d2, w), self.m, self.d, self.has_bias, self.hessian_precision
            )

    def _count_unseparated(self, eta, y, offset, s, saturated: torch.Tensor) -> None:
        """Count the samples of positive weight whose loss theta's own direction (its
        linear predictor: eta less the offset) does not lower strictly; a family that
        proves no separation counts every sample.

        The count matters only in a pass with a saturated sample
        (:meth:`.SeparationWatch.at_boundary`), so on a CPU (where reading a count costs
        no device sync) the pass's first batch is counted only once a saturated sample
        is seen, in it or in the next batch, or at :meth:`finish`: a small fit's passes
        skip it (ten tensor operations a pass), and at most one batch waits."""
        if self.counts.device.type == "cpu":
            if self._deferred is not None:
                self._count_batch_unseparated(*self._deferred)
                self._deferred = None
            if self._batches and (self._unseparated or self.counts[4] > 0):
                self._unseparated = True  # (counts only grow: not read again)
                return  # one unseparated sample settles it
            self._batches += 1
            if self._batches == 1 and not saturated:
                self._deferred = (eta, y, offset, s)
                return
        self._count_batch_unseparated(eta, y, offset, s)

    def _count_batch_unseparated(self, eta, y, offset, s) -> None:
        """:meth:`_count_unseparated` for one batch."""
        eta_dir = eta if offset is None else eta - offset.to(eta.dtype).reshape(-1, *([1] * (eta.dim() - 1)))
        sep = self.family.strictly_separated(eta_dir, y)
        if sep is None:
            self.counts[4].add_(y.shape[0])
            return
        if s is not None:
            sep = sep | (s <= 0)
        self.counts[4].add_((~sep).sum())

    def _add_diag(self, x, curv: Curvature):
        m, d = self.m, self.d
        h = curv.diagonal()  # (n, m)
        if self._squares_kept(x):
            # ``x * x`` of a small dense batch, kept between passes (:func:`_kept`): made
            # afresh it cost each pass of digits (1,797 x 64) 0.15 ms in two row chunks.
            x2 = _kept(self.sparse_cache, x, "squared", lambda: x * x)
            self.diag[: m * d].add_(products.rt_x(h, x2).reshape(-1))
        else:
            self.diag[: m * d].add_(products.rt_x(h, x, square=True).reshape(-1))
        if self.has_bias:
            self.diag[m * d :].add_(h.sum(0))

    def finish(self) -> "PassSums":
        """All-reduce, normalize by the total weight and add the penalty."""
        self._add_sketch()
        self._spread_fused()
        if self._deferred is not None and (self.counts[1] > 0 or rank_and_world()[1] > 1):
            # (with several processes another one's saturated sample makes this one's
            # count matter: the counts are summed below)
            self._count_batch_unseparated(*self._deferred)
        buf, at = self._sums, self._loss_at
        all_reduce_sum(buf)
        # A finite loss with an overflowed gradient or Hessian (huge features, exp(eta)
        # times x^2) is no usable point either: counted as one invalid sample, so a trial
        # there is rejected like one outside the link's domain. One host read per pass:
        # the counts, the weight sum, and whether the loss and every sum after it are finite.
        # (``0 x`` is 0 for a finite ``x`` and NaN for an infinite or NaN one: their sum is
        # 0 exactly where all are finite, in two operations.)
        zeros = buf[at:].mul(0).sum(0, keepdim=True)
        *head, loss, zero = torch.cat([buf[: at + 1], zeros]).tolist()
        all_finite = zero == 0
        invalid, saturated, n, n_offset, unseparated, q_sum, S = head[:7]
        loss_finite = math.isfinite(loss)
        self.n_invalid = int(invalid) + int(not all_finite)
        # A point without a likelihood (eta outside the link's domain, or a target of zero
        # likelihood: y > 0 at a Poisson mean 0), as opposed to finite sums that overflowed.
        self.no_likelihood = invalid > 0 or not loss_finite
        self.n_saturated = int(saturated)
        self.completely_separated = self.saturation > 0 and saturated > 0 and n > 0 and unseparated == 0
        self.n_samples = int(n)
        self.n_offset = int(n_offset)
        self._rounding = (q_sum, n, S)
        # The penalty on the leading m d entries (the weights; :func:`.layout.penalty_mask`).
        pen, md = self.penalty, self.m * self.d
        w = self.theta[:md]
        self.loss = self.loss_sum / S + pen.value(w)
        # The loss as a Python float, read once: the stepper and its line search
        # compare it 5-8 times a pass, and each float() of the tensor was a host read
        # (breast_cancer's 455 x 30 Newton fit: 51 of its 1,024 torch operations).
        self.loss_value = float(self.loss)
        self.grad = self.grad / S
        self.grad[:md].add_(pen.grad(w))
        if self.hess is not None:
            self.hess = self.hess.div_(S)
            self.hess.diagonal()[:md].add_(pen.l2)
        if self.diag is not None:
            self.diag = self.diag.div_(S)
            self.diag[:md].add_(pen.l2)
        if self.bias_column is not None:
            self.bias_column = self.bias_column.div_(S)  # the bias is never penalized
        return self

    @property
    def gradient_rounding(self) -> float | None:
        """:meth:`_gradient_rounding` of the finished pass, its kept batches' sums of
        ``d1^2 / h`` (:meth:`_add_score`) added first (in their order: the same sum as
        the buffer's); every process reads it at the same step, and all-reduces them."""
        if not self._rounding_summed:
            kept = torch.zeros((), dtype=self.theta.dtype, device=self.theta.device)
            for a, b in self._scores or ():
                kept.add_(_score_over_curvature(a, b))
            all_reduce_sum(kept)  # (every process, kept batches or none)
            q_sum, n, S = self._rounding
            self._rounding, self._scores, self._rounding_summed = (q_sum + float(kept), n, S), None, True
        return self._gradient_rounding(*self._rounding)

    def _gradient_rounding(self, q_sum: float, n: float, S: float) -> float | None:
        """A bound on the rounding of each equilibrated gradient entry, or ``None``
        where this pass cannot give one (no Hessian of its own, several outputs).

        ``g_j = sum_i d1_i x_ij / S`` is summed with an error at most
        ``n eps sum_i |d1_i x_ij| / S`` (recursive summation; blocked sums do better),
        and by Cauchy-Schwarz with the weights ``h_i >= 0`` of ``H_jj = sum_i h_i x_ij^2 / S``,
        ``sum_i |d1_i x_ij| / S <= sqrt(H_jj) sqrt(Q)``, ``Q = sum_i (d1_i^2 / h_i) / S``.
        Equilibrated (``D_j = H_jj^{-1/2}``, the penalty only adding to ``H_jj``) the
        bound is ``n eps sqrt(Q)`` for every entry: a gradient along a direction that
        is null in the design (exactly collinear columns) is rounding below
        ``sqrt(p) n eps sqrt(Q)``, one above it is not."""
        if self.hess is None or not self.scalar or self.hessian_stride > 1 or not n:
            return None
        q = q_sum / S
        return n * torch.finfo(self.theta.dtype).eps * math.sqrt(q) if q >= 0 else None

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
        W = out[: m * d].view(m, d)
        bias_out = out[m * d :] if c is not None else None
        if m == 1 and self.stored and products.gemv_applies(self.stored[0][0]):
            with products.blas_threads(self.stored[0][0]):
                self._hvp_slabs(V[0], c, W[0], bias_out)
        elif self._xt and products.few_rows_applies(V, next(iter(self._xt.values()))):
            with products.blas_threads(None, hold=True):  # a kept x^T's products: dgemm's
                self._hvp_batches(V, c, W, bias_out)
        else:
            self._hvp_batches(V, c, W, bias_out)
        all_reduce_sum(out)
        if self._hvp_penalty is None:
            self._hvp_penalty = self.penalty.curvature(self.mask)
        return torch.addcmul(out.div_(self.weight_sum), self._hvp_penalty, v)

    def _hvp_batches(self, V, c, W, bias_out) -> None:
        """The stored batches' shares of :meth:`hvp` into ``W`` (m, d) and ``bias_out``."""
        for i, (x, curv) in enumerate(self.stored):
            xt = self._kept_xt(i)
            if xt is not None:
                # A small dense batch works in the (m, n) layout throughout: the products
                # (m, d) @ (d, n) and (m, n) @ (n, d) and the curvature on contiguous
                # rows (1,797 x 64, m = 10, one thread: 270 against 330 us a product).
                if products.few_rows_applies(V, xt):  # OpenBLAS's dgemm (float64)
                    ut = V.new_empty(V.shape[0], xt.shape[1])
                    ut = products.addmm_few_rows(
                        ut.zero_() if c is None else ut.copy_(c.unsqueeze(-1)), V, xt
                    )
                else:
                    ut = V @ xt if c is None else torch.addmm(c.unsqueeze(-1), V, xt)
                hu = curv.apply_t(ut)
                products.addmm_few_rows(W, hu, x)
                bias = hu.sum(1)
            else:
                hu = curv.apply(self._eta_change(x, V, c))  # (n, m): eta's change, curved
                W += products.rt_x(hu, x)
                bias = hu.sum(0)
            if bias_out is not None:
                bias_out += bias

    def _hvp_slabs(self, v, c, w, bias_out) -> None:
        """:meth:`_hvp_batches` for one output whose stored batches (a large dense
        design's slabs, :meth:`_add_slabs`) take scipy's gemv: per slab ``h * (x v + c)``
        and its ``x^T`` product, two products and one operation; the bias's share
        summed once over the slabs (the four more operations a slab took cost a
        50,000 x 500 float64 product about 1 of its 18 ms)."""
        hus = []
        for x, curv in self.stored:
            if products.gemv_applies(x):
                hu = products.mv(x, v, c).mul_(curv.d2)
            else:  # (a batch's last slab under the gemv's size)
                hu = curv.apply(self._eta_change(x, v.view(1, -1), c))[:, 0]
            products.add_rt_v(w, x, hu)
            hus.append(hu)
        if bias_out is not None:
            bias_out += (hus[0] if len(hus) == 1 else torch.cat(hus)).sum()

    def _keep_xt(self, x) -> None:
        """Keep ``x^T`` of the batch just stored, contiguous, where it is small and dense
        (:meth:`_xt_fits`): ``V x^T`` with ``x^T`` (m, d) @ (d, n) ran 1.9x faster than
        ``x V^T`` (n, d) @ (d, m) for m = 10 (MKL, one thread, 1,797 x 64: 171 against
        328 us), and a Newton-CG fit makes hundreds of them; a large batch is not copied
        (its products are memory-bound), nor one on an accelerator. The copy is kept in
        the design cache between passes (:func:`_kept`), looked up by every pass that
        stores the batch (a pass that then takes no product, a rejected trial, keeps it
        too): torch's transposing copy took 0.5 ms at 1,797 x 64, as long as two
        products, and digits' 21 Newton-CG passes made it afresh 21 times (8% of the
        fit)."""
        if self._xt_fits(x):
            self._xt[len(self.stored) - 1] = _kept(
                self.sparse_cache, x, "transposed", lambda: x.T.contiguous()
            )

    def _kept_xt(self, i: int) -> torch.Tensor | None:
        """``x^T`` of the ``i``-th stored batch (:meth:`_keep_xt`), or ``None`` where none
        is kept."""
        return self._xt.get(i)

    @staticmethod
    def _eta_change(x, V: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        """``X~ [V, c]^T`` (n, m) over a batch without a kept ``x^T``; a dense batch
        adds the bias inside the product's output."""
        if c is None or isinstance(x, SparseRows):
            u = x @ V.T
            return u if c is None else u + c
        return torch.addmm(c, x, V.T)

    def _squares_kept(self, x) -> bool:
        """Whether a batch's ``x * x`` (Jacobi's diagonal, :meth:`_add_diag`) is kept
        between passes (:meth:`_keeps`; a large design's, or many batches', are summed
        over row chunks, never formed whole)."""
        return self.sparse_cache is not None and self._keeps(x, "squared")

    def _xt_fits(self, x) -> bool:
        """Whether a stored batch gets a kept ``x^T`` (:meth:`_keeps`; many small batches
        of a large design are not copied whole)."""
        return self._keeps(x, "transposed")

    def _keeps(self, x, kind: str) -> bool:
        """Whether the pass keeps a copy of ``kind`` (``"transposed"`` or ``"squared"``)
        of the batch ``x``: dense, on a CPU, and within :data:`HVP_TRANSPOSED_MAX`
        entries with the copies of that kind it already keeps (counted here)."""
        if x.is_sparse or x.device.type != "cpu" or self._kept_entries[kind] + x.numel() > HVP_TRANSPOSED_MAX:
            return False
        self._kept_entries[kind] += x.numel()
        return True

    # -- sums of the stored curvature, on demand (a Newton-CG certificate) ---------------
    def bias_block(self) -> torch.Tensor:
        """``H_bb``, the exact bias-bias block of the Hessian (``sum_i H_i / S``, shape
        (m, m); the bias is never penalized), summed from the curvature a ``"hvp"``
        pass kept: O(n m^2), no pass over the data."""
        out = torch.zeros(self.m, self.m, dtype=self.theta.dtype, device=self.theta.device)
        for _, curv in self.stored:
            out += curv.block_sum()
        all_reduce_sum(out)
        return out / self.weight_sum

    def bias_product(self, c: torch.Tensor) -> torch.Tensor:
        """``H v`` for ``v`` zero but on the bias, ``c`` there (shape (m,)): for one
        output ``c`` times the Hessian's bias column ``[X^T h; sum h] / S``, summed in
        this ``"hvp"`` pass's gradient product (no pass over the data: a Newton-CG
        certificate's bias correction, :class:`~.certify.ResidualBound`, cost a
        Hessian-vector product, one of 13 passes on 50,000 x 500); else :meth:`hvp`."""
        if self.bias_column is not None:
            return c * self.bias_column
        v = torch.zeros(self.p, dtype=self.theta.dtype, device=self.theta.device)
        v[self.m * self.d :] = c
        return self.hvp(v)

    def negative_curvature(self) -> int:
        """The stored samples whose curvature floor (:meth:`.Curvature.floor`) is
        negative (a non-canonical link away from the optimum): with any, the data part
        of the Hessian is not known to be positive semidefinite."""
        count = torch.zeros((), dtype=self.theta.dtype, device=self.theta.device)
        for _, curv in self.stored:
            count += (curv.floor() < 0).sum()
        all_reduce_sum(count)
        return int(count)

    def gram_floor(self) -> torch.Tensor:
        """``G = X~^T diag(f) X~ / S`` with the per-sample floors ``f_i`` of
        :meth:`.Curvature.floor`, shape (d~, d~) in the order ``[features, bias]``: the
        data part of the Hessian is at least ``G (x) (I - 11^T/m)`` (``G`` itself for
        one output, where ``f_i = h_i`` makes it exact). Summed from the stored
        curvature, ``n d~^2`` flops."""
        dt = self.d + self.has_bias
        G = torch.zeros(dt, dt, dtype=self.theta.dtype, device=self.theta.device)
        for x, curv in self.stored:
            if x.is_sparse:
                add_hessian_sparse(G, x, curv.floor(), 1, self.d, self.has_bias)
            else:
                add_hessian(G, x, curv.floor(), 1, self.d, self.has_bias, "highest")
        all_reduce_sum(G)
        return G / self.weight_sum


def hessian_and_gradient(
    model: LinearModel, batches: Iterable[Batch], expected: bool = False, dtype: torch.dtype = torch.float64
):
    """Objective, gradient and Hessian at the model's current parameters.

    Sums over ``batches`` (all-reduced across processes when ``torch.distributed``
    is initialized) of the penalized objective ``E`` of the model (mean NLL +
    ``(l2/2)||W||^2``), its gradient and its Hessian (the lecture notes, §14: at the MAP
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


def _score_over_curvature(d1: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
    """``sum_i d1_i^2 / h_i`` of a batch (:meth:`PassSums._gradient_rounding`): 0 for a
    row with ``d1_i = 0``, infinite for one with ``h_i <= 0`` and ``d1_i != 0`` (no
    bound then)."""
    q = d1.square().div_(d2.clamp_min(torch.finfo(d2.dtype).tiny))  # 0 where d1_i = 0, whatever h_i
    return torch.where((d2 > 0) | (d1 == 0), q, torch.inf).sum()


def _kept(cache: dict | None, t: torch.Tensor, name, make):
    """``make()``, a value derived from the batch tensor ``t`` alone, kept in ``cache``
    (a fitter's dict that outlives the pass) under ``name`` for the later passes over the
    same batch. A batch's tensor is known again by its storage, shape, strides, dtype and
    version counter (an in-place write bumps it: the value is made anew); the entry holds
    ``t``, so its memory is not reused while the entry lives, and it lives while the passes
    use it (the fitter drops the entries a pass did not see, :meth:`.SparseRows.evict_unseen`).
    Without a cache, or for an inference tensor (no version counter), made every time."""
    if cache is None or t.is_inference():
        return make()
    key = (name, t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, str(t.device), t._version)
    entry = cache.get(key)
    if entry is None:
        entry = cache[key] = {"pinned": t, "value": make()}
    entry["seen"] = True
    return entry["value"]


def _rows(term, i: int, j: int):
    """Rows ``i:j`` of a family's kept target term (:meth:`PassSums.y_term`): a tensor,
    a tuple of tensors (a Bernoulli's targets and factor) or ``None``."""
    if term is None:
        return None
    if isinstance(term, tuple):
        return tuple(t[i:j] for t in term)
    return term[i:j]
