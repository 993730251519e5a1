"""Newton's early steps from a row subsample's Hessian (:mod:`torchglm.solvers.sketch`):
cheaper passes far from the optimum, and never a certificate."""

import pytest
import torch
from autograd_ref import assert_verified_optimum

from torchglm import LogisticRegression
from torchglm.models import GeneralizedLinearModel
from torchglm.data import TensorBatches
from torchglm.solvers import fit, sketch
from torchglm.solvers.pass_sums import PassSums, hessian_and_gradient

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _data(kind, n=20_000, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.logspace(-1, 1, d, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64) / torch.logspace(-1, 1, d, dtype=torch.float64)
    eta = x @ w / 2 + 0.3
    if kind == "poisson":
        y = torch.poisson(torch.exp(eta), generator=g)
        return x, y, lambda: GeneralizedLinearModel(d, "poisson", "log", l2=1e-3, dtype=torch.float64)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(eta)).double()
    return x, y, lambda: LogisticRegression(d, l2=1e-3, dtype=torch.float64)


@pytest.fixture
def strides(monkeypatch):
    """The Hessian row stride of every pass, in order."""
    seen = []
    init = PassSums.__init__

    def spy(self, *args, hessian_stride=1, **kwargs):
        curvature = args[2] if len(args) > 2 else kwargs.get("curvature")
        seen.append(hessian_stride if curvature in ("full", "expected") else None)
        init(self, *args, hessian_stride=hessian_stride, **kwargs)

    monkeypatch.setattr(PassSums, "__init__", spy)
    return seen


