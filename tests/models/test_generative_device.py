"""Device-parametrized tests for the generative models (``cpu``, and ``cuda``
when present): every model fits where its data are, keeps its statistics, predictions,
samples and implied linear model there in the data's dtype, and on an accelerator
agrees with the CPU fit (the discriminative models: tests/test_passes_device.py)."""

import pytest
import torch

from torchglm.models import (
    BernoulliNB,
    GaussianDiscriminantAnalysis,
    GaussianNB,
    MultinomialNB,
    PoissonNB,
)
from devices import DEVICES

D, K, N = 4, 3, 300

#: name -> (constructor, kind of features, whether its log-odds are linear)
MODELS = {
    "lda": (lambda: GaussianDiscriminantAnalysis(D, K, covariance="shared"), "real", True),
    "qda": (lambda: GaussianDiscriminantAnalysis(D, K, covariance="per_class"), "real", False),
    "gaussian_nb": (lambda: GaussianNB(D, K), "real", False),
    "multinomial_nb": (lambda: MultinomialNB(D, K), "counts", True),
    "poisson_nb": (lambda: PoissonNB(D, K), "counts", True),
    "bernoulli_nb": (lambda: BernoulliNB(D, K), "binary", True),
}


def _data(kind: str):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(N) % K
    shift = y.double().unsqueeze(1) * torch.tensor([1.0, -0.5, 0.3, 0.0], dtype=torch.float64)
    if kind == "real":
        x = torch.randn(N, D, generator=g, dtype=torch.float64) + shift
    elif kind == "counts":
        x = torch.poisson(torch.exp(0.5 + shift), generator=g)
    else:
        x = (torch.rand(N, D, generator=g, dtype=torch.float64) < torch.sigmoid(shift)).double()
    return x, y


def _fit(name: str, device: str):
    make, kind, _ = MODELS[name]
    x, y = _data(kind)
    model = make().to(device)
    r = model.fit(x.to(device), y.to(device))
    return model, r, x, y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_generative_model_on_every_device(device, name):
    model, r, x, y = _fit(name, device)
    assert r.converged
    xd = x.to(device)
    for t in model.buffers():
        assert t.device.type == device
    proba, logp = model.predict_proba(xd), model.log_prob(xd)
    for t in (proba, logp, model.predict(xd)):
        assert t.device.type == device and not t.requires_grad
    assert proba.dtype == logp.dtype == torch.float64
    torch.testing.assert_close(proba.sum(1), torch.ones(N, dtype=torch.float64, device=device))
    xs, ys = model.sample(50, generator=torch.Generator(device).manual_seed(1))
    assert xs.device.type == ys.device.type == device and xs.shape == (50, D)
    if MODELS[name][2]:
        linear = model.to_linear()
        assert linear.coef.device.type == device
        torch.testing.assert_close(linear.predict_proba(xd), proba, rtol=1e-10, atol=1e-12)
    if device != "cpu":
        ref, _, _, _ = _fit(name, "cpu")
        torch.testing.assert_close(proba.cpu(), ref.predict_proba(x), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(logp.cpu(), ref.log_prob(x), rtol=1e-10, atol=1e-10)
