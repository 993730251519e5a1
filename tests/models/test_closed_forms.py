"""Links, families and the single-layer models against the closed forms of the lecture notes on
probabilistic classification."""

import math

import pytest
import torch
from torch.autograd.functional import jacobian

import torchglm
from torchglm import InputError, LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm.links import LINKS, get_link

from data_util import random_labels


_ETA = {  # a grid inside each link's domain
    "identity": torch.linspace(-3, 3, 13),
    "logit": torch.linspace(-6, 6, 13),
    "probit": torch.linspace(-4, 4, 13),
    "cloglog": torch.linspace(-4, 2, 13),
    "log": torch.linspace(-3, 3, 13),
    "inverse": torch.linspace(0.2, 3, 13),
    "negative_reciprocal": torch.linspace(-3, -0.2, 13),
    "sqrt": torch.linspace(0.2, 3, 13),
    "cauchit": torch.linspace(-20, 20, 13),
}
SCALAR_LINKS = [n for n in LINKS if not LINKS[n].multi_output]


@pytest.mark.parametrize("name", SCALAR_LINKS)
def test_link_inverse_roundtrip_and_derivative(name):
    link = get_link(name)
    eta = _ETA[name].double().requires_grad_(True)
    mu = link.inverse(eta)
    assert torch.allclose(link.link(mu.detach()), eta.detach(), atol=1e-8)
    (grad,) = torch.autograd.grad(mu.sum(), eta)
    assert torch.allclose(link.inverse_derivative(eta.detach()), grad, atol=1e-10)
    assert bool(link.valid_eta(eta.detach()).all())


@pytest.mark.parametrize("name", ["logit", "probit", "cloglog"])
def test_log_inverse_matches_naive_where_safe(name):
    link = get_link(name)
    eta = _ETA[name].double()
    mu = link.inverse(eta)
    assert torch.allclose(link.log_inverse(eta), torch.log(mu), atol=1e-10)
    assert torch.allclose(link.log1m_inverse(eta), torch.log1p(-mu), atol=1e-10)


def test_softmax_jacobian():
    link = get_link("softmax")
    eta = torch.randn(4, generator=torch.Generator().manual_seed(0))
    J = jacobian(link.inverse, eta)
    assert torch.allclose(link.inverse_derivative(eta), J, atol=1e-12)


def test_invalid_link_for_family_lists_valid_ones():
    with pytest.raises(InputError, match=r"link for family 'bernoulli'.*logit.*probit"):
        torchglm.get_family("bernoulli", "inverse")
    with pytest.raises(InputError, match="family: expected one of"):
        torchglm.get_family("nope")


def _data(k=2):
    return random_labels(50, 3, k=k)


