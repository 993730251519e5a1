"""The Hessian-vector products a Newton-CG certificate takes (torchglm/solvers/certify.py,
``ResidualBound``): for one output the bias correction of the penalty's bound reads the
Hessian's bias column the ``"hvp"`` pass summed (``PassSums.bias_product``), not the data."""

import pytest
import torch
from torch.func import hessian

from autograd_ref import flat_objective
from torchglm.data import TensorBatches
from torchglm.models import GeneralizedLinearModel, LogisticRegression
from torchglm.solvers import certify, fit, linalg
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


def test_a_one_step_cg_certificate_reuses_the_step_s_own_product():
    """CG that ends after one step from 0 has ``x = alpha p`` and hands on ``H x =
    alpha (H p)`` (``cg_solve``'s ``step_product``): the certificate takes no product of
    its own, and its bound is the one a fresh ``H x`` gives, to rounding. After two steps
    nothing is handed on (a recursive ``H x`` drifts)."""
    x, y = _data("bernoulli")
    model = LogisticRegression(x.shape[1], l2=1e-3)
    theta = flat_parameters(model, F64) + 0.05
    s = _hvp_sums(model, x, y, theta)
    pre = jacobi_preconditioner(s.diag)
    known = []
    step, n, _ = linalg.cg_solve(
        s.hvp, s.grad, s.diag, max_iter=1, precondition=pre, target=0.0, step_product=known
    )
    assert n == 1 and known == []  # stopped at max_iter, not at its target: nothing known
    step, n, _ = linalg.cg_solve(s.hvp, s.grad, s.diag, precondition=pre, target=1e30, step_product=known)
    assert n == 1 and len(known) == 1
    torch.testing.assert_close(known[0], s.hvp(step), rtol=1e-12, atol=1e-15)
    calls = []
    hvp = s.hvp
    s.hvp = lambda v: calls.append(1) or hvp(v)
    bound = certify.ResidualBound(s, None, model.l2, pre)
    reused, fresh = bound.certificate(step, known[0]), bound.certificate(step)
    assert reused.products == 0 and fresh.products == 1 and len(calls) == 1
    assert reused.bound == pytest.approx(fresh.bound, rel=1e-10)
    assert reused.model == pytest.approx(fresh.model, rel=1e-10)
    more = []
    linalg.cg_solve(hvp, s.grad, s.diag, precondition=pre, target=0.0, max_iter=50, step_product=more)
    assert more == []


def test_a_newton_cg_fit_certifies_a_one_step_solve_with_one_product(monkeypatch):
    """Started next to the optimum of a well-conditioned problem, Newton-CG's solve takes
    one CG step and its certificate reuses that step's product: one product for the
    solve and its certificate, where they took two."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2_000, 150, generator=g, dtype=F64)
    y = (torch.rand(2_000, generator=g, dtype=F64) < torch.sigmoid(x[:, 0])).to(F64)
    model = LogisticRegression(150, l2=1e-1, dtype=F64)
    assert fit(model, x, y, solver="newton", tol=1e-14).converged
    with torch.no_grad():
        model.linear.bias += 1e-5
    products = []
    hvp = PassSums.hvp
    monkeypatch.setattr(PassSums, "hvp", lambda self, v: products.append(1) or hvp(self, v))
    r = fit(model, x, y, solver="newton-cg", tol=1e-8)
    assert r.converged and r.extra.cg_certificate is not None, r.message
    assert r.extra.cg_iterations == [1] and len(products) == 1
