"""Data more than one test file uses, in one place: statsmodels' shipped datasets as its
GLM examples prepare them, with the (dataset, family, link) cases fitted against
statsmodels; scikit-learn's breast cancer data, standardized; data drawn from a GLM of
any (family, link) pair, the categorical included (which
``torchglm.data.simulate.simulate_glm`` does not draw); binary labels from a logistic or
probit model, or from a noisy threshold, on Gaussian features; Gaussian features with
labels unrelated to them; and Gaussian classes with well-separated means and unequal
feature scales, Poisson counts and Bernoulli bits per class, for the generative
classifiers.

The torch helpers draw from one ``torch.Generator`` seeded with ``seed``, in the order
their docstrings give, so a test's data are fixed by its arguments alone."""

import warnings

import numpy as np
import pytest
import statsmodels.api as sm
import torch

from torchglm.families import FAMILIES
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import flat_parameters, set_flat_parameters

SM = sm.families
L = sm.families.links


class NegativeReciprocal(sm.families.links.Link):
    """``eta = -1 / mu`` (statsmodels has only ``InversePower``, ``1 / mu``)."""

    def __call__(self, p):
        return -1.0 / p

    def inverse(self, z):
        return -1.0 / z

    def deriv(self, p):
        return 1.0 / p**2

    def inverse_deriv(self, z):
        return 1.0 / z**2


#: The statsmodels link of each of ours, the one table of them (checked against ours:
#: test_families.py::test_statsmodels_links_are_ours). A new link adds its entry here.
SM_LINKS = {
    "identity": sm.families.links.Identity,
    "log": sm.families.links.Log,
    "logit": sm.families.links.Logit,
    "probit": sm.families.links.Probit,
    "cloglog": sm.families.links.CLogLog,
    "inverse": sm.families.links.InversePower,
    "negative_reciprocal": NegativeReciprocal,
    "sqrt": sm.families.links.Sqrt,
    "cauchit": sm.families.links.Cauchy,
}


def statsmodels_link(link):
    """The statsmodels counterpart of ``link``; a link without one fails the test loudly."""
    if link not in SM_LINKS:
        pytest.fail(f"no statsmodels link for '{link}': add it to data_util.SM_LINKS")
    return SM_LINKS[link]()


def as_tensor(a):
    return None if a is None else torch.tensor(np.asarray(a, dtype=float))


def statsmodels_dataset(name):
    """(X, y, weight, offset) from statsmodels' shipped datasets, as in its GLM examples."""
    if name == "cpunish":
        d = sm.datasets.cpunish.load_pandas()
        X = d.exog.values.copy()
        X[:, 3] = np.log(X[:, 3])
        return X, d.endog.values, None, None
    if name == "cpunish_offset":
        X, y, _, _ = statsmodels_dataset("cpunish")
        return X[:, 1:], y, None, np.log(X[:, 0] / 1e4)  # INCOME as an exposure
    if name == "scotland":
        d = sm.datasets.scotland.load_pandas()
        return d.exog.values, d.endog.values, None, None
    if name == "star98":
        d = sm.datasets.star98.load_pandas()
        k, n = d.endog.values[:, 0], d.endog.values.sum(1)
        return d.exog.values, k / n, n, None
    if name == "longley":
        d = sm.datasets.longley.load_pandas()
        return d.exog.values, d.endog.values, None, None
    if name == "scotland_exp":
        X, y, _, _ = statsmodels_dataset("scotland")
        return X[:, :3], y / 10, None, None
    raise KeyError(name)


# (dataset, family, link, statsmodels family, statsmodels fit kwargs, freq weights)
CASES = [
    ("cpunish", "poisson", "log", SM.Poisson(), {}),
    ("cpunish_offset", "poisson", "log", SM.Poisson(), {}),
    ("scotland", "gamma", "inverse", SM.Gamma(L.InversePower()), {}),
    ("scotland", "gamma", "log", SM.Gamma(L.Log()), {}),
    ("scotland", "gamma", "identity", SM.Gamma(L.Identity()), {}),
    ("scotland_exp", "exponential", "log", SM.Gamma(L.Log()), {"scale": 1.0}),
    ("star98", "binomial", "logit", SM.Binomial(), {}),
    ("star98", "binomial", "probit", SM.Binomial(L.Probit()), {}),
    ("star98", "binomial", "cloglog", SM.Binomial(L.CLogLog()), {}),
    ("longley", "gaussian", "identity", SM.Gaussian(), {}),
    ("longley", "gaussian", "log", SM.Gaussian(L.Log()), {}),
]


def statsmodels_fit(dataset, smfam, fit_kw, freq_weights=None):
    X, y, w, off = statsmodels_dataset(dataset)
    exog = sm.add_constant(X, prepend=False)  # intercept last, like the model's flat order
    endog = y if w is None else np.column_stack([y * w, w * (1 - y)])
    kw = {} if off is None else {"offset": off}
    if freq_weights is not None:
        kw["freq_weights"] = freq_weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.GLM(endog, exog, family=smfam, **kw).fit(tol=1e-13, maxiter=200, **fit_kw)


def breast_cancer(cols=(0, 1, 4, 6, 8, 9, 20, 24)):
    from sklearn.datasets import load_breast_cancer

    b = load_breast_cancer()
    x = b.data[:, list(cols)]
    x = (x - x.mean(0)) / x.std(0)
    return torch.tensor(x), torch.tensor(b.target).long()