def _randomize(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    model.mark_fitted()  # hand-set parameters: predict_proba refuses unfitted models
    return model


def test_logistic_gradient_is_the_closed_form():
    # dE/dw = sum_i (y_i - t_i) x_i on the summed NLL (the lecture notes on probabilistic
    # classification, §7; Bishop PRML eq. 4.91).
    x, t = _data()
    m = _randomize(LogisticRegression(3))
    loss = m.loss(x, t) * x.shape[0]
    loss.backward()
    y = torch.sigmoid(x @ m.linear.weight.detach().T + m.linear.bias.detach()).squeeze(-1)
    assert torch.allclose(m.linear.weight.grad.squeeze(0), ((y - t) @ x), atol=1e-10)
    assert torch.allclose(m.linear.bias.grad.squeeze(0), (y - t).sum(), atol=1e-10)


def test_softmax_gradient_is_the_closed_form():
    # dE/dw_j = sum_i (y_ij - t_ij) x_i (the lecture notes, §10; Bishop PRML eq. 4.109).
    x, t = _data(k=4)
    m = _randomize(SoftmaxRegression(3, 4))
    (m.loss(x, t) * x.shape[0]).backward()
    Y = torch.softmax(m(x).detach(), dim=1)
    T = torch.nn.functional.one_hot(t, 4).to(Y.dtype)
    assert torch.allclose(m.linear.weight.grad, (Y - T).T @ x, atol=1e-10)
    assert torch.allclose(m.linear.bias.grad, (Y - T).sum(0), atol=1e-10)


def test_l2_penalizes_weights_not_bias():
    x, t = _data()
    m = _randomize(LogisticRegression(3, l2=0.7))
    m0 = _randomize(LogisticRegression(3, l2=0.0))
    w = m.linear.weight.detach()
    assert torch.allclose(m.loss(x, t) - m0.loss(x, t), 0.35 * (w * w).sum())


def test_probit_probabilities_are_phi():
    x, _ = _data()
    m = _randomize(ProbitRegression(3))
    eta = m(x).detach()
    phi = 0.5 * (1 + torch.erf(eta / math.sqrt(2)))
    assert torch.allclose(m.predict_proba(x), phi, atol=1e-12)


def test_softmax_rows_sum_to_one_and_two_class_equals_logistic():
    x, t = _data(k=2)
    s = _randomize(SoftmaxRegression(3, 2))
    p = s.predict_proba(x)
    assert torch.allclose(p.sum(1), torch.ones(len(x)))
    lr = LogisticRegression(3)
    with torch.no_grad():
        lr.linear.weight.copy_(s.linear.weight[1:] - s.linear.weight[:1])
        lr.linear.bias.copy_(s.linear.bias[1:] - s.linear.bias[:1])
    lr.mark_fitted()
    assert torch.allclose(lr.predict_proba(x), p[:, 1], atol=1e-12)
    assert torch.allclose(lr.loss(x, t), s.loss(x, t), atol=1e-12)
    assert torch.equal(lr.predict(x), s.predict(x))


@pytest.mark.parametrize("cls", [LogisticRegression, ProbitRegression])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_logits_give_finite_loss_and_gradient(cls, dtype):
    m = cls(1, dtype=dtype)
    with torch.no_grad():
        m.linear.weight.fill_(1e4)
    x = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]], dtype=dtype)
    t = torch.tensor([0, 1, 1, 0])  # two samples on the wrong side: |eta| = 1e4
    loss = m.loss(x, t)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_huge_logits_softmax_finite():
    m = SoftmaxRegression(1, 3)
    with torch.no_grad():
        m.linear.weight.copy_(torch.tensor([[1e4], [0.0], [-1e4]]))
    loss = m.loss(torch.tensor([[1.0], [-1.0]]), torch.tensor([2, 0]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(m.linear.weight.grad).all()


@pytest.mark.parametrize(
    "x,y,match",
    [
        (torch.tensor([[float("nan"), 1.0]]), torch.tensor([1]), "X: expected finite"),
        (torch.tensor([[float("inf"), 1.0]]), torch.tensor([1]), "X: expected finite"),
        (torch.zeros(3, 2), torch.tensor([0, 1]), "X/y: expected the same number of samples"),
        (torch.zeros(2, 3), torch.tensor([0, 1]), "X: expected 2 feature columns"),
        (torch.zeros(2, 2), torch.tensor([0, 2]), r"y: expected labels in \{0, ..., 1\}"),
        (torch.zeros(2), torch.tensor([0, 1]), "X: expected a 2-D tensor"),
    ],
)
def test_bad_input_messages(x, y, match):
    with pytest.raises(InputError, match=match):
        LogisticRegression(2).loss(x, y)


def test_state_dict_roundtrip_and_device_agnostic_buffers():
    m = _randomize(SoftmaxRegression(3, 4, l2=0.1))
    m2 = SoftmaxRegression(3, 4, l2=0.1)
    m2.load_state_dict(m.state_dict())
    x, _ = _data()
    assert torch.equal(m(x), m2(x))


def test_unit_deviance_is_zero_not_nan_at_a_perfect_fit():
    b = torchglm.get_family("bernoulli")
    d = b.unit_deviance(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]))
    assert torch.equal(d, torch.zeros(2))
    p = torchglm.get_family("poisson")
    assert torch.equal(p.unit_deviance(torch.tensor([0.0]), torch.tensor([0.0])), torch.zeros(1))
