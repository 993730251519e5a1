"""``hessian_precision``: a float32 stage's Hessian products in TF32 (CUDA) or bfloat16,
with the float64 polish deciding convergence on its own exact Hessian."""

import pytest
import torch
from autograd_ref import assert_verified_optimum, copy_to_float64, flat_objective
from torch.func import hessian

from torchglm import InputError, LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm.solvers import NewtonFitter, fit
from torchglm.solvers.layout import flat_parameters
from torchglm.solvers.pass_sums import PassSums

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _data(kind, n=3000, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    # columns on different scales (and one with an offset): a Hessian far from I
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.logspace(-1, 1, d, dtype=torch.float64)
    x[:, 0] += 3.0
    if kind == "softmax":
        w = (
            torch.randn(d, 3, generator=g, dtype=torch.float64)
            / torch.logspace(-1, 1, d, dtype=torch.float64)[:, None]
        )
        y = torch.distributions.Categorical(logits=(x - x.mean(0)) @ w / 2).sample()
        return x, y, lambda: SoftmaxRegression(d, n_classes=3, l2=1e-3, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64) / torch.logspace(-1, 1, d, dtype=torch.float64)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid((x - x.mean(0)) @ w / 2)).double()
    cls = ProbitRegression if kind == "probit" else LogisticRegression
    return x, y, lambda: cls(d, l2=1e-3, dtype=torch.float64)


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
@pytest.mark.parametrize(
    ("kind", "solver"), [("logistic", "newton"), ("softmax", "newton"), ("probit", "irls")]
)
def test_a_reduced_precision_stage_ends_at_the_verified_float64_optimum(monkeypatch, kind, solver, precision):
    fixed = []  # per stage: whether the fitter was given a fixed Hessian
    init = NewtonFitter.__init__

    def spy(self, model, fixed_hessian=None, **options):
        fixed.append(fixed_hessian is not None)
        init(self, model, fixed_hessian=fixed_hessian, **options)

    monkeypatch.setattr(NewtonFitter, "__init__", spy)
    x, y, make = _data(kind)
    exact, low = make(), make()
    r_exact = fit(exact, x, y, solver=solver, dtype=torch.float32)
    r_low = fit(low, x, y, solver=solver, dtype=torch.float32, hessian_precision=precision)
    assert r_low.converged and r_low.extra["stages"] == ["torch.float32", "torch.float64"]
    assert_verified_optimum(low, x, y, r_low)
    assert r_exact.converged
    # The same optimum as the exact-Hessian fit, to what both certify: in the Hessian's
    # norm (the objective is nearly flat along the offset column and the intercept).
    f = flat_objective(copy_to_float64(low), x, y)
    theta = low.flat_parameters().to(torch.float64)
    H = hessian(f)(theta)
    delta = theta - exact.flat_parameters().to(torch.float64)
    assert float(delta @ H @ delta) / 2 <= 1e-11 * max(1.0, abs(float(f(theta))))
    # The polish sums its own float64 Hessians: it reuses the stage's only when the
    # stage's products were exact.
    assert fixed == [False, True, False, False]


def test_bf16_products_are_accurate_to_bf16_and_tf32_is_float32_on_a_cpu():
    x, y, make = _data("softmax", n=4000)
    model = make().to(torch.float32)
    with torch.no_grad():
        model.set_flat_parameters(0.1 * torch.randn(model.flat_parameters().numel(), dtype=torch.float64))
    theta = flat_parameters(model, torch.float32)
    xs = x.float()

    def hess(precision):
        s = PassSums(model, theta, "full", hessian_precision=precision)
        from torchglm.data.batches import Batch

        s.add(Batch(xs, y))
        return s.finish().hess

    full, bf16, tf32 = hess("highest"), hess("bf16"), hess("tf32")
    rel = float((bf16 - full).abs().max() / full.abs().max())
    assert 1e-6 < rel < 2e-2  # bfloat16 operands were used, and were good to their 8 bits
    assert torch.equal(tf32, full)  # no TF32 units on a CPU: the float32 products


def test_a_reduced_precision_hessian_is_refused_where_nothing_verifies_it():
    x, y, make = _data("logistic", n=500)
    with pytest.raises(InputError, match="hessian_precision: expected 'highest' for a fit that decides"):
        NewtonFitter(make(), hessian_precision="bf16")
    with pytest.raises(InputError, match="hessian_precision: expected 'highest' for a fit in one stage"):
        fit(make(), x, y, solver="newton", dtype=torch.float64, hessian_precision="tf32")
    with pytest.raises(InputError, match="hessian_precision: expected one of"):
        fit(make(), x, y, solver="newton", dtype=torch.float32, hessian_precision="fp8")
    # auto on a small problem works in float64 in one stage: the option has nothing to do
    model = make()
    r = fit(model, x, y, hessian_precision="bf16")
    assert r.converged and "stages" not in r.extra
