"""The (family, link) pairs R and statsmodels fit beyond the canonical ones,
each fitted by Newton and compared with statsmodels' GLM (IRLS, expected information)
on data simulated where the MLE exists: params, bse, deviance, llf."""

import math
import warnings

import numpy as np
import pytest
import statsmodels.api as sm
import torch

from torchglm import ConvergenceWarning, GeneralizedLinearModel, NumericalWarning
from torchglm.data.simulate import sample_response
from torchglm.families import FAMILIES
from torchglm.inference import glm_results

L = sm.families.links

#: (family, link) -> (statsmodels family, statsmodels fit kwargs); the simulated truth's
#: eta lies in the pair's representative interval (``Family.eta_interval``).
CASES = {
    ("gaussian", "inverse"): (lambda: sm.families.Gaussian(L.InversePower()), {}),
    ("exponential", "identity"): (lambda: sm.families.Gamma(L.Identity()), {"scale": 1.0}),
    ("poisson", "sqrt"): (lambda: sm.families.Poisson(L.Sqrt()), {}),
    ("bernoulli", "log"): (lambda: sm.families.Binomial(L.Log()), {}),
    ("bernoulli", "cauchit"): (lambda: sm.families.Binomial(L.Cauchy()), {}),
    ("binomial", "cauchit"): (lambda: sm.families.Binomial(L.Cauchy()), {}),
    ("binomial", "log"): (lambda: sm.families.Binomial(L.Log()), {}),
}


def _simulate(family, link, n=500, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = FAMILIES[family](link).eta_interval
    x = rng.uniform(0.0, 1.0, size=(n, 2))
    eta = lo + (hi - lo) * (0.6 * x[:, 0] + 0.4 * x[:, 1])
    mu = FAMILIES[family](link).mean(torch.as_tensor(eta)).numpy()
    # Gaussian noise sd 0.3; binomial proportions out of 1..10 trials
    phi = 0.09 if family == "gaussian" else None
    y, trials = sample_response(family, mu, rng, dispersion=phi, max_trials=10)
    return x, y.astype(float), trials


def test_every_new_pair_is_allowed():
    for family, link in CASES:
        assert link in FAMILIES[family].allowed_links


@pytest.mark.parametrize("family,link", list(CASES), ids=[f"{f}-{k}" for f, k in CASES])
def test_fit_matches_statsmodels(family, link):
    smfam, fit_kw = CASES[(family, link)]
    x, y, trials = _simulate(family, link)
    exog = sm.add_constant(x, prepend=False)  # intercept last, like the model's flat order
    endog = y if trials is None else np.column_stack([y * trials, trials * (1 - y)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sm.GLM(endog, exog, family=smfam()).fit(tol=1e-13, maxiter=500, **fit_kw)
    assert r.converged
    m = GeneralizedLinearModel(2, family, link)
    xt, yt = torch.tensor(x), torch.tensor(y)
    wt = None if trials is None else torch.tensor(trials)
    if family == "bernoulli":
        yt = yt.long()
    with warnings.catch_warnings():
        # a non-canonical link may start where the Hessian is indefinite (the solver flips
        # those eigenvalues, with a NumericalWarning); the fit itself must converge
        warnings.simplefilter("ignore", NumericalWarning)
        warnings.simplefilter("error", ConvergenceWarning)
        fr = m.fit(xt, yt, wt, solver="newton", tol=1e-20, gtol=1e-13)
    assert fr.converged, fr.message
    res = glm_results(m, xt, yt, wt, fit_result=fr, information="expected")
    np.testing.assert_allclose(res.params.numpy(), r.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=1e-6)
    assert res.deviance == pytest.approx(float(r.deviance), rel=1e-8)
    llf = r.llf
    if family == "gaussian":  # llf at the MLE RSS / n (R's logLik), statsmodels at the Pearson scale
        llf = r.family.loglike(y, r.mu, scale=np.sum((y - r.mu) ** 2) / len(y))
    assert res.llf == pytest.approx(float(llf), rel=1e-8)


@pytest.mark.parametrize("name, lo, hi", [("sqrt", 0.2, 3.0), ("cauchit", -20.0, 20.0)])
def test_new_links_roundtrip_and_derivative(name, lo, hi):
    from torchglm.links import LINKS

    link = LINKS[name]()
    eta = torch.linspace(lo, hi, 41, dtype=torch.float64).requires_grad_(True)
    mu = link.inverse(eta)
    torch.testing.assert_close(link.link(mu.detach()), eta.detach(), rtol=1e-12, atol=1e-12)
    (grad,) = torch.autograd.grad(mu.sum(), eta)
    torch.testing.assert_close(link.inverse_derivative(eta.detach()), grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(link.log_inverse(eta.detach()), torch.log(mu.detach()), rtol=1e-12, atol=1e-14)


def test_cauchit_tails_keep_relative_precision():
    """1 - mu = atan2(1, eta)/pi ~ 1/(pi eta): at eta = 1e20 the naive 1 - (1/2 + atan/pi)
    is all rounding error; log1m_inverse keeps it to 1e-14 (mpmath reference), and
    log mu at -eta equals it by symmetry."""
    import mpmath as mp

    from torchglm.links import Cauchit

    with mp.workdps(40):  # local: test_trust_inputs sets the global precision
        link = Cauchit()
        for e in (1e3, 1e10, 1e20, 1e200):
            ref = float(mp.log(mp.atan(1 / mp.mpf(e)) / mp.pi))  # 1/2 - atan(e)/pi = atan(1/e)/pi, e > 0
            eta = torch.tensor([e, -e], dtype=torch.float64)
            got = link.log1m_inverse(eta[:1])
            assert float(got) == pytest.approx(ref, rel=1e-14)
            assert float(link.log_inverse(eta[1:])) == pytest.approx(ref, rel=1e-14)  # symmetry
        # the naive form is useless there: 1/2 + atan/pi rounds next to 1 (-inf, or nats off)
        naive = float(torch.log1p(-(0.5 + torch.atan(torch.tensor(1e20, dtype=torch.float64)) / math.pi)))
        ref = float(mp.log(mp.atan(1 / mp.mpf(1e20)) / mp.pi))
        assert not abs(naive - ref) < 1.0
