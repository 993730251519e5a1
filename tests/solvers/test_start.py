"""Every (family, link) starts from a valid point, with or without an intercept.

From the all-zero start a link whose inverse is not defined at ``eta = 0`` (the
identity link of the Gamma and Poisson families, every inverse link, the square root)
gives no finite loss; without an intercept there is no intercept-only fit to fall back
on. The solvers then start as R's ``glm`` and statsmodels do, from the data: one
weighted least-squares step of IRLS at ``mu0`` from ``y``. The fits are compared with
statsmodels' ``GLM`` (IRLS from its own data start, tolerance tightened).
"""

import warnings

import numpy as np
import pytest
import torch

from torchglm import ConvergenceWarning
from torchglm.inference import fit_glm
from torchglm.models import GeneralizedLinearModel

sm = pytest.importorskip("statsmodels.api")
L = sm.families.links

pytestmark = pytest.mark.usefixtures("quiet_one_thread")

#: torchglm's (family, link) -> statsmodels' family, and the sign of its coefficients
#: (-1/mu, the negative reciprocal, is statsmodels' 1/mu with the signs flipped).
SM = {
    "gaussian": lambda link: sm.families.Gaussian(link),
    "bernoulli": lambda link: sm.families.Binomial(link),
    "binomial": lambda link: sm.families.Binomial(link),
    "poisson": lambda link: sm.families.Poisson(link),
    "gamma": lambda link: sm.families.Gamma(link),
    "exponential": lambda link: sm.families.Gamma(link),  # Gamma with phi = 1
}
SM_LINKS = {
    "identity": (L.Identity, 1.0),
    "log": (L.Log, 1.0),
    "inverse": (L.InversePower, 1.0),
    "negative_reciprocal": (L.InversePower, -1.0),
    "logit": (L.Logit, 1.0),
    "probit": (L.Probit, 1.0),
    "cloglog": (L.CLogLog, 1.0),
    "cauchit": (L.Cauchy, 1.0),
    "sqrt": (L.Sqrt, 1.0),
}
CASES = [
    (fam, link)
    for fam, links in {
        "gaussian": ("identity", "log", "inverse"),
        "bernoulli": ("logit", "probit", "cloglog", "log", "cauchit"),
        "binomial": ("logit", "probit", "cloglog", "log", "cauchit"),
        "poisson": ("log", "identity", "sqrt"),
        "gamma": ("inverse", "log", "identity"),
        "exponential": ("negative_reciprocal", "inverse", "log", "identity"),
    }.items()
    for link in links
]

#: The (family, link) pairs whose all-zero start is outside the domain (no mean at
#: eta = 0, or a target with zero likelihood there): without an intercept they start
#: from the data; every other pair keeps the zero or intercept-only start (no extra pass).
ZERO_OUTSIDE = {
    ("gaussian", "inverse"),
    ("bernoulli", "log"),
    ("binomial", "log"),
    ("poisson", "identity"),
    ("poisson", "sqrt"),
    ("gamma", "inverse"),
    ("gamma", "identity"),
    ("exponential", "negative_reciprocal"),
    ("exponential", "inverse"),
    ("exponential", "identity"),
}


