"""``torchglm.data.simulate``: responses drawn by ``sample_response`` have the family's
mean and variance (McCullagh & Nelder §2.2), ``simulate_glm`` draws its responses
through it, and bad input gets one ``InputError``."""

import numpy as np
import pytest
import torch

from torchglm import InputError
from torchglm.data.simulate import sample_response, simulate_glm
from torchglm.families import FAMILIES, get_family

SINGLE = [name for name, cls in FAMILIES.items() if not cls.multi_output]
#: a mean inside each family's domain
MU = {"gaussian": -0.7, "bernoulli": 0.3, "binomial": 0.3, "poisson": 2.5, "gamma": 1.7, "exponential": 1.7}


@pytest.mark.parametrize("family", SINGLE)
def test_draws_have_the_family_mean_and_variance(family):
    """``E y = mu`` within 5 standard errors, and the sample variance equals
    ``phi V(mu) / m`` (``m`` the binomial trials, else 1) within 5 of its own standard
    errors (``sd(s^2) ~ s^2 sqrt((kurtosis - 1) / n)``, kurtosis bounded by 10 here)."""
    n, phi = 200_000, (0.3 if get_family(family).has_dispersion else None)
    mu = np.full(n, MU[family])
    y, trials = sample_response(family, mu, np.random.default_rng(0), dispersion=phi, trials=4)
    m = 1.0 if trials is None else trials
    var = (1.0 if phi is None else phi) * get_family(family).variance(torch.tensor(mu)).numpy() / m
    assert abs(y.mean() - MU[family]) < 5 * np.sqrt(var.mean() / n)
    assert abs(y.var() / var.mean() - 1) < 5 * np.sqrt(9 / n)
    assert (trials is None) == (family != "binomial")


def test_binomial_trials_are_uniform_on_one_to_max_trials():
    _, trials = sample_response("binomial", np.full(5000, 0.5), np.random.default_rng(1), max_trials=3)
    assert trials.dtype == np.float64
    assert set(np.unique(trials)) == {1.0, 2.0, 3.0}


@pytest.mark.parametrize("family", SINGLE)
def test_simulate_glm_draws_its_responses_through_sample_response(family):
    """The documented order: ``x`` from the seeded generator, then the responses."""
    sim = simulate_glm(family, n_samples=50, n_features=2, seed=5)
    rng = np.random.default_rng(5)
    x = rng.uniform(-1.0, 1.0, size=(50, 2))
    mu = get_family(family).mean(torch.tensor(sim.intercept + x @ sim.coef)).numpy()
    phi = sim.dispersion if get_family(family).has_dispersion else None
    y, weight = sample_response(family, mu, rng, dispersion=phi)
    assert np.array_equal(x, sim.x) and np.array_equal(y, sim.y)
    assert (weight is None and sim.weight is None) or np.array_equal(weight, sim.weight)


@pytest.mark.parametrize(
    "family,mu,kw,argument",
    [
        ("categorical", np.full(3, 0.5), {}, "family"),
        ("poisson", np.full(3, 0.5), {"dispersion": 2.0}, "dispersion"),
        ("gamma", np.full(3, 0.5), {"dispersion": -1.0}, "dispersion"),
        ("bernoulli", np.array([0.2, 1.5, 0.3]), {}, "mu"),
        ("poisson", np.array([1.0, -0.5]), {}, "mu"),
        ("gamma", np.array([1.0, 0.0]), {}, "mu"),
        ("gaussian", np.array([0.0, np.nan]), {}, "mu"),
        ("gaussian", np.zeros((2, 2)), {}, "mu"),
    ],
)
def test_bad_input_is_one_input_error(family, mu, kw, argument):
    with pytest.raises(InputError, match=f"^{argument}: expected"):
        sample_response(family, mu, np.random.default_rng(0), **kw)
