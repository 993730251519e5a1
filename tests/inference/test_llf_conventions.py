"""Log-likelihood conventions: for the Gaussian, every link, ``llf`` is the maximized
likelihood, the dispersion at its MLE RSS / n (R's ``logLik``; statsmodels' ``llf`` for the
identity link, while statsmodels puts its log and inverse links at the Pearson scale), and
``llf_mle`` is the same number."""

import math

import pytest
import torch

from torchglm.inference import glm_results
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import fit

sm = pytest.importorskip("statsmodels.api")


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 2, generator=g, dtype=torch.float64)
    mu = torch.exp(0.5 + x @ torch.tensor([0.8, -0.4], dtype=torch.float64))
    return x, mu + 0.3 * torch.randn(300, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("link", ["identity", "log", "inverse"])
def test_gaussian_llf_is_the_maximized_likelihood_for_every_link(link):
    x, y = _data()
    m = GeneralizedLinearModel(2, "gaussian", link, dtype=torch.float64)
    fit(m, x, y, tol=1e-20)
    res = glm_results(m, x, y)
    n = y.shape[0]
    rss = float(((y - m.predict(x).detach()) ** 2).sum())
    r_loglik = -0.5 * n * (math.log(2 * math.pi * rss / n) + 1)  # R's logLik
    assert res.llf == pytest.approx(r_loglik, rel=1e-10)
    assert res.llf_mle == res.llf
    assert res.aic == pytest.approx(-2 * r_loglik + 2 * 3, rel=1e-10)
    links = {
        "identity": sm.families.links.Identity(),
        "log": sm.families.links.Log(),
        "inverse": sm.families.links.InversePower(),
    }
    ref = sm.GLM(y.numpy(), sm.add_constant(x.numpy()), family=sm.families.Gaussian(links[link])).fit(
        tol=1e-12
    )
    # statsmodels' family log-likelihood at the MLE of the dispersion
    assert res.llf == pytest.approx(ref.family.loglike(y.numpy(), ref.mu, scale=rss / n), rel=1e-8)
    if link == "identity":
        assert res.llf == pytest.approx(ref.llf, rel=1e-8)
    else:  # statsmodels' llf, at the Pearson scale, is not the maximum
        assert res.llf > ref.llf


def test_llf_mle_equals_llf_without_a_dispersion():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 2, generator=g, dtype=torch.float64)
    y = torch.poisson(torch.exp(0.3 + 0.5 * x[:, 0]), generator=g)
    m = GeneralizedLinearModel(2, "poisson", dtype=torch.float64)
    fit(m, x, y)
    res = glm_results(m, x, y)
    assert res.llf_mle == res.llf