def _data(family, link, intercept, seed=0, n=400):
    """Positive features and a mean inside the family's range for the link: eta in
    (0.5, 1.5) (x in (0.5, 1.5)), negated where the link needs eta < 0 (log of a
    probability, the negative reciprocal), shifted by -1 for the symmetric binary links."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 1.5, (n, 2))
    eta = 0.3 + x @ np.array([0.4, 0.3]) if intercept else x @ np.array([0.6, 0.4])
    if link in ("log",) and family in ("bernoulli", "binomial") or link == "negative_reciprocal":
        eta = -eta
    if link == "cauchit" or link in ("logit", "probit", "cloglog"):
        eta = eta - 1.0
    fam = GeneralizedLinearModel(2, family, link=link).family
    mu = fam.mean(torch.tensor(eta)).numpy()
    trials = None
    if family == "gaussian":
        y = mu + 0.05 * rng.standard_normal(n)
    elif family == "bernoulli":
        y = (rng.uniform(size=n) < mu).astype(float)
    elif family == "binomial":
        trials = rng.integers(1, 10, n).astype(float)
        y = rng.binomial(trials.astype(int), mu) / trials
    elif family == "poisson":
        y = rng.poisson(5 * mu) / 5.0 if link != "log" else rng.poisson(mu).astype(float)
        if link != "log":
            y = rng.poisson(mu * 5).astype(float)
            x = x * 5
    elif family == "gamma":
        y = rng.gamma(4.0, mu / 4.0)
    else:
        y = rng.exponential(mu)
    return x, y, trials


@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("family,link", CASES)
def test_every_family_and_link_starts_from_the_data(family, link, intercept):
    x, y, trials = _data(family, link, intercept)
    sm_link, sign = SM_LINKS[link]
    exog = np.column_stack([x, np.ones(len(y))]) if intercept else x
    endog = np.column_stack([y * trials, (1 - y) * trials]) if trials is not None else y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sm.GLM(endog, exog, family=SM[family](sm_link())).fit(
            tol=1e-11, tol_criterion="params", maxiter=500, scale=1.0 if family == "exponential" else None
        )
    assert ref.converged
    model = GeneralizedLinearModel(2, family, link=link, fit_intercept=intercept, dtype=torch.float64)
    weight = None if trials is None else torch.tensor(trials)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning, no numerical note
        res = fit_glm(model, torch.tensor(x), torch.tensor(y), weight=weight, tol=1e-15)
    assert res.converged
    np.testing.assert_allclose(np.asarray(res.params) * sign, ref.params, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(res.bse), ref.bse, rtol=1e-6, atol=1e-8)
    # Newton from the same (zero) start: a valid start, the same optimum
    m2 = GeneralizedLinearModel(2, family, link=link, fit_intercept=intercept, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        r2 = m2.fit(torch.tensor(x), torch.tensor(y), weight=weight, solver="newton", tol=1e-15)
    assert r2.converged, r2.message
    data_start = r2.extra.get("start") == "weighted least squares from the data (mu0 from y)"
    assert data_start == (not intercept and (family, link) in ZERO_OUTSIDE)
    np.testing.assert_allclose(m2.flat_parameters().numpy() * sign, ref.params, rtol=1e-6, atol=1e-8)


def test_gamma_identity_without_intercept_as_r_fits_it():
    """R: ``glm(EXECUTIONS ~ INCOME + SOUTH - 1, family = Gamma("identity"))`` on the
    executions data (statsmodels' ``cpunish``; R's numbers from statsmodels' test
    results, tweedie(var.power = 2, link.power = 1)). From theta = 0 the mean is 0,
    outside the Gamma's range: the fit used to return zeros with a NaN deviance."""
    cpunish = pytest.importorskip("statsmodels.datasets.cpunish")
    d = cpunish.load_pandas().data
    x, y = d[["INCOME", "SOUTH"]], d["EXECUTIONS"]
    for solver in ("auto", "irls", "newton"):
        model = GeneralizedLinearModel(2, "gamma", link="identity", fit_intercept=False, dtype=torch.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            res = fit_glm(model, x, y, solver=solver)
        assert res.converged
        np.testing.assert_allclose(
            res.params, [4.72472244209477e-05, 6.43243456540827], rtol=1e-5
        )  # R: epsilon 1e-8 on the deviance
        np.testing.assert_allclose(res.deviance, 15.7840685407599, rtol=1e-9)
        if solver != "newton":  # R's standard errors are the expected information's
            np.testing.assert_allclose(res.bse, [1.86839521185429e-05, 3.83231672422612], rtol=1e-5)


def test_no_valid_start_is_said_clearly():
    """A positive mean proportional to a feature of both signs: no coefficient gives
    every row a valid mean, from the data start neither; the fit says so (R: "no valid
    set of coefficients has been found: please supply starting values")."""
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.uniform(-1, 2, (100, 1)))
    y = torch.tensor(rng.gamma(2.0, 1.0, 100))
    model = GeneralizedLinearModel(1, "gamma", link="identity", fit_intercept=False, dtype=torch.float64)
    with pytest.warns(ConvergenceWarning, match="no starting point in the domain of the 'identity' link"):
        r = model.fit(x, y, solver="newton")
    assert not r.converged and "give starting parameters" in r.message
