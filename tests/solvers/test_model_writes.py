"""When a fit writes its accepted point into the model: ``fit`` once, when its passes end
(however they end); a fitter driven pass by pass (a Trainer's) at every accepted step."""

import pytest
import torch

from torchglm.data import TensorBatches
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import fit, layout, make_fitter
from torchglm.solvers.stepper import StepFitter

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _data(n=400, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = (x[:, 0] - 0.5 * x[:, 1] + torch.randn(n, generator=g, dtype=torch.float64) > 0).double()
    return x, y, GeneralizedLinearModel(d, "bernoulli", "logit", l2=1e-2, dtype=torch.float64)


@pytest.fixture
def writes(monkeypatch):
    """Every point written into a model by the solvers (``layout.set_flat_parameters``)."""
    points = []
    real = layout.set_flat_parameters

    def spy(model, theta):
        points.append(theta.detach().clone())
        real(model, theta)

    import torchglm.solvers.stepper as stepper

    monkeypatch.setattr(stepper, "set_flat_parameters", spy)
    return points


@pytest.mark.parametrize("solver", ["newton", "lbfgs", "newton-cg"])
def test_fit_writes_the_model_once_at_the_end(solver, writes):
    x, y, model = _data()
    result = fit(model, x, y, solver=solver)
    assert result.converged and result.n_iter > 2
    assert len(writes) == 1
    torch.testing.assert_close(model.flat_parameters(), writes[0], rtol=0, atol=0)


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("solver", ["newton", "lbfgs"])
def test_an_interrupted_fit_leaves_the_model_at_its_last_accepted_point(solver, monkeypatch):
    """An exception in the middle of a pass (an interrupt, a failing batch): the model holds
    the last accepted point, as a fit that wrote every step left it."""
    x, y, model = _data()
    seen = {}
    real = StepFitter._accept

    def accept(self, s, step):
        real(self, s, step)
        seen["theta"] = self.base_theta.clone()
        if self.result.n_iter == 2:
            raise _Interrupt

    monkeypatch.setattr(StepFitter, "_accept", accept)
    with pytest.raises(_Interrupt):
        fit(model, x, y, solver=solver)
    torch.testing.assert_close(model.flat_parameters(), seen["theta"], rtol=0, atol=0)
    assert not torch.equal(seen["theta"], torch.zeros_like(seen["theta"]))


def test_a_fitter_driven_pass_by_pass_writes_every_accepted_point():
    """A Trainer's driver reads the model between passes (validation, checkpoints): there
    the model holds the accepted point after every pass."""
    x, y, model = _data()
    fitter = make_fitter(model, "newton")
    batches = TensorBatches(x, y)
    steps = 0
    while not fitter.done:
        fitter.start_pass()
        for b in batches:
            fitter.accumulate(b)
        fitter.end_pass()
        if fitter.base_theta is not None and not fitter.done:
            torch.testing.assert_close(model.flat_parameters(), fitter.base_theta, rtol=0, atol=0)
            steps += 1
    assert steps > 2 and fitter.result.converged
