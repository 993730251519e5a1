"""GLM fits for every (family, link) pair: statsmodels parity, Newton == IRLS, weights, offsets.

Fits use ``tol=1e-20`` (the Newton-decrement rule then stops at working precision)
so that coefficients can be compared to 1e-6 relative.
"""

import warnings

import numpy as np
import pytest
import torch
from torch.autograd.functional import hessian as autograd_hessian

from data_util import CASES, as_tensor, statsmodels_dataset, statsmodels_fit
from torchglm import ConvergenceWarning, GeneralizedLinearModel, InputError, NumericalWarning
from torchglm.data.batches import TensorBatches
from torchglm.data.simulate import simulate_glm
from torchglm.families import FAMILIES
from torchglm.inference import fit_glm, glm_results
from torchglm.solvers.pass_sums import hessian_and_gradient


PAIRS = [(f, link) for f, cls in FAMILIES.items() if not cls.multi_output for link in cls.allowed_links]
TIGHT = dict(tol=1e-20, gtol=1e-13)


def _sim(family, link, n=400, d=3, seed=0):
    s = simulate_glm(family, link, n_samples=n, n_features=d, seed=seed)
    w = None if s.weight is None else torch.tensor(s.weight)
    return torch.tensor(s.x), torch.tensor(s.y), w, s


def _fit(family, link, x, y, w=None, off=None, solver="newton", l2=0.0, **kw):
    m = GeneralizedLinearModel(x.shape[1], family, link, l2=l2)
    with warnings.catch_warnings():
        # Newton with a non-canonical link may start where the Hessian is indefinite
        # (a NumericalWarning: the solver flips those eigenvalues); it must converge.
        warnings.simplefilter("ignore", NumericalWarning)
        warnings.simplefilter("error", ConvergenceWarning)
        r = m.fit(x, y, w, off, solver=solver, **{**TIGHT, **kw})
    assert r.converged, r.message
    return m, r


def _theta(m):
    return torch.cat([m.linear.weight.detach().reshape(-1), m.linear.bias.detach()])


@pytest.mark.parametrize("solver", ["irls", "newton"])
@pytest.mark.parametrize(
    "dataset,family,link,smfam,fit_kw",
    [c for c in CASES if c[0] != "longley"],
    ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES if c[0] != "longley"],
)
def test_fit_matches_statsmodels_glm(dataset, family, link, smfam, fit_kw, solver):
    X, y, w, off = statsmodels_dataset(dataset)
    r = statsmodels_fit(dataset, smfam, fit_kw)
    m, fr = _fit(family, link, as_tensor(X), as_tensor(y), as_tensor(w), as_tensor(off), solver=solver)
    res = glm_results(
        m, as_tensor(X), as_tensor(y), as_tensor(w), as_tensor(off), fit_result=fr, information="expected"
    )
    np.testing.assert_allclose(res.params.numpy(), r.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=1e-6)
    for k in ("llf", "deviance", "null_deviance", "aic", "bic", "scale"):
        assert getattr(res, k) == pytest.approx(float(getattr(r, k)), rel=1e-6), k
    assert res.n_iter == fr.n_iter and res.converged


@pytest.mark.parametrize("link", ["identity", "log"])
def test_gaussian_longley_matches_statsmodels(link):
    # Longley's raw columns span 8 orders of magnitude (cond(X^T X) ~ 1e19 before
    # scaling); the columns are rescaled to unit standard deviation, which
    # statsmodels gets too, so the comparison is exact.
    X, y, _, _ = statsmodels_dataset("longley")
    Xs = X / X.std(0)
    import statsmodels.api as sm

    fam = sm.families.Gaussian(
        sm.families.links.Identity() if link == "identity" else sm.families.links.Log()
    )
    r = sm.GLM(y, sm.add_constant(Xs, prepend=False), family=fam).fit(tol=1e-14, maxiter=500)
    m, fr = _fit("gaussian", link, as_tensor(Xs), as_tensor(y), solver="irls")
    res = glm_results(m, as_tensor(Xs), as_tensor(y), fit_result=fr, information="expected")
    np.testing.assert_allclose(res.params.numpy(), r.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=1e-6)
    for k in ("deviance", "scale"):
        assert getattr(res, k) == pytest.approx(float(getattr(r, k)), rel=1e-6), k
    # llf at the MLE of the dispersion, RSS / n, for every link (R's logLik; statsmodels'
    # llf for the identity link, at the Pearson scale for the log link)
    n = len(y)
    llf = float(r.family.loglike(y, r.mu, scale=np.sum((y - r.mu) ** 2) / n))
    assert res.llf == pytest.approx(llf, rel=1e-6)
    assert res.aic == pytest.approx(-2 * llf + 2 * Xs.shape[1] + 2, rel=1e-6)
    assert res.bic == pytest.approx(-2 * llf + (Xs.shape[1] + 1) * np.log(n), rel=1e-6)
    if link == "identity":
        for k in ("llf", "aic", "bic"):
            assert getattr(res, k) == pytest.approx(float(getattr(r, k)), rel=1e-6), k


