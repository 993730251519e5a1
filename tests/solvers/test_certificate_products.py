"""The Hessian-vector products a Newton-CG certificate takes (torchglm/solvers/certify.py,
``ResidualBound``): for one output the bias correction of the penalty's bound reads the
Hessian's bias column the ``"hvp"`` pass summed (``PassSums.bias_product``), not the data."""

import pytest
import torch
from torch.func import hessian

from autograd_ref import flat_objective
from torchglm.data import TensorBatches
from torchglm.models import GeneralizedLinearModel, LogisticRegression
from torchglm.solvers import certify
from torchglm.solvers.layout import flat_parameters
from torchglm.solvers.linalg import jacobi_preconditioner
from torchglm.solvers.pass_sums import PassSums

F64 = torch.float64


def _data(family, n=600, d=7, seed=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    eta = x @ (torch.randn(d, generator=g, dtype=F64) / d**0.5) + 0.2
    if family == "poisson":
        return x, torch.poisson(eta.exp(), generator=g)
    return x, (torch.rand(n, generator=g, dtype=F64) < torch.sigmoid(eta)).to(F64)


def _model(family, link, d, l2):
    return GeneralizedLinearModel(d, family, link, l2=l2, dtype=F64)


def _hvp_sums(model, x, y, theta, weight=None):
    s = PassSums(model, theta, "hvp")
    for batch in TensorBatches(x, y, weight, batch_size=97):  # several batches: the sums add up
        s.add(batch)
    return s.finish()


@pytest.mark.parametrize(
    "family, link", [("bernoulli", "logit"), ("bernoulli", "probit"), ("poisson", "log")]
)
@pytest.mark.parametrize("weighted", [False, True])
def test_the_bias_product_is_the_hessian_times_a_bias_vector(family, link, weighted):
    """``bias_product(c)`` equals ``H [0; c]`` from autograd's Hessian of the objective."""
    x, y = _data(family)
    model = _model(family, link, x.shape[1], 1e-3)
    g = torch.Generator().manual_seed(1)
    theta = 0.1 * torch.randn(x.shape[1] + 1, generator=g, dtype=F64)
    weight = torch.rand(x.shape[0], generator=g, dtype=F64) + 0.5 if weighted else None
    s = _hvp_sums(model, x, y, theta, weight)
    H = hessian(flat_objective(model, x, y, weight))(theta)
    c = torch.tensor([0.7], dtype=F64)
    e = torch.zeros_like(theta)
    e[-1] = c
    torch.testing.assert_close(s.bias_product(c), H @ e, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(s.bias_product(c), s.hvp(e), rtol=1e-10, atol=1e-14)


def test_the_penalty_bound_of_one_output_takes_one_product():
    """The certificate of a step takes one Hessian-vector product (``H x``) for a binary
    model with an intercept; its bias correction reads the pass's bias column, with the
    same bound as the product it replaced."""
    x, y = _data("bernoulli")
    model = LogisticRegression(x.shape[1], l2=1e-3)
    theta = flat_parameters(model, F64) + 0.05
    s = _hvp_sums(model, x, y, theta)
    calls = []
    hvp = s.hvp
    s.hvp = lambda v: calls.append(1) or hvp(v)
    bound = certify.ResidualBound(s, None, model.l2, jacobi_preconditioner(s.diag))
    step = -s.grad / s.diag  # a rough step: a residual left to bound
    cert = bound.certificate(step)
    assert len(calls) == 1 and cert.products == 1
    # The same bound as with the correction's product H [0; d_b] (the old way).
    r = hvp(step) + s.grad
    d_b = -r[-1] / s.bias_block()[0, 0]
    e = torch.zeros_like(step)
    e[-1] = d_b
    r2 = r + hvp(e)
    assert abs(float(r2[-1])) <= 1e-12 * float(r.abs().max())
    assert cert.residual == pytest.approx(float(r2[:-1] @ r2[:-1]) / model.l2, rel=1e-10)
