"""Newton in float32 with its float64 polish: what the float32 (``handoff``) stage
leaves to the polish, and that the fit still certifies the float64 optimum."""

import torch

from torchglm.data.batches import TensorBatches
from torchglm.models import ProbitRegression
from torchglm.passes import run_passes
from torchglm.solvers import fit
from torchglm.solvers.layout import flat_parameters
from torchglm.solvers.newton import NewtonFitter


def _probit_data(n=20_000, d=10, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    eta = x @ (torch.randn(d, generator=g, dtype=torch.float64) / d**0.5) + 0.3
    y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.special.ndtr(eta)).long()
    return x, y


def _pass_curvatures(fitter):
    """Record what each pass of ``fitter`` summed (``None``: ``E`` and ``g`` only)."""
    kinds, end_pass = [], fitter.end_pass

    def recorded():
        kinds.append(fitter.sums.curvature)
        return end_pass()

    fitter.end_pass = recorded
    return kinds


def test_a_float32_newton_stage_hands_its_full_step_to_the_polish_without_a_light_pass():
    """Where Newton's quadratic rate predicts convergence, a handoff stage ends after
    its Hessian pass with the model at the full step: the float64 polish evaluates
    that point with the same Hessian (the stage's own float32 light pass there was a
    pass spent twice), and its decrement decides."""
    x, y = _probit_data()
    model = ProbitRegression(10, l2=1e-4)
    fitter = NewtonFitter(model, dtype=torch.float32, handoff=True, tol=1e-6, polish_tol=1e-8)
    kinds = _pass_curvatures(fitter)
    stage = run_passes(fitter, TensorBatches(x.float(), y, None, None, None), 100)
    assert kinds[-1] == "full"  # no light pass (curvature None) after the last Hessian
    assert not stage.converged and "handed to the next stage" in stage.message
    moved = fitter.base_theta + fitter.delta  # the full Newton step from the last point
    assert torch.equal(flat_parameters(model, torch.float32), moved)
    assert torch.equal(stage.extra.hessian, fitter.base.hess)


def test_a_float32_newton_stage_keeps_its_light_pass_where_the_polish_would_step():
    """Where the quadratic rate predicts only the stage's own tolerance, not the
    polish's (or no polish tolerance is given), the stage verifies its step itself."""
    x, y = _probit_data()
    for polish_tol in (1e-30, None):
        fitter = NewtonFitter(
            ProbitRegression(10, l2=1e-4), dtype=torch.float32, handoff=True, tol=1e-6, polish_tol=polish_tol
        )
        kinds = _pass_curvatures(fitter)
        stage = run_passes(fitter, TensorBatches(x.float(), y, None, None, None), 100)
        assert kinds[-1] is None and kinds[-2] == "full" and stage.converged


def test_the_polish_certifies_the_handed_point_at_the_float64_optimum():
    """The whole fit (float32 stage, float64 polish with the stage's Hessian) ends
    certified by the polish's own decrement, at the float64 Newton optimum."""
    x, y = _probit_data()
    ref = ProbitRegression(10, l2=1e-4)
    r_ref = fit(ref, x, y, solver="newton", tol=1e-16)
    for tol in (1e-8, 1e-12):
        r = fit(ProbitRegression(10, l2=1e-4), x, y, solver="newton", dtype=torch.float32, tol=tol)
        assert r.converged and r.extra.stages == ["torch.float32", "torch.float64"]
        assert r.message.startswith("Newton decrement")
        assert r.extra.loss - r_ref.extra.loss <= tol * r_ref.extra.loss
