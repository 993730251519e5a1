"""The (family, link) pairs R and statsmodels fit beyond the canonical ones (issue 16),
each fitted by Newton and compared with statsmodels' GLM (IRLS, expected information)
on data simulated where the MLE exists: params, bse, deviance, llf."""

import warnings

import numpy as np
import pytest
import statsmodels.api as sm
import torch

from torchglm import ConvergenceWarning, GeneralizedLinearModel, NumericalWarning
from torchglm.families import FAMILIES
from torchglm.inference import glm_results

L = sm.families.links

#: (family, link) -> (statsmodels family, eta range of the simulated truth, statsmodels fit kwargs)
CASES = {
    ("gaussian", "inverse"): (lambda: sm.families.Gaussian(L.InversePower()), (0.5, 1.5), {}),
    ("exponential", "identity"): (lambda: sm.families.Gamma(L.Identity()), (0.5, 3.0), {"scale": 1.0}),
}


def _simulate(family, link, n=500, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = CASES[(family, link)][1]
    x = rng.uniform(0.0, 1.0, size=(n, 2))
    eta = lo + (hi - lo) * (0.6 * x[:, 0] + 0.4 * x[:, 1])
    mu = FAMILIES[family](link).mean(torch.as_tensor(eta)).numpy()
    trials = None
    if family == "gaussian":
        y = mu + 0.3 * rng.standard_normal(n)
    elif family == "exponential":
        y = rng.exponential(mu)
    elif family == "poisson":
        y = rng.poisson(mu).astype(float)
    elif family == "bernoulli":
        y = rng.binomial(1, mu).astype(float)
    else:  # binomial: proportions out of 1..10 trials
        trials = rng.integers(1, 11, size=n).astype(float)
        y = rng.binomial(trials.astype(int), mu) / trials
    return x, y, trials


def test_every_new_pair_is_allowed():
    for family, link in CASES:
        assert link in FAMILIES[family].allowed_links


@pytest.mark.parametrize("family,link", list(CASES), ids=[f"{f}-{k}" for f, k in CASES])
def test_fit_matches_statsmodels(family, link):
    smfam, _, fit_kw = CASES[(family, link)]
    x, y, trials = _simulate(family, link)
    exog = sm.add_constant(x, prepend=False)     # intercept last, like the model's flat order
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
    assert res.llf == pytest.approx(float(r.llf), rel=1e-8)
