"""The L2 penalty is written once (torchglm.penalty.L2Penalty) and the Bayesian code
leaves the user's model's l2 alone."""

import pytest
import torch

from torchglm import LogisticRegression
from torchglm.bayes import GaussianPrior, fit_map, laplace_posterior
from torchglm.data.batches import TensorBatches
from torchglm.penalty import L2Penalty
from torchglm.solvers import flat_parameters
from torchglm.solvers.layout import penalty_mask
from torchglm.solvers.pass_sums import PassSums

from data_util import bernoulli_data


def _data():
    x, y = bernoulli_data(80, 3, (1.0, -2.0, 0.5), draw="bernoulli")
    return x, y.long()


def test_penalty_value_gradient_and_curvature_are_consistent():
    pen = L2Penalty(0.3)
    w = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64, requires_grad=True)
    v = pen.value(w)
    assert float(v.detach()) == pytest.approx(0.5 * 0.3 * 5.0)
    (g,) = torch.autograd.grad(v, w)
    torch.testing.assert_close(pen.grad(w.detach()), g)
    torch.testing.assert_close(
        pen.curvature(torch.ones(3, dtype=torch.float64)), torch.full((3,), 0.3, dtype=torch.float64)
    )


def test_model_penalty_and_the_pass_agree():
    x, y = _data()
    model = LogisticRegression(3, l2=0.2, dtype=torch.float64)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[0.5, -1.0, 2.0]]))
        model.linear.bias.fill_(0.7)
    theta = flat_parameters(model)
    sums = PassSums(model, theta, curvature="full")
    sums.add(next(iter(TensorBatches(x, y.to(torch.float64)))))
    sums.finish()
    torch.testing.assert_close(
        sums.loss, model.objective(x, y.to(torch.float64)).detach(), rtol=1e-13, atol=0
    )
    mask = penalty_mask(model, torch.float64)
    zero = LogisticRegression(3, l2=0.0, dtype=torch.float64)
    zero.load_state_dict(model.state_dict())
    bare = PassSums(zero, theta, curvature="full")
    bare.add(next(iter(TensorBatches(x, y.to(torch.float64)))))
    bare.finish()
    torch.testing.assert_close(sums.loss - bare.loss, model.penalty().detach(), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(sums.grad - bare.grad, 0.2 * mask * theta, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(sums.hess - bare.hess, torch.diag(0.2 * mask), rtol=1e-12, atol=1e-15)


def test_laplace_posterior_leaves_the_models_l2_alone():
    x, y = _data()
    model = LogisticRegression(3, l2=0.05, dtype=torch.float64)
    post = laplace_posterior(model, (x, y), GaussianPrior(0.5))
    assert model.l2 == 0.05
    # the MAP it fitted is fit_map's (which does set l2, as documented)
    other = LogisticRegression(3, dtype=torch.float64)
    fit_map(other, (x, y), GaussianPrior(0.5))
    assert other.l2 == pytest.approx(1 / (0.5 * 80))
    torch.testing.assert_close(post.mean, flat_parameters(other), rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(flat_parameters(model), flat_parameters(other), rtol=1e-8, atol=1e-10)
    # the same posterior as from a model that holds the prior's penalty
    again = laplace_posterior(other, (x, y), GaussianPrior(0.5), fit=False)
    torch.testing.assert_close(post.precision, again.precision, rtol=1e-10, atol=1e-12)
    assert post.log_evidence == pytest.approx(again.log_evidence, rel=1e-10)


def test_laplace_posterior_leaves_the_global_rng_alone():
    x, y = _data()
    model = LogisticRegression(3, dtype=torch.float64)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    laplace_posterior(model, (x, y), GaussianPrior(0.5))
    torch.testing.assert_close(torch.rand(3), expected)