def simulate(family, link, n=200, d=3, seed=0):
    """Data from the model itself at moderate coefficients, inside every link's domain."""
    g = torch.Generator().manual_seed(seed)
    cls = FAMILIES[family]
    K = 3 if cls.multi_output else None
    m = GeneralizedLinearModel(d, family, link, n_classes=K, dtype=torch.float64)
    x = torch.rand(n, d, generator=g)
    theta = 0.5 * torch.randn(flat_parameters(m).numel(), generator=g)
    if not cls.is_classifier:
        theta = theta.abs() * 0.2 + 0.5
        if link == "negative_reciprocal" or (family == "binomial" and link == "log"):
            theta = -theta  # eta < 0: mu = -1/eta > 0, or mu = exp(eta) < 1
    elif link == "log":
        theta = -(theta.abs() * 0.2 + 0.5)  # Bernoulli log link: eta < 0, mu = exp(eta) < 1
    set_flat_parameters(m, theta)
    with torch.no_grad():
        mu = m.family.mean(m(x))
    if family == "categorical":
        y = torch.multinomial(mu, 1, generator=g).squeeze(1)
    elif cls.is_classifier:
        y = (torch.rand(n, generator=g) < mu).long()
    elif family == "gaussian":
        y = mu + 0.3 * torch.randn(n, generator=g)
    elif family == "poisson":
        y = torch.poisson(mu, generator=g)
    elif family == "binomial":
        y = (torch.rand(n, generator=g) < mu).to(torch.float64)
    else:  # gamma / exponential: a positive response around mu
        y = mu * torch.empty(n, dtype=mu.dtype).exponential_(generator=g)
    return x, y, K


def gaussian_classes(n=300, d=4, k=3, seed=0):
    """``n`` points of ``k`` classes in turn, ``x ~ N(mu_y, diag(0.5 .. 1.5)^2)``, ``mu ~ N(0, 4 I)``."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    means = 2.0 * torch.randn(k, d, generator=g, dtype=torch.float64)
    x = means[y] + torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(0.5, 1.5, d)
    return x, y


def poisson_counts(n=300, d=6, k=3, seed=0):
    """``n`` count vectors of ``k`` classes in turn, ``x_j ~ Poisson(rate_yj)``, rates in (0.5, 3.5)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    rates = 0.5 + 3 * torch.rand(k, d, generator=g, dtype=torch.float64)
    return torch.poisson(rates[y], generator=g), y


def _design(n, d, seed):
    """The generator seeded with ``seed``, and ``x ~ N(0, I)`` (n, d) float64 its first draws."""
    g = torch.Generator().manual_seed(seed)
    return g, torch.randn(n, d, generator=g, dtype=torch.float64)


def gaussian_design(n, d, seed=0):
    """``x ~ N(0, I)`` (n, d) float64: the features of every helper below, alone."""
    return _design(n, d, seed)[1]


def _coef(coef, d):
    """``coef`` padded with zeros to ``d`` entries (the features it leaves out do not act)."""
    if len(coef) > d:
        raise ValueError(f"{len(coef)} coefficients for {d} features")
    return torch.tensor(tuple(coef) + (0.0,) * (d - len(coef)), dtype=torch.float64)


def bernoulli_data(n, d, coef, intercept=0.0, seed=0, link="logit", draw="uniform"):
    """``x ~ N(0, I)`` (n, d) and ``y ~ Bernoulli(F(x w + b))`` (n,) as float64 0/1, with
    ``F`` the logistic (``link="logit"``) or standard normal (``"probit"``) cdf, ``w`` the
    ``coef`` padded with zeros to ``d``, ``b`` the intercept.

    Drawn in the order ``x``, then ``y``: one uniform per row, ``y = 1[u < F]``
    (``draw="uniform"``), or ``torch.bernoulli(F)`` (``draw="bernoulli"``)."""
    g, x = _design(n, d, seed)
    eta = x @ _coef(coef, d) + intercept
    mu = torch.sigmoid(eta) if link == "logit" else torch.special.ndtr(eta)
    if draw == "bernoulli":
        return x, torch.bernoulli(mu, generator=g)
    return x, (torch.rand(n, generator=g, dtype=torch.float64) < mu).to(torch.float64)


def threshold_data(n, d, coef, noise=0.5, seed=0):
    """``x ~ N(0, I)`` (n, d) and ``y = 1[x w + noise e > 0]`` (n,) as float64 0/1,
    ``e ~ N(0, 1)``: a probit model with slope ``w / noise``, ``w`` the ``coef`` padded
    with zeros to ``d``. Drawn in the order ``x``, ``e``."""
    g, x = _design(n, d, seed)
    e = torch.randn(n, generator=g, dtype=torch.float64)
    return x, (x @ _coef(coef, d) + noise * e > 0).to(torch.float64)


def random_labels(n, d, k=2, seed=0):
    """``x ~ N(0, I)`` (n, d) and labels ``y`` (n,) long, uniform on ``0 .. k-1`` and
    independent of ``x``: for ``n >> d`` the classes overlap, so the MLE exists. Drawn
    ``x``, ``y``."""
    g, x = _design(n, d, seed)
    return x, torch.randint(0, k, (n,), generator=g)


def bernoulli_classes(n=300, d=6, k=3, seed=0):
    """``n`` binary vectors of ``k`` classes in turn, ``x_j ~ Bernoulli(p_yj)``, ``p`` in (0.1, 0.9)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    p = 0.1 + 0.8 * torch.rand(k, d, generator=g, dtype=torch.float64)
    return torch.bernoulli(p[y], generator=g), y