def test_the_sketched_hessian_is_the_scaled_hessian_of_every_rth_row():
    x, y, make = _data("logistic", n=3001)
    theta = torch.tensor([0.2, -0.1, 0.05, 0.3, 0.1], dtype=torch.float64)
    s = PassSums(make(), theta, "full", hessian_stride=7)
    s.add(next(iter(TensorBatches(x, y))))
    s.finish()
    _, g, H = hessian_and_gradient(_at(make, theta), TensorBatches(x, y))
    _, _, H_rows = hessian_and_gradient(_at(make, theta), TensorBatches(x[::7], y[::7]))
    assert s.sketched
    # The loss and gradient from every row; the Hessian's mean curvature from every
    # 7th (429 of 3001 rows), the penalty's as it is.
    torch.testing.assert_close(s.grad, g, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(s.hess, H_rows, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(s.hess, H, rtol=1e-3)


def _count_derivatives(monkeypatch) -> list:
    """``(order, rows)`` of every ``eta_derivatives`` call a pass makes, as it makes them."""
    from torchglm.solvers import pass_sums

    calls = []
    real = pass_sums.eta_derivatives

    def spy(family, eta, y, order=2, expected=False, **kwargs):
        calls.append((order, eta.shape[0]))
        return real(family, eta, y, order, expected, **kwargs)

    monkeypatch.setattr(pass_sums, "eta_derivatives", spy)
    return calls


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_a_sketched_pass_differentiates_twice_only_its_sketched_rows(monkeypatch, link):
    """A sketched pass takes first derivatives on every row and second derivatives on
    the every ``r``-th rows its Hessian sums (a probit's cost an asymptotic series per
    sample): with sample weights, its Hessian is still the weighted one of those rows."""
    x, y, _ = _data("logistic", n=3001)
    weight = torch.rand(3001, generator=torch.Generator().manual_seed(2), dtype=torch.float64) + 0.5
    make = lambda: GeneralizedLinearModel(4, "bernoulli", link, l2=1e-3, dtype=torch.float64)  # noqa: E731
    theta = torch.tensor([0.2, -0.1, 0.05, 0.3, 0.1], dtype=torch.float64)
    calls = _count_derivatives(monkeypatch)
    s = PassSums(make(), theta, "full", hessian_stride=7)
    s.add(next(iter(TensorBatches(x, y, weight))))
    s.finish()
    assert sorted(calls) == [(1, 3001), (2, 429)]
    monkeypatch.undo()  # the real derivatives again
    loss, g, _ = hessian_and_gradient(_at(make, theta), TensorBatches(x, y, weight))
    _, _, H_rows = hessian_and_gradient(_at(make, theta), TensorBatches(x[::7], y[::7], weight[::7]))
    # The sketch sums s_i h_i over the kept rows times 3001 / 429, over all the weight.
    scale = (3001 / 429) * float(weight[::7].sum()) / float(weight.sum())
    pen = torch.diag(torch.tensor([1e-3] * 4 + [0.0], dtype=torch.float64))
    torch.testing.assert_close(s.loss, loss, rtol=1e-14, atol=0)
    torch.testing.assert_close(s.grad, g, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(s.hess, (H_rows - pen) * scale + pen, rtol=1e-12, atol=1e-14)


def _at(make, theta):
    m = make()
    with torch.no_grad():
        m.linear.weight.copy_(theta[:-1].view(1, -1))
        m.linear.bias.copy_(theta[-1:])
    return m


@pytest.mark.parametrize("kind", ["logistic", "poisson"])
def test_early_steps_are_sketched_and_the_certificate_is_exact(kind, strides):
    x, y, make = _data(kind)
    m = make()
    r = fit(m, x, y, solver="newton", tol=1e-12)
    assert r.converged
    assert_verified_optimum(m, x, y, r)
    # 20,000 rows, 5 parameters: every 40th row while lambda^2 > SKETCH_UNTIL, then exact.
    hessian_passes = [st for st in strides if st is not None]
    assert hessian_passes[0] == 20_000 // (sketch.SKETCH_ROWS_PER_PARAM * 5)
    assert hessian_passes[-1] == 1
    # The reported Hessian is the exact one at the optimum (or the previous point's,
    # after a light verifying pass), never a sketch.
    _, _, H = hessian_and_gradient(m, TensorBatches(x, y))
    assert torch.linalg.matrix_norm(r.extra.hessian - H) <= 1e-3 * torch.linalg.matrix_norm(H)


def test_a_sketched_decrement_never_certifies(strides):
    # tol = 0.05: the second point's decrement is already within it, but its pass summed
    # a sketch (lambda^2 > SKETCH_UNTIL at the first point): an exact pass must confirm it.
    x, y, make = _data("logistic")
    m = make()
    r = fit(m, x, y, solver="newton", tol=0.05)
    assert r.converged
    hessian_passes = [st for st in strides if st is not None]
    assert hessian_passes[0] > 1 and hessian_passes[-1] == 1


def test_the_same_optimum_with_and_without_the_sketch(monkeypatch):
    x, y, make = _data("logistic", seed=3)
    sketched, exact = make(), make()
    r1 = fit(sketched, x, y, solver="newton", tol=1e-14)
    monkeypatch.setattr(sketch, "SKETCH_MIN_STRIDE", 10**9)
    r2 = fit(exact, x, y, solver="newton", tol=1e-14)
    assert r1.converged and r2.converged
    torch.testing.assert_close(sketched.flat_parameters(), exact.flat_parameters(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(
    ("n_samples", "n_params", "decrement", "stride"),
    [
        (None, 5, None, 1),  # rows not known yet
        (20_000, 5, None, 40),  # the first point
        (20_000, 5, 0.5, 40),
        (20_000, 5, sketch.SKETCH_UNTIL, 1),  # Newton's quadratic phase: exact
        (20_000, 5, float("nan"), 1),
        (1_999, 5, None, 1),  # a subsample of over a quarter of the rows: exact
        (2_000, 5, None, 4),
    ],
)
def test_the_stride_rule(n_samples, n_params, decrement, stride):
    rule = sketch.HessianSketch(True)
    rule.n_samples = n_samples
    assert rule.stride(n_params, decrement) == stride
    assert sketch.HessianSketch(False).stride(n_params, decrement) == 1
    rule.exact_next = True
    assert rule.stride(n_params, decrement) == 1


def test_no_sketch_where_separation_is_watched(strides):
    x, y, _ = _data("logistic")
    m = LogisticRegression(4, dtype=torch.float64)  # l2 = 0: the separation watch is on
    fit(m, x, y, solver="newton")
    assert all(st in (None, 1) for st in strides)


def test_a_sketched_pass_over_several_batches_differentiates_their_rows_once(monkeypatch):
    """The sketched rows of every batch (slab) take their second derivatives together,
    once per pass; each batch's rows still count ``n_b / k_b`` (its rows over its rows
    kept), their sample weights included."""
    x, y, _ = _data("logistic", n=3001)
    weight = torch.rand(3001, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    make = lambda: GeneralizedLinearModel(4, "bernoulli", "probit", l2=1e-3, dtype=torch.float64)  # noqa: E731
    theta = torch.tensor([0.2, -0.1, 0.05, 0.3, 0.1], dtype=torch.float64)
    calls = _count_derivatives(monkeypatch)
    s = PassSums(make(), theta, "full", hessian_stride=7)
    for b in TensorBatches(x, y, weight, batch_size=1000):  # 1000, 1000, 1000 and 1 rows
        s.add(b)
    s.finish()
    assert sorted(calls) == [(1, 1), (1, 1000), (1, 1000), (1, 1000), (2, 3 * 143 + 1)]
    monkeypatch.undo()  # the real derivatives again
    pen = torch.diag(torch.tensor([1e-3] * 4 + [0.0], dtype=torch.float64))
    want = torch.zeros(5, 5, dtype=torch.float64)
    for i in range(0, 3001, 1000):
        xb, yb, wb = x[i : i + 1000], y[i : i + 1000], weight[i : i + 1000]
        _, _, H_rows = hessian_and_gradient(_at(make, theta), TensorBatches(xb[::7], yb[::7], wb[::7]))
        k = xb[::7].shape[0]
        want += (H_rows - pen) * float(wb[::7].sum()) * (xb.shape[0] / k)
    torch.testing.assert_close(s.hess, want / float(weight.sum()) + pen, rtol=1e-12, atol=1e-14)
