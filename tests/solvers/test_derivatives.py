"""The assembled gradient / Hessian against autograd over all parameters and closed forms."""

import pytest
import torch
from torch.func import grad, hessian

from autograd_ref import flat_objective
from torchglm.data.batches import TensorBatches
from torchglm.families import FAMILIES
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers.layout import flat_parameters, parameter_names, set_flat_parameters
from torchglm.solvers.pass_sums import hessian_and_gradient


def _cases():
    """Every (family, link) pair of the registries whose targets we can simulate."""
    out = []
    for name, cls in FAMILIES.items():
        for link in cls.allowed_links:
            out.append((name, link))
    return out


def _model_and_data(family, link, n=40, d=3, l2=0.3, seed=0, fit_intercept=True):
    g = torch.Generator().manual_seed(seed)
    cls = FAMILIES[family]
    K = 4 if cls.multi_output else None
    m = GeneralizedLinearModel(
        d, family, link, n_classes=K, l2=l2, fit_intercept=fit_intercept, dtype=torch.float64
    )
    x = torch.randn(n, d, generator=g)
    theta = 0.3 * torch.randn(flat_parameters(m).numel(), generator=g)
    if not cls.is_classifier:
        # Keep eta inside every link's domain (inverse: eta > 0, negative_reciprocal: eta < 0).
        x = x.abs() * 0.1
        theta = theta.abs() * 0.1 + 0.5
        if link == "negative_reciprocal":
            theta = -theta
    set_flat_parameters(m, theta)
    with torch.no_grad():
        mu = m.family.mean(m(x))
    if cls.is_classifier:
        y = torch.randint(0, K or 2, (n,), generator=g)
    else:
        y = mu * torch.rand(n, generator=g) * 2
        if family in ("poisson", "binomial"):
            y = torch.round(y)
        if family == "binomial":
            y = y.clamp(0, 1)
    y = m.family.check_target(y, m.n_classes)
    w = torch.rand(n, generator=g) + 0.5
    return m, x, y, w


@pytest.mark.parametrize("family,link", _cases())
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_matches_autograd_over_all_parameters(family, link, fit_intercept):
    m, x, y, w = _model_and_data(family, link, fit_intercept=fit_intercept)
    loss, g, H = hessian_and_gradient(m, TensorBatches(x, y, w, batch_size=7))
    obj = flat_objective(m, x, y, w)
    theta = flat_parameters(m)
    assert torch.allclose(loss, m.objective(x, y, w), rtol=1e-13, atol=0)
    assert torch.allclose(loss, obj(theta), rtol=1e-13, atol=0)
    assert torch.allclose(g, grad(obj)(theta), rtol=1e-10, atol=1e-13)
    assert torch.allclose(H, hessian(obj)(theta), rtol=1e-10, atol=1e-13)
    assert len(parameter_names(m)) == theta.numel()


def test_logistic_closed_forms():
    """grad = X~^T (y - t) / n + l2 [w, 0];  H = X~^T Y X~ / n + l2 diag([1, 0]) (the lecture notes
    on probabilistic classification, §8 and §14; Bishop PRML eqs. 4.96-4.97)."""
    m, x, t, _ = _model_and_data("bernoulli", "logit", n=60, d=4, l2=0.25)
    loss, g, H = hessian_and_gradient(m, TensorBatches(x, t, batch_size=13))
    n = x.shape[0]
    xt = torch.cat([x, torch.ones(n, 1)], 1)
    theta = flat_parameters(m)
    yhat = torch.sigmoid(xt @ theta)
    pen = torch.tensor([1.0, 1, 1, 1, 0])
    g_ref = xt.T @ (yhat - t) / n + 0.25 * pen * theta
    H_ref = xt.T @ torch.diag(yhat * (1 - yhat)) @ xt / n + 0.25 * torch.diag(pen)
    assert torch.allclose(g, g_ref, rtol=1e-12, atol=1e-15)
    assert torch.allclose(H, H_ref, rtol=1e-12, atol=1e-15)