@pytest.mark.parametrize("family,link", PAIRS)
def test_parameter_gradient_and_hessian_vs_autograd(family, link):
    x, y, w, s = _sim(family, link, n=60)
    m = GeneralizedLinearModel(3, family, link, l2=0.1)
    theta0 = torch.tensor(np.concatenate([s.coef * 0.8, [s.intercept * 0.9]]))
    with torch.no_grad():
        m.linear.weight.copy_(theta0[:3].view(1, 3))
        m.linear.bias.copy_(theta0[3:])
    y = m.family.check_target(y)

    def objective(theta):
        eta = x @ theta[:3] + theta[3]
        nll = m.family.nll(eta, y)
        data = nll.mean() if w is None else (w * nll).sum() / w.sum()
        return data + 0.05 * (theta[:3] ** 2).sum()

    theta = theta0.clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(objective(theta), theta)
    H_ref = autograd_hessian(objective, theta0)
    loss, g, H = hessian_and_gradient(m, TensorBatches(x, y, w, batch_size=25))
    assert float(loss) == pytest.approx(float(objective(theta0)), rel=1e-12)
    assert torch.allclose(g, g_ref, rtol=1e-10, atol=1e-12)
    assert torch.allclose(H, H_ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("family,link", PAIRS)
def test_newton_equals_irls_at_the_optimum_and_recovers_coefficients(family, link):
    x, y, w, s = _sim(family, link, n=1000)
    mn, rn = _fit(family, link, x, y, w, solver="newton")
    mi, ri = _fit(family, link, x, y, w, solver="irls")
    assert torch.allclose(_theta(mn), _theta(mi), rtol=1e-7, atol=1e-9)
    res = glm_results(mn, x, y, w, fit_result=rn)
    truth = torch.tensor(np.concatenate([s.coef, [s.intercept]]))
    z = (res.params - truth) / res.bse
    assert float(z.abs().max()) < 4.0  # within 4 standard errors
    if m_disp := mn.family.has_dispersion:
        assert res.scale == pytest.approx(s.dispersion, rel=0.15), m_disp


@pytest.mark.parametrize(
    "family,link", [("poisson", "log"), ("gamma", "log"), ("bernoulli", "probit"), ("gaussian", "identity")]
)
def test_frequency_weights_equal_duplicated_rows(family, link):
    x, y, _, _ = _sim(family, link, n=150, seed=3)
    fw = torch.arange(150) % 3  # 0, 1 or 2 copies
    rep = torch.repeat_interleave(torch.arange(150), fw)
    mw, rw = _fit(family, link, x, y, fw.double(), solver="newton")
    md, rd = _fit(family, link, x[rep], y[rep], solver="newton")
    assert torch.allclose(_theta(mw), _theta(md), rtol=1e-8, atol=1e-10)
    a = glm_results(mw, x, y, fw.double(), fit_result=rw)
    b = glm_results(md, x[rep], y[rep], fit_result=rd)
    assert torch.allclose(a.bse, b.bse, rtol=1e-8)
    for k in ("llf", "deviance", "null_deviance", "aic", "bic", "scale", "df_resid"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-8), k


def test_binomial_trials_equal_expanded_bernoulli_rows():
    x, y, w, _ = _sim("binomial", "logit", n=80, seed=5)
    k = (y * w).round().long()
    rows, labels = [], []
    for i in range(80):
        rows += [i] * int(w[i])
        labels += [1] * int(k[i]) + [0] * int(w[i] - k[i])
    mb, _ = _fit("binomial", "logit", x, y, w)
    me, _ = _fit("bernoulli", "logit", x[rows], torch.tensor(labels))
    assert torch.allclose(_theta(mb), _theta(me), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(
    "family,link",
    [
        ("poisson", "log"),
        ("gamma", "log"),
        ("binomial", "logit"),
        ("gaussian", "identity"),
        ("exponential", "log"),
    ],
)
def test_constant_offset_shifts_only_the_intercept(family, link):
    x, y, w, _ = _sim(family, link, n=300, seed=2)
    c = 0.7
    m0, _ = _fit(family, link, x, y, w)
    m1, _ = _fit(family, link, x, y, w, off=torch.full((300,), c))
    assert torch.allclose(m1.linear.weight, m0.linear.weight, rtol=1e-8, atol=1e-10)
    assert float(m1.linear.bias.detach()) == pytest.approx(
        float(m0.linear.bias.detach()) - c, rel=1e-8, abs=1e-10
    )


def test_poisson_exposure_offset_matches_statsmodels_exposure():
    import statsmodels.api as sm

    x, y, _, s = _sim("poisson", "log", n=300, seed=4)
    expo = torch.linspace(0.5, 3.0, 300)
    y = torch.poisson(
        torch.exp(x @ torch.tensor(s.coef) + s.intercept) * expo, generator=torch.Generator().manual_seed(0)
    )
    r = sm.GLM(
        y.numpy(),
        sm.add_constant(x.numpy(), prepend=False),
        family=sm.families.Poisson(),
        exposure=expo.numpy(),
    ).fit(tol=1e-14)
    res = fit_glm(GeneralizedLinearModel(3, "poisson"), x, y, offset=torch.log(expo), **TIGHT)
    np.testing.assert_allclose(res.params.numpy(), r.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=1e-6)
    assert res.null_deviance == pytest.approx(r.null_deviance, rel=1e-6)
    assert res.llnull == pytest.approx(r.llnull, rel=1e-6)


@pytest.mark.parametrize(
    "family,link",
    [
        ("poisson", "identity"),
        ("gamma", "inverse"),
        ("exponential", "negative_reciprocal"),
        ("binomial", "log"),
    ],
)
def test_link_leaving_the_mean_domain_is_handled_by_the_line_search(family, link):
    # From W = 0, b = 0 these links start outside the mean domain (mu <= 0, mu = inf,
    # mu = 1); full Newton steps would overshoot it too: the fit must stay finite.
    x, y, w, s = _sim(family, link, n=500, seed=1)
    m = GeneralizedLinearModel(3, family, link)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = m.fit(x, y, w, solver="newton", **TIGHT)
    assert r.converged, r.message
    assert all(bool(torch.isfinite(h["loss"] * torch.ones(1))) for h in r.history)
    assert bool(m.family.valid_eta(m(x)).all())
    ref, _ = _fit(family, link, x, y, w, solver="irls")
    assert torch.allclose(_theta(m), _theta(ref), rtol=1e-7, atol=1e-9)


def test_invalid_pairing_in_the_model_lists_valid_links():
    with pytest.raises(
        InputError, match=r"link for family 'poisson': expected one of \['log', 'identity', 'sqrt'\]"
    ):
        GeneralizedLinearModel(2, "poisson", link="logit")
    with pytest.raises(InputError, match="y: expected non-negative counts"):
        GeneralizedLinearModel(2, "poisson").fit(torch.zeros(2, 2), torch.tensor([1.0, -1.0]))


@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg"])
def test_first_order_solvers_reach_the_newton_optimum(solver):
    x, y, _, _ = _sim("poisson", "log", n=300, seed=6)
    mn, _ = _fit("poisson", "log", x, y, solver="newton")
    m = GeneralizedLinearModel(3, "poisson")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(x, y, solver=solver, max_iter=500, tol=1e-16)
    assert torch.allclose(_theta(m), _theta(mn), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family,link", PAIRS)
def test_confidence_interval_coverage_over_seeds(family, link):
    """95% Wald intervals cover the true coefficients about 95% of the time."""
    hits, total = 0, 0
    for seed in range(100):
        x, y, w, s = _sim(family, link, n=300, d=2, seed=100 + seed)
        res = fit_glm(GeneralizedLinearModel(2, family, link), x, y, w, solver="newton")
        truth = torch.tensor(np.concatenate([s.coef, [s.intercept]]))
        inside = (res.conf_int[:, 0] <= truth) & (truth <= res.conf_int[:, 1])
        hits += int(inside.sum())
        total += inside.numel()
    coverage = hits / total
    # 300 intervals: a binomial(300, 0.95) proportion lies in [0.91, 0.98] with prob. > 0.99
    assert 0.91 <= coverage <= 0.985, coverage


def test_separation_is_reported_with_the_diverging_coefficient():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 2, generator=g)
    y = (x[:, 0] > 0).long()  # x0 separates the classes perfectly
    m = GeneralizedLinearModel(2, "bernoulli")
    with pytest.warns(Warning, match="separation"):
        fr = m.fit(x, y, solver="newton")
    res = glm_results(m, x, y, fit_result=fr, feature_names=["a", "b"])
    assert res.diverging == ["a"] and not res.converged
    assert "diverge" in res.summary() and res.to_dict()["diverging"] == ["a"]
    # without the solver's report, the saturated fitted probabilities and the flat
    # direction of the information give the same answer
    assert glm_results(m, x, y, feature_names=["a", "b"]).diverging == ["a"]
    # with a penalty the MAP estimate exists: nothing diverges
    res2 = fit_glm(GeneralizedLinearModel(2, "bernoulli", l2=1e-2), x, y, solver="newton")
    assert res2.converged and res2.diverging == []


@pytest.mark.parametrize("l2", [0.0, 1e-3])
def test_softmax_fit_contrasts_match_statsmodels_mnlogit(l2):
    import statsmodels.api as sm

    d = sm.datasets.anes96.load_pandas()
    X = d.exog[["logpopul", "selfLR", "age", "educ", "income"]].values
    X = (X - X.mean(0)) / X.std(0)
    y = np.minimum(d.endog.values.astype(int), 2)
    exog = sm.add_constant(X, prepend=False)
    if l2 == 0:
        r = sm.MNLogit(y, exog).fit(method="newton", tol=1e-12, disp=0)
        ref = r.params.T.ravel()
    m = GeneralizedLinearModel(5, "categorical", n_classes=3, l2=l2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        fr = m.fit(as_tensor(X), torch.tensor(y), solver="newton", **TIGHT)
    res = glm_results(m, as_tensor(X), torch.tensor(y), fit_result=fr)
    if l2 == 0:
        np.testing.assert_allclose(res.params.numpy(), ref, rtol=1e-6)
        np.testing.assert_allclose(res.bse.numpy(), r.bse.T.ravel(), rtol=1e-6)
        assert res.llf == pytest.approx(r.llf, rel=1e-10)
    else:
        # the MAP contrasts' Laplace covariance J (S H)^+ J^T from the full Hessian (the
        # unpenalized bias keeps its shift direction, so H is singular: any g-inverse)
        _, _, H = hessian_and_gradient(m, TensorBatches(as_tensor(X), torch.tensor(y)))
        cov = torch.linalg.pinv(len(y) * H, hermitian=True, rtol=1e-10)
        J = torch.zeros(12, 18)
        for k in (1, 2):
            for j in range(6):
                a, b = (k * 5 + j, j) if j < 5 else (15 + k, 15)
                J[(k - 1) * 6 + j, a], J[(k - 1) * 6 + j, b] = 1.0, -1.0
        assert torch.allclose(res.cov_params, J @ cov @ J.T, rtol=1e-8, atol=1e-14)
        assert "Laplace" in res.summary()


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_newton_fit_standard_errors_match_statsmodels_logit_probit(link):
    import statsmodels.api as sm

    d = sm.datasets.spector.load_pandas()
    X, y = d.exog.values, d.endog.values
    cls = sm.Logit if link == "logit" else sm.Probit
    r = cls(y, sm.add_constant(X, prepend=False)).fit(method="newton", tol=1e-12, disp=0)
    res = fit_glm(
        GeneralizedLinearModel(3, "bernoulli", link),
        as_tensor(X),
        torch.tensor(y).long(),
        solver="newton",
        **TIGHT,
    )
    assert res.information == "observed"
    np.testing.assert_allclose(res.params.numpy(), r.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=1e-6)
    assert res.llf == pytest.approx(r.llf, rel=1e-10) and res.aic == pytest.approx(r.aic, rel=1e-10)
