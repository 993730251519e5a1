"""L-BFGS in float32 with a float64 polish: ``auto`` on a dense softmax with many
classes, the stages' own rules (the first-order phase stops at the stage's resolution,
the polish begins with its Newton-type finish) and what the fit reports."""

import warnings

import torch

from torchglm.models import SoftmaxRegression
from torchglm.solvers import fit
from torchglm.solvers.gradient import LBFGSFitter
from torchglm.solvers.api import AUTO_FLOAT32_LBFGS_MIN_FLOPS, choose_solver
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
        return fit(model, x, y, **options)


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


def test_auto_keeps_float64_lbfgs_below_the_flops_threshold_and_for_one_output():
    x, y = _softmax_data(2_000, 20, 30)  # 4 n d~ K = 5e6: a float64 fit
    m = SoftmaxRegression(20, 30, l2=1e-4, dtype=F64)
    r = _fit(m, x, y, tol=1e-10)
    assert r.solver in ("lbfgs", "newton-cg") and r.extra.stages is None


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
