"""Families and links against statsmodels' families, torch.distributions and autograd.

Every (family, link) pair of the registries is tested: the per-sample NLL against an
independent log-density, the score ``d nll / d eta = -(y - mu) mu'(eta) / V(mu)`` of an
exponential family, the expected information ``mu'^2 / V`` as the autograd Hessian at
``y = mu``, the deviance against statsmodels, and the domain guard (``+inf``, never NaN).
"""

import math

import numpy as np
import pytest
import statsmodels.api as sm
import torch

from torchglm import InputError
from torchglm.families import FAMILIES, Binomial, get_family
from torchglm.links import LINKS, get_link
from data_util import statsmodels_link

PAIRS = [(f, link) for f, cls in FAMILIES.items() if not cls.multi_output for link in cls.allowed_links]


@pytest.mark.parametrize("link", sorted(n for n, cls in LINKS.items() if not cls.multi_output))
def test_statsmodels_links_are_ours(link):
    """Every single-output link has its statsmodels counterpart, and they agree on the
    link's representative eta interval (inverse and its derivative)."""
    lk = get_link(link)
    lo, hi = lk.eta_interval
    eta = torch.linspace(lo, hi, 9, dtype=torch.float64)
    sml = statsmodels_link(link)
    np.testing.assert_allclose(sml.inverse(eta.numpy()), lk.inverse(eta).numpy(), rtol=1e-12)
    np.testing.assert_allclose(sml.inverse_deriv(eta.numpy()), lk.inverse_derivative(eta).numpy(), rtol=1e-10)
    np.testing.assert_allclose(sml(lk.inverse(eta).numpy()), eta.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family,link", PAIRS)
def test_every_pair_declares_a_representative_eta_interval(family, link):
    """``Family.eta_interval`` (the link's own or the family's entry): a proper interval
    whose means, end points included, lie inside the family's open mean space."""
    fam = get_family(family, link)
    assert fam.eta_interval is not None, f"{link}: declare Link.eta_interval"
    lo, hi = fam.eta_interval
    assert lo < hi
    eta = torch.linspace(lo, hi, 101, dtype=torch.float64)
    assert bool(fam.valid_eta(eta).all()) and bool(fam.interior_mean(fam.mean(eta)).all())


def _eta(family, link, n=40, seed=0):
    """``n`` draws in the pair's representative eta interval (``Family.eta_interval``)."""
    lo, hi = get_family(family, link).eta_interval
    g = torch.Generator().manual_seed(seed)
    return lo + (hi - lo) * torch.rand(n, generator=g)


def _draw(family, mu, seed=1):
    """y ~ p(y | mu) at phi = 1 (Gaussian sd 1, Gamma shape 1), plus trials for the binomial."""
    g = torch.Generator().manual_seed(seed)
    if family == "gaussian":
        return mu + torch.randn(mu.shape, generator=g), None
    if family == "bernoulli":
        return torch.bernoulli(mu, generator=g), None
    if family == "binomial":
        trials = torch.randint(1, 12, mu.shape, generator=g).double()
        k = torch.distributions.Binomial(trials, mu).sample()
        return k / trials, trials
    if family == "poisson":
        return torch.poisson(mu, generator=g), None
    # gamma / exponential: y = mu * Exp(1)
    return mu * -torch.log(torch.rand(mu.shape, generator=g)), None


def _sm_family(family, link):
    smf = {
        "gaussian": sm.families.Gaussian,
        "bernoulli": sm.families.Binomial,
        "binomial": sm.families.Binomial,
        "poisson": sm.families.Poisson,
        "gamma": sm.families.Gamma,
        "exponential": sm.families.Gamma,
    }[family]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # check_link=False: statsmodels lists no -1/mu link for its Gamma (ours is exact)
        return smf(statsmodels_link(link), check_link=False)


@pytest.mark.parametrize("family,link", PAIRS)
def test_loglik_and_deviance_match_statsmodels(family, link):
    fam = get_family(family, link)
    eta = _eta(family, link)
    mu = fam.mean(eta)
    y, trials = _draw(family, mu)
    y = fam.check_target(y)
    smf = _sm_family(family, link)
    scale = 1.7 if fam.has_dispersion else 1.0
    yn, mun = y.numpy(), mu.numpy()
    if trials is not None:
        # statsmodels' binomial with counts: n is the number of trials per row
        smf.n = trials.numpy()
    ll_sm = smf.loglike(yn, mun, scale=scale)
    ll = fam.log_likelihood(eta, y, trials, scale=scale)
    assert float(ll) == pytest.approx(ll_sm, rel=1e-10)
    dev_sm = smf.deviance(yn, mun)  # statsmodels' binomial deviance already carries n
    dev = (fam.unit_deviance(y, mu) * (1 if trials is None else trials)).sum()
    assert float(dev) == pytest.approx(dev_sm, rel=1e-9, abs=1e-9)
    # the variance function, and the deviance as twice the NLL above the saturated model
    assert np.allclose(fam.variance(mu).numpy(), smf.variance(mun), rtol=1e-12)
    assert torch.allclose(fam.unit_deviance(y, mu), 2 * (fam.nll(eta, y) - fam.saturated_nll(y)), atol=1e-10)


@pytest.mark.parametrize("family,link", PAIRS)
def test_score_and_expected_information_vs_autograd(family, link):
    fam = get_family(family, link)
    lk = get_link(link)
    eta = _eta(family, link).requires_grad_(True)
    mu = fam.mean(eta).detach()
    y, _ = _draw(family, mu)
    y = fam.check_target(y)
    (g,) = torch.autograd.grad(fam.nll(eta, y).sum(), eta)
    d = lk.inverse_derivative(eta.detach())
    # exponential-family score at phi = 1: d nll / d eta = -(y - mu) mu'(eta) / V(mu)
    assert torch.allclose(g, -(y - mu) * d / fam.variance(mu), rtol=1e-9, atol=1e-10)
    # observed Hessian at y = mu is the expected information mu'(eta)^2 / V(mu)
    e = eta.detach().clone().requires_grad_(True)
    (g1,) = torch.autograd.grad(fam.nll(e, mu).sum(), e, create_graph=True)
    (h,) = torch.autograd.grad(g1.sum(), e)
    assert torch.allclose(h, d * d / fam.variance(mu), rtol=1e-8, atol=1e-10)


_DISTS = {
    "gaussian": lambda mu: torch.distributions.Normal(mu, 1.0),
    "bernoulli": lambda mu: torch.distributions.Bernoulli(probs=mu),
    "poisson": lambda mu: torch.distributions.Poisson(mu),
    "gamma": lambda mu: torch.distributions.Gamma(1.0, 1.0 / mu),
    "exponential": lambda mu: torch.distributions.Exponential(1.0 / mu),
}


@pytest.mark.parametrize("family,link", [p for p in PAIRS if p[0] in _DISTS])
def test_nll_is_the_true_negative_log_density(family, link):
    fam = get_family(family, link)
    eta = _eta(family, link)
    mu = fam.mean(eta)
    y, _ = _draw(family, mu)
    y = fam.check_target(y)
    ref = -_DISTS[family](mu).log_prob(y.to(mu.dtype))
    assert torch.allclose(fam.nll(eta, y), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("scale", [0.3, 2.5])
def test_gamma_and_gaussian_loglik_with_dispersion_vs_torch(scale):
    eta = torch.linspace(0.2, 2.0, 9)
    y = torch.linspace(0.5, 4.0, 9)
    gam = get_family("gamma")  # mu = 1 / eta, shape 1/scale
    ref = torch.distributions.Gamma(1 / scale, 1 / (scale / eta)).log_prob(y).sum()
    assert float(gam.log_likelihood(eta, y, scale=scale)) == pytest.approx(float(ref), rel=1e-12)
    gau = get_family("gaussian")
    ref = torch.distributions.Normal(eta, math.sqrt(scale)).log_prob(y).sum()
    assert float(gau.log_likelihood(eta, y, scale=scale)) == pytest.approx(float(ref), rel=1e-12)


def test_exponential_is_gamma_with_shape_one():
    eta = torch.linspace(-3, -0.2, 11)
    y = torch.linspace(0.1, 5, 11)
    ex = get_family("exponential")
    ga = get_family("gamma", "inverse")
    assert torch.allclose(ex.nll(eta, y), ga.nll(-eta, y), atol=1e-13)
    assert torch.allclose(ex.mean(eta), ga.mean(-eta))
    assert float(ex.log_likelihood(eta, y)) == pytest.approx(float(ga.log_likelihood(-eta, y, scale=1.0)))


def test_binomial_counts_loglik_vs_torch_binomial():
    k = torch.tensor([0.0, 3, 7, 10, 1])
    n = torch.tensor([4.0, 9, 7, 12, 1])
    y, w = Binomial.from_counts(k, n)
    eta = torch.tensor([-1.0, 0.3, 2.0, 1.1, -0.4])
    fam = get_family("binomial")
    ref = torch.distributions.Binomial(n, logits=eta).log_prob(k).sum()
    assert float(fam.log_likelihood(eta, y, w)) == pytest.approx(float(ref), rel=1e-12)
    with pytest.raises(InputError, match="successes: expected counts in"):
        Binomial.from_counts(torch.tensor([5.0]), torch.tensor([4.0]))


# eta outside the mean domain of each non-closed pair
_OUTSIDE = {
    ("poisson", "identity"): -0.5,
    ("gamma", "inverse"): -0.5,
    ("gamma", "identity"): -0.5,
    ("exponential", "negative_reciprocal"): 0.5,
    ("exponential", "inverse"): -0.5,
    ("binomial", "log"): 0.5,
}


@pytest.mark.parametrize("family,link", sorted(_OUTSIDE))
def test_nll_outside_the_mean_domain_is_inf_not_nan(family, link):
    fam = get_family(family, link)
    eta = torch.tensor([_OUTSIDE[(family, link)], sum(fam.eta_interval) / 2], requires_grad=True)
    y = fam.check_target(torch.tensor([1.0, 1.0]) if family != "binomial" else torch.tensor([0.5, 0.5]))
    nll = fam.nll(eta, y)
    assert math.isinf(float(nll[0].detach())) and float(nll[0].detach()) > 0
    assert math.isfinite(float(nll[1].detach()))

    assert not bool(fam.valid_eta(eta.detach())[0])
    (g,) = torch.autograd.grad(nll[1], eta)
    assert bool(torch.isfinite(g).all())


def test_stable_log_inverses_in_the_tails():
    cll = get_link("cloglog")
    eta = torch.tensor([-800.0, -40.0, -21.0, -19.0, 0.0])
    ref = torch.log(-torch.expm1(-torch.exp(eta)))
    out = cll.log_inverse(eta)
    assert torch.isfinite(out).all()
    assert float(out[0]) == pytest.approx(-800.0)
    assert torch.allclose(out[1:], ref[1:], rtol=1e-13)
    log = get_link("log")
    eta = torch.tensor([-1e-12, -1.0, -30.0])
    assert torch.allclose(log.log1m_inverse(eta), torch.log1p(-torch.exp(eta.double())), rtol=1e-6)
    assert float(log.log1m_inverse(torch.tensor(-1e-12))) == pytest.approx(math.log(1e-12), rel=1e-9)


@pytest.mark.parametrize(
    "family,y,match",
    [
        (
            "poisson",
            torch.tensor([1.0, -1.0]),
            "y: expected non-negative counts, got 1 values outside it, first y\\[1\\]",
        ),
        ("gamma", torch.tensor([1.0, 0.0]), "y: expected positive targets"),
        ("exponential", torch.tensor([-2.0]), "y: expected positive targets"),
        ("binomial", torch.tensor([0.5, 1.5]), r"y: expected proportions in \[0, 1\]"),
        (
            "gaussian",
            torch.tensor([0.5, float("nan")]),
            r"y: expected finite values \(no NaN or inf\), got 1 non-finite entries \(1 NaN, 0 inf\), "
            r"first at index \(1,\)",
        ),
        ("gaussian", torch.zeros(3, 2), "y: expected a 1-D tensor"),
    ],
)
def test_check_target_messages(family, y, match):
    with pytest.raises(InputError, match=match):
        get_family(family).check_target(y)


def test_check_target_accepts_integer_counts_as_float():
    y = get_family("poisson").check_target(torch.tensor([0, 3, 5]))
    assert y.is_floating_point() and y.tolist() == [0.0, 3.0, 5.0]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_invalid_pairing_lists_the_valid_links(family):
    cls = FAMILIES[family]
    bad = next(n for n in ("negative_reciprocal", "softmax", "identity") if n not in cls.allowed_links)
    with pytest.raises(
        InputError, match=rf"link for family '{family}': expected one of \[.*'{cls.canonical_link}'"
    ):
        get_family(family, bad)
    assert get_family(family).is_canonical


def test_dispersion_is_pearson_over_df_resid():
    y = torch.tensor([1.0, 2.0, 4.0, 3.0])
    mu = torch.tensor([1.5, 2.0, 3.0, 3.5])
    w = torch.tensor([1.0, 2.0, 1.0, 1.0])
    gam = get_family("gamma")
    ref = float((w * (y - mu) ** 2 / mu**2).sum() / 3)
    assert float(gam.dispersion(y, mu, w, 3)) == pytest.approx(ref)
    assert float(get_family("poisson").dispersion(y, mu, w, 3)) == 1.0


@pytest.mark.parametrize("K", [2, 3, 10, 32, 33, 200])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_short_softmax_equals_torchs(K, dtype):
    """``links.log_softmax`` / ``links.softmax`` (the max-shifted formula written out for
    at most SHORT_SOFTMAX_MAX_CLASSES classes on a CPU, torch's kernel otherwise) equal
    torch's to rounding, also for eta of +-1e4 (no overflow: the shift makes the largest
    term exp(0)) and with a -inf entry; under autograd torch's own op is used."""
    from torchglm.links import SHORT_SOFTMAX_MAX_CLASSES, log_softmax, softmax

    g = torch.Generator().manual_seed(K)
    eta = (torch.randn(257, K, generator=g, dtype=torch.float64) * 30).to(dtype)
    eta[0] = 1e4
    eta[1, 0] = -1e4
    eta[2, -1] = float("-inf")
    eps = torch.finfo(dtype).eps
    ref_log, ref = torch.log_softmax(eta, dim=-1), torch.softmax(eta, dim=-1)
    finite = torch.isfinite(ref_log)
    got_log = log_softmax(eta)
    assert torch.equal(torch.isfinite(got_log), finite)
    assert torch.allclose(got_log[finite], ref_log[finite], rtol=16 * eps, atol=16 * eps * 1e4)
    assert torch.allclose(softmax(eta), ref, rtol=16 * eps, atol=16 * eps)
    assert torch.allclose(softmax(eta).sum(-1), torch.ones(257, dtype=dtype), atol=4 * K * eps)
    if K > SHORT_SOFTMAX_MAX_CLASSES:  # torch's own kernel: the same bits
        assert torch.equal(got_log, ref_log) and torch.equal(softmax(eta), ref)
    e = eta.clone().requires_grad_(True)
    assert log_softmax(e).grad_fn.name().startswith("LogSoftmax")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_poisson_y_term_is_lgamma_bit_for_bit(dtype):
    """Counts read ``lgamma(y + 1)`` from a table (up to 2^16), rates and larger counts
    evaluate it: the same numbers either way."""
    fam = get_family("poisson")
    g = torch.Generator().manual_seed(0)
    counts = torch.poisson(torch.full((5000,), 3.0, dtype=dtype), generator=g)
    cases = [
        counts,
        torch.cat([counts, torch.tensor([0.0, 65536.0], dtype=dtype)]),  # the table's ends
        torch.cat([counts, torch.tensor([65537.0], dtype=dtype)]),  # past it
        counts + 0.25,  # rates
        torch.cat([counts, torch.tensor([2.5], dtype=dtype)]),  # one rate among counts
        torch.zeros(0, dtype=dtype),
    ]
    for y in cases:
        got = fam.nll_y_term(y)
        assert got.dtype == dtype
        assert torch.equal(got, torch.lgamma(y + 1))