def test_softmax_gradient_closed_form():
    """d E / d w_j = sum_i (y_ij - t_ij) x~_i / n for every class j (the lecture notes, §10)."""
    m, x, t, _ = _model_and_data("categorical", "softmax", n=30, d=3, l2=0.0)
    _, g, _ = hessian_and_gradient(m, TensorBatches(x, t))
    n, K = x.shape[0], 4
    Y = m.family.mean(m(x)).detach()
    T = torch.nn.functional.one_hot(t, K).to(x.dtype)
    G = (Y - T).T @ x / n
    assert torch.allclose(g[: K * 3], G.reshape(-1), rtol=1e-12, atol=1e-15)
    assert torch.allclose(g[K * 3 :], (Y - T).sum(0) / n, rtol=1e-12, atol=1e-15)


def test_expected_information_for_probit():
    """Fisher information X~^T diag(phi^2 / (Phi (1 - Phi))) X~ / n, not the observed Hessian."""
    m, x, t, _ = _model_and_data("bernoulli", "probit", n=50, d=2, l2=0.0)
    _, _, F = hessian_and_gradient(m, TensorBatches(x, t, batch_size=9), expected=True)
    _, _, H = hessian_and_gradient(m, TensorBatches(x, t), expected=False)
    xt = torch.cat([x, torch.ones(50, 1)], 1)
    eta = xt @ flat_parameters(m)
    Phi = torch.special.ndtr(eta)
    phi = torch.exp(-0.5 * eta**2) / (2 * torch.pi) ** 0.5
    F_ref = xt.T @ (xt * (phi**2 / (Phi * (1 - Phi))).unsqueeze(1)) / 50
    assert torch.allclose(F, F_ref, rtol=1e-12)
    assert not torch.allclose(F, H, rtol=1e-3)


def test_expected_equals_observed_for_canonical_logit():
    m, x, t, _ = _model_and_data("bernoulli", "logit")
    _, _, F = hessian_and_gradient(m, TensorBatches(x, t), expected=True)
    _, _, H = hessian_and_gradient(m, TensorBatches(x, t), expected=False)
    assert torch.allclose(F, H, rtol=1e-12)


