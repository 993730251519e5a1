"""``GeneralizedLinearModel.objective_gradient``: the objective and its gradient in
closed form (the SGD steps of the Lightning task take it instead of autograd), held
against autograd on ``objective`` for every family and link of the registries."""

import pytest
import torch

from torchglm import GeneralizedLinearModel, LogisticRegression
from torchglm.data.simulate import simulate_glm
from torchglm.families import FAMILIES

PAIRS = [(f, link) for f, cls in FAMILIES.items() for link in cls.allowed_links]


def _data(family, link, n=200, d=4, seed=0):
    """``(model, x, y, weight, offset)`` in float64: the model at the simulated
    coefficients perturbed (inside the link's domain), random weights and a small offset."""
    g = torch.Generator().manual_seed(seed)
    if FAMILIES[family].multi_output:
        x = torch.randn(n, d, generator=g)
        y = torch.randint(0, 3, (n,), generator=g)
        model = GeneralizedLinearModel(d, family, link, n_classes=3, l2=0.1, dtype=torch.float64)
        with torch.no_grad():
            model.linear.weight.copy_(0.3 * torch.randn(3, d, generator=g))
            model.linear.bias.copy_(0.3 * torch.randn(3, generator=g))
        offset = 0.1 * torch.randn(n, generator=g)
    else:
        sim = simulate_glm(family, link, n_samples=n, n_features=d, seed=seed)
        x, y = torch.as_tensor(sim.x), torch.as_tensor(sim.y)
        model = GeneralizedLinearModel(d, family, link, l2=0.1, dtype=torch.float64)
        with torch.no_grad():
            model.linear.weight.copy_(torch.as_tensor(sim.coef) * 0.9)
            model.linear.bias.fill_(sim.intercept)
        # a shift within the family's eta interval keeps every mean in its domain
        lo, hi = model.family.eta_interval
        offset = 0.02 * (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)
    weight = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    return model, x, y, weight, offset


def _autograd(model, *args):
    model.zero_grad(set_to_none=True)
    loss = model.objective(*args)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("family, link", PAIRS)
def test_closed_form_gradient_equals_autograd(family, link, weighted):
    model, x, y, weight, offset = _data(family, link)
    y = model.check_data(x, y)[1]
    args = (x, y, weight if weighted else None, offset)
    ref_loss, ref_grads = _autograd(model, *args)
    loss, pairs = model.objective_gradient(*args)
    assert [p for p, _ in pairs] == list(model.parameters())
    assert not loss.requires_grad and not any(g.requires_grad for _, g in pairs)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=0)
    for (p, g), ref in zip(pairs, ref_grads):
        assert g.shape == p.shape and g.dtype == p.dtype
        torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("l2", [0.0, 0.5])
def test_without_intercept_and_penalty(l2):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(50, 3, generator=g), torch.randint(0, 2, (50,), generator=g)
    model = LogisticRegression(3, l2=l2, fit_intercept=False, dtype=torch.float64)
    with torch.no_grad():
        model.linear.weight.copy_(torch.randn(1, 3, generator=g))
    ref_loss, (ref_w,) = _autograd(model, x, y)
    loss, [(p, grad_w)] = model.objective_gradient(x, y)
    assert p is model.linear.weight
    torch.testing.assert_close(loss, ref_loss, rtol=1e-13, atol=0)
    torch.testing.assert_close(grad_w, ref_w, rtol=1e-12, atol=1e-15)


class _OwnObjective(LogisticRegression):
    def objective(self, x, y, weight=None, offset=None):
        return super().objective(x, y, weight, offset) + self.linear.weight.abs().sum()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support")
def test_declined_where_the_objective_is_not_the_glms():
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    assert LogisticRegression(3).objective_gradient(x, y) is not None
    # a subclass's own objective, a forward hook, sparse features: autograd's to take
    assert _OwnObjective(3).objective_gradient(x, y) is None
    hooked = LogisticRegression(3)
    hooked.register_forward_hook(lambda module, args, eta: eta + 1)
    assert hooked.objective_gradient(x, y) is None
    assert LogisticRegression(3).objective_gradient(x.to_sparse_csr(), y) is None


def test_a_float64_weight_and_offset_beside_a_float32_model():
    """The gradient of a float32 model is float32 with float64 weights and offset (a
    matrix product does not promote: they raised a raw dtype error), equal to autograd's
    on the same inputs in the model's dtype."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(100, 3, generator=g, dtype=torch.float32)
    y = (torch.rand(100, generator=g) < 0.5).long()
    weight = torch.rand(100, generator=g, dtype=torch.float64) + 0.5
    offset = 0.1 * torch.randn(100, generator=g, dtype=torch.float64)
    model = LogisticRegression(3, l2=0.1, dtype=torch.float32)
    loss, pairs = model.objective_gradient(x, y, weight, offset)
    _, ref = _autograd(model, x, y, weight.float(), offset.float())
    for (p, grad), r in zip(pairs, ref):
        assert grad.dtype == p.dtype == torch.float32
        torch.testing.assert_close(grad, r, rtol=1e-5, atol=1e-6)
