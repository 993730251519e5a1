"""The intercept-only (null) model with offsets is fitted by the solvers:
its intercept minimizes sum_i s_i nll(b + offset_i, y_i) (checked by a 1-D search)."""

import pytest
import torch
from scipy.optimize import minimize_scalar

from torchglm import GeneralizedLinearModel
from torchglm.inference import fit_glm


@pytest.mark.parametrize(
    "family,link", [("poisson", "log"), ("gamma", "log"), ("bernoulli", "probit"), ("gaussian", "log")]
)
def test_null_deviance_with_offsets_is_at_the_null_mle(family, link):
    g = torch.Generator().manual_seed(3)
    n = 200
    x = torch.rand(n, 2, generator=g, dtype=torch.float64)
    off = 0.5 * torch.rand(n, generator=g, dtype=torch.float64)
    w = 1 + torch.rand(n, generator=g, dtype=torch.float64)
    model = GeneralizedLinearModel(2, family, link)
    mu = model.family.mean(0.2 + x @ torch.tensor([0.5, -0.4], dtype=torch.float64) + off)
    if family == "poisson":
        y = torch.poisson(mu, generator=g)
    elif family == "bernoulli":
        y = torch.bernoulli(mu, generator=g)
    else:  # positive targets around mu
        y = mu * torch.exp(0.3 * torch.randn(n, generator=g, dtype=torch.float64))
    res = fit_glm(model, x, y, w, off, solver="newton")
    fam = model.family
    yt = y.long() if family == "bernoulli" else y

    def objective(b):
        return float((w * fam.nll(b + off, yt)).sum())

    b = minimize_scalar(objective, bracket=(-1.0, 1.0), tol=1e-12).x
    dev = float((w * fam.unit_deviance(y, fam.mean(b + off))).sum())
    assert res.null_deviance == pytest.approx(dev, rel=1e-9)