@pytest.mark.parametrize(
    "family,link", [("bernoulli", "probit"), ("categorical", "softmax"), ("gamma", "log")]
)
@pytest.mark.parametrize("transposed_max", [0, 30, 2**18])  # none, some, every batch
def test_hessian_vector_product_without_forming_h(family, link, transposed_max, monkeypatch):
    """PassSums.hvp (newton-cg) equals torch.func.hessian(objective) @ v, with the
    stored batches' products ``x V^T`` and, for small batches, ``(V x^T)^T`` (a kept
    contiguous ``x^T``, reused by the next product)."""
    from torchglm.solvers import pass_sums
    from torchglm.solvers.pass_sums import PassSums

    monkeypatch.setattr(pass_sums, "HVP_TRANSPOSED_MAX", transposed_max)
    m, x, y, w = _model_and_data(family, link)
    theta = flat_parameters(m)
    sums = PassSums(m, theta, "hvp")
    for batch in TensorBatches(x, y, w, batch_size=9):
        sums.add(batch)
    sums.finish()
    assert sums.hess is None
    v = torch.randn(theta.numel(), generator=torch.Generator().manual_seed(1))
    H = hessian(flat_objective(m, x, y, w))(theta)
    assert torch.allclose(sums.hvp(v), H @ v, rtol=1e-10, atol=1e-13)
    # batches of 9 x 3 entries: x^T kept for none, the first only, every one
    expected = {0: 0, 30: 1, 2**18: len(sums.stored)}[transposed_max]
    assert len(sums._xt) == expected and sum(t.numel() for t in sums._xt.values()) <= transposed_max
    assert torch.allclose(sums.hvp(2 * v), 2 * H @ v, rtol=1e-10, atol=1e-13)
    assert torch.allclose(sums.diag, H.diagonal(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["scalar", "blocks", "probs"])
@pytest.mark.parametrize("weighted", [False, True])
def test_curvature_in_the_transposed_layout(kind, weighted):
    """``Curvature.apply_t`` (a small batch's Newton-CG products, in the (m, n) layout)
    is ``apply``'s transpose for each kind of per-sample curvature."""
    from torchglm.solvers.curvature import Curvature

    g = torch.Generator().manual_seed(2)
    n, k = 7, 4
    weight = torch.rand(n, generator=g, dtype=torch.float64) + 0.5 if weighted else None
    if kind == "scalar":
        d2, k = torch.rand(n, generator=g, dtype=torch.float64), 1
    elif kind == "blocks":
        a = torch.randn(n, k, k, generator=g, dtype=torch.float64)
        d2 = a @ a.transpose(1, 2)
    else:
        d2 = torch.softmax(torch.randn(n, k, generator=g, dtype=torch.float64), 1)
    curv = Curvature(d2, weight if kind == "probs" else None, probs=kind == "probs")
    u = torch.randn(n, k, generator=g, dtype=torch.float64)
    expected = curv.apply(u).T
    assert torch.allclose(curv.apply_t(u.T.contiguous()), expected, rtol=1e-13, atol=1e-15)
    assert torch.allclose(curv.apply_t(2 * u.T), 2 * expected, rtol=1e-13, atol=1e-15)  # kept means reused


@pytest.mark.parametrize("family", [f for f, c in FAMILIES.items() if not c.multi_output])
def test_canonical_link_observed_equals_expected_information(family):
    """The identity the Newton pass relies on for canonical links: torch.func's
    d2l/deta2 equals (dmu/deta)^2 / V(mu)."""
    from torchglm.solvers.eta_derivatives import eta_derivatives

    m, x, y, _ = _model_and_data(family, FAMILIES[family].canonical_link)
    eta = m(x).detach()
    _, d1a, observed = eta_derivatives(m.family, eta, y, order=2, expected=False)
    _, d1b, expected = eta_derivatives(m.family, eta, y, order=2, expected=True)
    assert torch.allclose(observed, expected, rtol=1e-12, atol=1e-14)
    assert torch.equal(d1a, d1b)


@pytest.mark.parametrize("family,link", _cases())
def test_nll_gradient_and_mean_is_one_evaluation_of_the_closed_forms(family, link):
    """The canonical softmax gives ``(nll, d1, mu)`` from one softmax (what a
    Hessian-vector pass keeps); every other family and link gives none."""
    m, x, y, _ = _model_and_data(family, link)
    with torch.no_grad():
        eta = m(x)
    got = m.family.nll_gradient_and_mean(eta, y)
    if not (m.family.multi_output and m.family.is_canonical):
        assert got is None
        return
    nll, d1 = m.family.nll_derivatives(eta, y, 1)
    torch.testing.assert_close(got[0], nll, rtol=0, atol=0)
    torch.testing.assert_close(got[1], d1, rtol=0, atol=0)
    torch.testing.assert_close(got[2], m.family.mean(eta), rtol=1e-15, atol=0)


def test_a_pass_over_many_classes_slabs_rows_by_the_width_of_eta(monkeypatch):
    """A slab holds about 2^19 entries of ``x`` and ``eta`` together: a design small
    enough for one piece by itself is cut into slabs when its ``eta`` is wide, and the
    pass's sums and products do not depend on the cut."""
    from torchglm.solvers import products
    from torchglm.solvers.pass_sums import PassSums

    x32 = torch.zeros(10_000, 100)  # 4 MB: one piece by its own width
    assert products.fused_rows(x32) is None
    assert products.fused_rows(x32, outputs=1000) == 2**19 // 1100
    g = torch.Generator().manual_seed(0)
    n, d, K = 3000, 30, 400
    m = GeneralizedLinearModel(d, "categorical", "softmax", n_classes=K, l2=1e-3, dtype=torch.float64)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, K, (n,), generator=g)
    theta = 0.1 * torch.randn(flat_parameters(m).numel(), generator=g, dtype=torch.float64)
    v = torch.randn(theta.numel(), generator=g, dtype=torch.float64)
    assert products.fused_rows(x, outputs=K) is not None

    def run():
        sums = PassSums(m, theta, "hvp")
        for batch in TensorBatches(x, y):
            sums.add(batch)
        sums.finish()
        return sums, sums.hvp(v)

    slabs, hv = run()
    assert len(slabs.stored) == -(-n // products.fused_rows(x, outputs=K)) > 1
    monkeypatch.setattr(products, "fused_rows", lambda x, outputs=1: None)
    whole, hv_whole = run()
    assert len(whole.stored) == 1
    torch.testing.assert_close(slabs.loss, whole.loss, rtol=1e-13, atol=0)
    torch.testing.assert_close(slabs.grad, whole.grad, rtol=1e-11, atol=1e-15)
    torch.testing.assert_close(slabs.diag, whole.diag, rtol=1e-11, atol=1e-15)
    torch.testing.assert_close(hv, hv_whole, rtol=1e-11, atol=1e-15)
