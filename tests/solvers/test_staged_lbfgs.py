"""L-BFGS in float32 with a float64 polish: ``auto`` on a dense or sparse softmax with many
classes, the stages' own rules (the first-order phase stops at the stage's resolution,
the polish begins with its Newton-type finish) and what the fit reports."""

import warnings

import pytest
import torch

from torchglm._validation import InputError
from torchglm.models import LogisticRegression, SoftmaxRegression
from torchglm.solvers import fit
from torchglm.solvers.gradient import LBFGSFitter
from torchglm.solvers import api
from torchglm.solvers.api import (
    AUTO_FLOAT32_LBFGS_MIN_FLOPS,
    AUTO_SMALL_MAX_ENTRIES,
    _auto_dtype,
    choose_solver,
)
from torchglm.data.batches import TensorBatches
from torchglm.passes import run_passes
from torchglm.solvers.pass_sums import PassSums

F64 = torch.float64


def _softmax_data(n, d, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    W = torch.randn(K, d, generator=g, dtype=F64) / d**0.5
    y = torch.multinomial(torch.softmax(x @ W.T, 1), 1, generator=g).squeeze(1)
    y[:K] = torch.arange(K)  # every class present
    return x, y


def _fit(model, x, y, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")  # torch's sparse-beta notes
        return fit(model, x, y, **options)


def _fits_with_column_7_scaled(make, design, scaled, y, given, **options):
    """``auto`` fits of ``make()`` to ``given(design)`` and to ``given(scaled)`` (column 7
    times 1e6), each certified by the float64 polish after a float32 stage: each fit's
    result and weights, the scaled fit's column 7 brought back to the design's scale."""
    out = []
    for d in (design, scaled):
        m = make()
        r = _fit(m, given(d), y, **options)
        assert r.converged and r.extra.stages == ["torch.float32", "torch.float64"], r.message
        out.append((r, m.linear.weight.detach().clone()))
    out[1][1][:, 7] *= 1e6
    return out


def test_auto_fits_a_large_dense_softmax_by_float32_lbfgs_with_a_float64_polish():
    n, d, K = 20_000, 20, 30
    assert 4 * n * (d + 1) * K >= AUTO_FLOAT32_LBFGS_MIN_FLOPS
    x, y = _softmax_data(n, d, K)
    auto, ref = SoftmaxRegression(d, K, l2=1e-4, dtype=F64), SoftmaxRegression(d, K, l2=1e-4, dtype=F64)
    assert choose_solver(auto, n, n * d) == "lbfgs"
    r = _fit(auto, x, y, tol=1e-10)
    r_ref = _fit(ref, x, y, solver="lbfgs", tol=1e-12)
    assert r.solver == "lbfgs" and r.extra.stages == ["torch.float32", "torch.float64"]
    assert r.converged and r_ref.extra.stages is None
    assert abs(r.extra.loss - r_ref.extra.loss) <= 1e-10 * r_ref.extra.loss
    # The polish begins with the finish: one pass at the float32 stage's point, and
    # its Newton-CG decrement certifies there (bounded by the L2 penalty's bound).
    assert r.message.startswith("the previous stage's first-order phase ended")
    assert r.extra.cg_certificate["bound"].startswith("L2 penalty")


def test_auto_keeps_float64_lbfgs_below_the_flops_threshold():
    x, y = _softmax_data(2_000, 20, 30)  # 4 n d~ K = 5e6: a float64 fit
    m = SoftmaxRegression(20, 30, l2=1e-4, dtype=F64)
    r = _fit(m, x, y, tol=1e-10)
    assert r.solver in ("lbfgs", "newton-cg") and r.extra.stages is None


def _binary_data(n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    w = torch.randn(d, generator=g, dtype=F64) * 2 / d**0.5
    y = (torch.rand(n, generator=g, dtype=F64) < torch.sigmoid(x @ w + 0.3)).to(F64)
    return x, y


def _passes_by_dtype(monkeypatch):
    """Counts, per dtype, of the fit's passes, of its Hessian-vector products and of its
    passes that summed ``diag(H)``."""
    counts = {"passes": {}, "products": {}, "diagonals": {}}
    hvp, finish, add_diag = PassSums.hvp, PassSums.finish, PassSums._add_diag

    def count(kind, dtype):
        counts[kind][dtype] = counts[kind].get(dtype, 0) + 1

    def counted_hvp(self, v):
        count("products", self.theta.dtype)
        return hvp(self, v)

    def counted_finish(self, *args, **kwargs):
        count("passes", self.theta.dtype)
        if self.diag is not None:
            count("diagonals", self.theta.dtype)
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(PassSums, "hvp", counted_hvp)
    monkeypatch.setattr(PassSums, "finish", counted_finish)
    monkeypatch.setattr(PassSums, "_add_diag", add_diag)
    return counts


def test_auto_fits_a_large_dense_binary_model_in_float32_and_finishes_in_the_polish(monkeypatch):
    """One output on a dense design: ``auto``'s L-BFGS works in float32 from the Jacobi
    start and hands its first-order stop to the float64 polish with its memory; every
    Hessian-vector product is the polish's, whose pass sums no ``diag(H)`` (its CG is
    preconditioned by the handed memory), and only the polish certifies."""
    monkeypatch.setattr(api, "AUTO_FLOAT32_LBFGS_MIN_FLOPS", 1e7)
    counts = _passes_by_dtype(monkeypatch)
    n, d = 6_000, 450
    x, y = _binary_data(n, d)
    auto = LogisticRegression(d, l2=1e-4, dtype=F64)
    assert choose_solver(auto, n, n * d) == "lbfgs" and 4 * n * (d + 1) >= 1e7
    r = _fit(auto, x, y, tol=1e-10)
    assert r.converged and r.extra.stages == ["torch.float32", "torch.float64"], r.message
    assert r.message.startswith("the previous stage's first-order phase ended; then 0 Newton-type")
    assert r.extra.cg_certificate["bound"].startswith("L2 penalty")
    # The float32 stage: L-BFGS passes only, its Jacobi diagonal once; no products.
    assert counts["products"].get(torch.float32, 0) == 0 and counts["diagonals"][torch.float32] == 1
    # The polish: one pass, without a diagonal, and its products.
    assert counts["passes"][torch.float64] == 1 and torch.float64 not in counts["diagonals"]
    assert counts["products"][torch.float64] == sum(r.extra.cg_iterations) <= 8
    assert r.extra.lbfgs_memory is None  # (the stage's memory is not part of the fit's record)
    ref = LogisticRegression(d, l2=1e-4, dtype=F64)
    r_ref = _fit(ref, x, y, solver="lbfgs", tol=1e-13)
    assert abs(r.extra.loss - r_ref.extra.loss) <= 1e-10 * r_ref.extra.loss
    torch.testing.assert_close(auto.linear.weight, ref.linear.weight, rtol=0, atol=2e-4)


def test_auto_keeps_a_dense_one_output_fit_in_float64_where_squares_overflow_float32(monkeypatch):
    """The float32 stage's Jacobi start sums ``x * x``: a column times 1e20 stays float64
    (:func:`~torchglm.solvers.api._squares_fit`), as on a sparse design."""
    monkeypatch.setattr(api, "AUTO_FLOAT32_LBFGS_MIN_FLOPS", 1e5)
    x, _ = _binary_data(1_000, 200)
    m = LogisticRegression(200, l2=0.0, dtype=F64)
    assert _auto_dtype(m, "lbfgs", x) == torch.float32
    x[:, 3] *= 1e20
    assert _auto_dtype(m, "lbfgs", x) is None


def test_auto_reads_the_extremes_of_a_dense_design_once(monkeypatch):
    """``auto``'s float32 choice (:func:`~torchglm.solvers.api._squares_fit`) takes the
    extremes the data gate read (:meth:`~torchglm.models.GeneralizedLinearModel.check_data`):
    one read of ``x`` for both (7 ms each on 50,000 x 500, one thread), and the same
    choice where the squares overflow float32 (a column times 1e20 stays float64)."""
    monkeypatch.setattr(api, "AUTO_FLOAT32_LBFGS_MIN_FLOPS", 1e5)
    x, y = _binary_data(1_000, 200)
    reads = []
    aminmax = torch.aminmax

    def spy(t, *args, **kwargs):
        reads.append(t.numel() == x.numel())
        return aminmax(t, *args, **kwargs)

    monkeypatch.setattr(torch, "aminmax", spy)
    r = _fit(LogisticRegression(200, l2=0.0, dtype=F64), x, y, solver="auto")
    assert r.extra.stages == ["torch.float32", "torch.float64"] and reads.count(True) == 1
    x[:, 3] *= 1e20  # (within float64's bound at the gate, past float32's)
    reads.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (no optimum within a few steps on that column)
        r = fit(LogisticRegression(200, l2=0.0, dtype=F64), x, y, solver="auto", max_iter=2)
    assert r.extra.stages is None and r.extra.dtype == "torch.float64" and reads.count(True) == 1


def test_a_float32_stage_that_finishes_in_the_next_stage_hands_on_its_memory():
    """``finish_in_next_stage``: the handoff stage's first-order phase runs to the
    caller's tol (not float32's resolution) and ends there, unconverged, with its pairs
    and Jacobi scaling; the polish starts its Newton-CG finish from them. Without a
    stage after it (no ``handoff``) the option changes nothing."""
    x, y = _binary_data(3_000, 150)
    m = LogisticRegression(150, l2=1e-3, dtype=torch.float32)
    fitter = LBFGSFitter(
        m, dtype=torch.float32, tol=1e-9, jacobi=True, handoff=True, finish_in_next_stage=True
    )
    assert fitter.first_order_tol == 1e-9
    r = run_passes(fitter, TensorBatches(x.float(), y.float()), 500)
    assert not r.converged and r.message.endswith("handed to the next stage with the L-BFGS memory")
    assert r.extra.first_order_stop.startswith("quasi-Newton decrement")
    memory = r.extra.lbfgs_memory
    assert 1 <= len(memory["pairs"]) <= 10 and memory["metric"].shape == (151,)
    options = LBFGSFitter.stage_options(F64, True, r, 1e-9, "highest")
    assert options == {"finish_first": True, "start_memory": memory}
    polish = LBFGSFitter(LogisticRegression(150, l2=1e-3, dtype=F64), dtype=F64, tol=1e-9, **options)
    assert len(polish.pairs) == len(memory["pairs"]) and polish.pairs[0][0].dtype == F64
    assert polish.pass_diagonal() is False
    # Alone, the option is inert: the fit finishes and certifies itself.
    m = LogisticRegression(150, l2=1e-3, dtype=F64)
    r = _fit(m, x, y, solver="lbfgs", tol=1e-9, finish_in_next_stage=True)
    assert r.converged and r.extra.lbfgs_memory is None and r.extra.finish_steps is not None


def test_lbfgs_checks_its_staging_options():
    m = LogisticRegression(3, l2=1e-3, dtype=F64)
    with pytest.raises(InputError, match="finish_in_next_stage"):
        LBFGSFitter(m, finish_in_next_stage="yes")
    with pytest.raises(InputError, match="start_memory"):
        LBFGSFitter(m, start_memory=[torch.zeros(4)])


def test_a_column_times_1e6_changes_neither_whether_nor_where_the_dense_float32_stage_stops(monkeypatch):
    """The dense one-output float32 stage runs from the Jacobi start (equivariant under a
    column's rescaling), and the polish's CG from its memory: a column times 1e6 gives
    the same stops up to float32 rounding (here the scaled fit's float32 line search
    stalls below E's rounding three steps earlier and its polish takes one Newton-CG step
    more: 17 passes + 6 products against 15 + 4). Unpenalized, so that the optimum
    follows the rescaling exactly. (Plain float64 L-BFGS took 35 passes against 15 on
    such a column, penalized.)"""
    monkeypatch.setattr(api, "AUTO_FLOAT32_LBFGS_MIN_FLOPS", 1e6)
    x, y = _binary_data(3_000, 200, seed=1)
    scaled = x.clone()
    scaled[:, 7] *= 1e6
    (r0, w0), (r1, w1) = _fits_with_column_7_scaled(
        lambda: LogisticRegression(200, l2=0.0, dtype=F64), x, scaled, y, lambda d: d, tol=1e-10
    )
    assert abs(r1.extra.loss - r0.extra.loss) <= 2e-10
    torch.testing.assert_close(w1, w0, rtol=1e-4, atol=1e-5)
    cost = [r.extra.passes + sum(r.extra.cg_iterations) for r in (r0, r1)]
    assert abs(cost[1] - cost[0]) <= 5, cost
    assert abs(r1.extra.finish_steps - r0.extra.finish_steps) <= 1


def test_the_polish_of_a_first_order_stage_begins_with_its_finish():
    x, y = _softmax_data(3_000, 10, 12)
    m = SoftmaxRegression(10, 12, l2=1e-3, dtype=F64)
    r = _fit(m, x, y, solver="lbfgs", dtype=torch.float32, tol=1e-10)
    assert r.converged and r.extra.stages == ["torch.float32", "torch.float64"]
    assert r.extra.first_order_stop == "the previous stage's first-order phase ended"
    # Its first pass summed the finish's curvature (no fresh L-BFGS step from an empty
    # memory, and no second pass to re-evaluate the point): it certified there, or
    # after one Newton-CG step.
    assert r.history[-1]["passes"] <= 2 and r.extra.finish_steps <= 1


def test_a_float32_handoff_stage_stops_its_first_order_phase_at_its_resolution():
    """At tol = 1e-14 a float32 L-BFGS phase cannot verify its steps (E rounds at
    1e-7): as a handoff stage it stops on the quasi-Newton decrement at 10 eps(float32)
    and leaves the rest to its Newton-type finish, whose stop certifies nothing (the
    float64 stage bounds its own decrement)."""
    x, y = _softmax_data(3_000, 10, 12)
    m = SoftmaxRegression(10, 12, l2=1e-3, dtype=torch.float32)
    fitter = LBFGSFitter(m, dtype=torch.float32, tol=1e-14, gtol=0.0, handoff=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_passes(fitter, TensorBatches(x.float(), y), 2000)
    assert r.extra.first_order_stop.startswith("quasi-Newton decrement")
    assert r.extra.cg_certificate is None
    # A fit that decides its own convergence bounds its Newton-CG decrement.
    m = SoftmaxRegression(10, 12, l2=1e-3, dtype=F64)
    r = _fit(m, x, y, solver="lbfgs", tol=1e-10)
    assert r.converged and r.extra.cg_certificate is not None


def test_a_staged_fit_reports_every_stage_s_hessian_vector_products(monkeypatch):
    products = []
    hvp = PassSums.hvp

    def counted(self, v):
        products.append(self.theta.dtype)
        return hvp(self, v)

    monkeypatch.setattr(PassSums, "hvp", counted)
    x, y = _softmax_data(3_000, 10, 12)
    m = SoftmaxRegression(10, 12, l2=1e-3, dtype=F64)
    r = _fit(m, x, y, solver="lbfgs", dtype=torch.float32, tol=1e-10)
    assert {torch.float32, torch.float64} <= set(products)
    assert sum(r.extra.cg_iterations) == len(products)


def _sparse_softmax_data(n, d, per_row, K, seed=0):
    """A bag of words (``per_row`` distinct terms per row, counts 1-3) in CSR, with
    classes drawn from a softmax over it."""
    g = torch.Generator().manual_seed(seed)
    cols = torch.rand(n, d, generator=g).argsort(1)[:, :per_row].sort(1).values
    values = torch.randint(1, 4, (n * per_row,), generator=g).to(F64)
    crow = torch.arange(0, n * per_row + 1, per_row)
    x = torch.sparse_csr_tensor(crow, cols.reshape(-1), values, size=(n, d), check_invariants=True)
    W = torch.randn(K, d, generator=g, dtype=F64) * 0.3
    y = torch.multinomial(torch.softmax(x @ W.T, 1), 1, generator=g).squeeze(1)
    y[:K] = torch.arange(K)
    return x, y


def _products_by_dtype(monkeypatch):
    """Counts of the fit's passes and Hessian-vector products in each dtype."""
    counts = {}
    hvp, finish = PassSums.hvp, PassSums.finish

    def counted_hvp(self, v):
        counts[self.theta.dtype] = counts.get(self.theta.dtype, 0) + 1
        return hvp(self, v)

    def counted_finish(self, *args, **kwargs):
        counts[self.theta.dtype] = counts.get(self.theta.dtype, 0) + 1
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(PassSums, "hvp", counted_hvp)
    monkeypatch.setattr(PassSums, "finish", counted_finish)
    return counts


def _rows_of(n, per_row, d):
    """A CSR pattern of ``n`` rows with ``per_row`` stored ones each."""
    cols = torch.arange(per_row).repeat(n)
    crow = torch.arange(0, n * per_row + 1, per_row)
    return torch.sparse_csr_tensor(crow, cols, torch.ones(n * per_row, dtype=F64), size=(n, d))


@pytest.mark.usefixtures("quiet_sparse_beta")
def test_auto_works_in_float32_on_a_sparse_design_past_the_small_problems():
    """A sparse pass gathers ``K`` coefficients per stored entry whatever ``K``: ``auto``'s
    L-BFGS works in float32 on a sparse design above ``AUTO_SMALL_MAX_ENTRIES`` stored
    entries times outputs (below, a penalized fit is Newton-type), binary or softmax."""
    x = _rows_of(20_000, 100, 500)  # 2e6 stored entries
    assert x._nnz() <= AUTO_SMALL_MAX_ENTRIES < 2 * x._nnz()
    assert _auto_dtype(LogisticRegression(500, l2=0.0, dtype=F64), "lbfgs", x) is None
    assert _auto_dtype(SoftmaxRegression(500, 2, l2=0.0, dtype=F64), "lbfgs", x) == torch.float32
    wide = _rows_of(30_000, 100, 500)  # 3e6
    assert _auto_dtype(LogisticRegression(500, l2=1e-3, dtype=F64), "lbfgs", wide) == torch.float32
    # Values whose squares overflow float32 (a column times 1e20) stay in float64.
    huge = torch.sparse_csr_tensor(
        wide.crow_indices(), wide.col_indices(), wide.values() * 1e20, size=wide.shape
    )
    assert _auto_dtype(LogisticRegression(500, l2=1e-3, dtype=F64), "lbfgs", huge) is None
    # A dense design keeps its own rule (a softmax's flops).
    assert (
        _auto_dtype(LogisticRegression(500, l2=1e-3, dtype=F64), "lbfgs", _rows_of(100, 100, 500).to_dense())
        is None
    )


@pytest.mark.usefixtures("quiet_sparse_beta")
@pytest.mark.parametrize("K", [2, 10])
def test_auto_fits_a_sparse_design_by_float32_lbfgs_with_a_float64_polish(monkeypatch, K):
    """A pass over a sparse design reads each stored entry's index and value and gathers
    its column's coefficients: float32 halves the bytes of all but the index
    (bench/sparse.py, 20 classes: a pass 0.029 against 0.063 s). The float64 polish
    certifies the float32 stage's point in a few products, at the optimum of the float64
    Newton-CG fit."""
    monkeypatch.setattr(api, "AUTO_SMALL_MAX_ENTRIES", 0)  # a small problem past it
    n, d = 3_000, 300
    x, y = _sparse_softmax_data(n, d, 20, K)

    def model():
        if K == 2:
            return LogisticRegression(d, l2=1e-3, dtype=F64)
        return SoftmaxRegression(d, K, l2=1e-3, dtype=F64)

    auto, ref = model(), model()
    r_ref = _fit(ref, x, y, solver="newton-cg", tol=1e-12)
    counts = _products_by_dtype(monkeypatch)
    r = _fit(auto, x, y)
    assert r.solver == "lbfgs" and r.extra.stages == ["torch.float32", "torch.float64"]
    assert r.converged and r_ref.converged
    assert abs(r.extra.loss - r_ref.extra.loss) <= 1e-12 * r_ref.extra.loss
    assert r.extra.cg_certificate["bound"].startswith("L2 penalty")
    # Most of the fit's products run in float32; the polish's float64 ones are few.
    assert counts[torch.float64] <= counts[torch.float32] / 4, counts


@pytest.mark.usefixtures("quiet_sparse_beta")
def test_a_column_times_1e6_changes_neither_whether_nor_where_the_float32_stage_stops(monkeypatch):
    """The float32 stage runs from the Jacobi start, equivariant under a column's
    rescaling, and so is its test of a pair's curvature (``s^T y > eps y^T D^-1 y``; with
    ``eps y^T y`` the scaled column's gradient skipped every float32 pair, and the stage
    ran 1,000 iterations in 2,951 passes where it takes 31). Unpenalized, so that the
    optimum follows the rescaling exactly."""
    monkeypatch.setattr(api, "AUTO_SMALL_MAX_ENTRIES", 0)
    x, y = _sparse_softmax_data(4_000, 60, 10, 3)
    dense = x.to_dense()
    scaled = dense.clone()
    scaled[:, 7] *= 1e6
    (r0, w0), (r1, w1) = _fits_with_column_7_scaled(
        lambda: SoftmaxRegression(60, 3, l2=0.0, dtype=F64), dense, scaled, y, lambda d: d.to_sparse_csr()
    )
    # Both certified to E - E* <= 1e-12 max(1, |E|): the same E, coefficients to ~1e-6.
    assert abs(r1.extra.loss - r0.extra.loss) <= 2e-12
    torch.testing.assert_close(w1, w0, rtol=1e-5, atol=1e-6)
    assert abs(r1.n_iter - r0.n_iter) <= 2, (r0.n_iter, r1.n_iter)
    assert abs(r1.extra.passes - r0.extra.passes) <= 3, (r0.extra.passes, r1.extra.passes)


def _uniform_bag_of_words(n, d, per_row, K, seed=0):
    """``per_row`` distinct terms of value 1 in every row: row sums are constant, so the
    intercept is nearly collinear with the terms and the polish's residual bound is loose."""
    g = torch.Generator().manual_seed(seed)
    cols = torch.rand(n, d, generator=g, dtype=torch.float32).argsort(1)[:, :per_row].sort(1).values
    crow = torch.arange(0, n * per_row + 1, per_row)
    values = torch.ones(n * per_row, dtype=F64)
    x = torch.sparse_csr_tensor(crow, cols.reshape(-1), values, size=(n, d))
    W = torch.randn(d, K, generator=g, dtype=F64) * 0.3
    y = torch.multinomial(torch.softmax(x @ W, 1), 1, generator=g).squeeze(1)
    return x, y


@pytest.mark.usefixtures("quiet_sparse_beta")
def test_the_polish_steps_once_where_its_first_bound_has_no_room():
    """The float32 stage hands the polish a point whose step decrement (2.4e-13) is within
    tol = 1e-12 but whose residual bound (9.8e-13) is not after its tightening solves: the
    polish takes one step (``StepFitter._step_before_refusing``) and certifies there,
    where it used to end ``converged=False``. The certificate's own test is unchanged."""
    x, y = _uniform_bag_of_words(8_000, 400, 70, 5)
    assert x._nnz() * 5 > AUTO_SMALL_MAX_ENTRIES
    m = SoftmaxRegression(400, 5, l2=1e-3, dtype=F64)
    r = _fit(m, x, y, tol=1e-12)
    assert r.converged, r.message
    assert r.extra.stages == ["torch.float32", "torch.float64"]
    cert = r.extra.cg_certificate
    assert cert["decrement_bound"] <= 1e-12 * max(1.0, abs(r.extra.loss))
