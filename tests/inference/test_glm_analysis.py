"""The statistician's GLM: robust covariances, predictions with intervals,
residuals, leverage and Cook's distance, likelihood-ratio and Wald tests, confidence
intervals and the coefficient DataFrame, each against statsmodels (or R's definition
computed from statsmodels' pieces where statsmodels differs) for every (family, link).

The model is set to statsmodels' own estimate, so these tests check the inference
independently of any solver (as ``test_inference.py``).
"""

import warnings

import numpy as np
import pytest
import torch
from scipy import stats

sm = pytest.importorskip("statsmodels.api")

from torchglm import GeneralizedLinearModel, InputError  # noqa: E402
from torchglm.data.batches import TensorBatches  # noqa: E402
from torchglm.data.simulate import simulate_glm  # noqa: E402
from torchglm.families import FAMILIES  # noqa: E402
from torchglm.inference import fit_glm, glm_results, lr_test  # noqa: E402
from torchglm.solvers.layout import set_flat_parameters  # noqa: E402
import data_util  # noqa: E402

L = sm.families.links
#: The shared statsmodels links, but -1/mu as statsmodels' 1/mu with every coefficient
#: negated (covariances unchanged): the reference fits use statsmodels' own link there.
SM_LINKS = {**data_util.SM_LINKS, "negative_reciprocal": L.InversePower}
SM_FAMILIES = {
    "gaussian": sm.families.Gaussian,
    "bernoulli": sm.families.Binomial,
    "binomial": sm.families.Binomial,
    "poisson": sm.families.Poisson,
    "gamma": sm.families.Gamma,
    "exponential": sm.families.Gamma,  # at scale 1
}
PAIRS = [(f, link) for f, cls in FAMILIES.items() if not cls.multi_output for link in cls.allowed_links]
N = 300
GROUPS = np.arange(N) % 17


class Case:
    """Data simulated from (family, link), statsmodels' fit, and our model at its estimate."""

    def __init__(self, family, link, n_features=2, seed=1, columns=None):
        s = simulate_glm(family, link, n_samples=N, n_features=3, seed=seed)
        cols = list(range(n_features)) if columns is None else columns
        self.family, self.link = family, link
        self.x, self.y, self.w = s.x[:, cols], s.y, s.weight
        endog = self.y if self.w is None else np.column_stack([self.y * self.w, (1 - self.y) * self.w])
        self.exog = sm.add_constant(self.x, prepend=False)  # intercept last, like the model
        self.fit_kw = {"scale": 1.0} if family == "exponential" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # statsmodels' DomainWarning for Gamma/identity...
            self.sm_model = sm.GLM(endog, self.exog, family=SM_FAMILIES[family](SM_LINKS[link]()))
        self.r = self.sm_fit()
        self.sign = -1.0 if link == "negative_reciprocal" else 1.0
        self.model = GeneralizedLinearModel(len(cols), family, link, dtype=torch.float64)
        set_flat_parameters(self.model, torch.tensor(self.sign * self.r.params))
        self.xt = torch.tensor(self.x)
        self.yt = torch.tensor(self.y).long() if family == "bernoulli" else torch.tensor(self.y)
        self.wt = None if self.w is None else torch.tensor(self.w)

    def sm_fit(self, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = self.sm_model.fit(tol=1e-13, maxiter=500, **self.fit_kw, **kw)
        assert r.converged
        return r

    def results(self, **kw):
        return glm_results(self.model, self.xt, self.yt, self.wt, **kw)


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{f}-{lk}" for f, lk in PAIRS])
def case(request):
    return Case(*request.param)


def _close(a, b, rtol=1e-6, atol=0.0):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# -- robust covariances --------------------------------------------------------------


def test_hc0_and_cluster_match_statsmodels(case):
    # statsmodels' sandwich bread is its observed Hessian (GLM.hessian's default)
    for cov_type, kw in (("HC0", {}), ("cluster", {"cov_kwds": {"groups": GROUPS}})):
        ref = case.sm_fit(cov_type=cov_type, **kw)
        groups = GROUPS if cov_type == "cluster" else None
        res = case.results(cov_type=cov_type, groups=groups, information="observed")
        _close(res.cov_params.numpy(), ref.cov_params(), atol=1e-14 * np.abs(ref.cov_params()).max())
        _close(res.bse.numpy(), ref.bse)
        _close(res.pvalues.numpy(), ref.pvalues, rtol=1e-5, atol=1e-300)
        ci = np.sort(case.sign * ref.conf_int(), axis=1)  # negated coefficients: bounds swap
        _close(res.conf_int.numpy(), ci, atol=1e-12)
        assert res.cov_type == cov_type and cov_type in res.summary()
        assert res.to_dict()["cov_type"] == cov_type


def _vcovhc(case, hc):
    """R's ``sandwich::vcovHC(glm, type=hc)`` from statsmodels' IRLS pieces: bread
    ``(X^T W X)^{-1}``, scores ``w_i r_i x_i`` (working residuals ``r_i``, IRLS weights
    ``w_i`` with the binomial's trials), hat values of the expected information."""
    r, X = case.r, case.exog
    mu = r.mu
    fam = r.family
    a = 1.0 if case.w is None else case.w
    w = a / (fam.link.deriv(mu) ** 2 * fam.variance(mu))
    resid_working = (case.y - mu) * fam.link.deriv(mu)  # R's working residual (proportions)
    bread = np.linalg.inv(X.T @ (w[:, None] * X))
    h = w * np.einsum("ij,jk,ik->i", X, bread, X)
    u = (w * resid_working)[:, None] * X
    n, k = X.shape
    omega = {"HC0": 1.0, "HC1": n / (n - k), "HC2": 1 / (1 - h), "HC3": 1 / (1 - h) ** 2}[hc]
    meat = (u * omega if np.ndim(omega) == 0 else u * omega[:, None]).T @ u
    return bread @ meat @ bread


def test_cluster_t_tests_use_groups_minus_one_degrees_of_freedom():
    c = Case("gamma", "log")
    ref = c.sm_fit(cov_type="cluster", cov_kwds={"groups": GROUPS}, use_t=True)
    res = c.results(cov_type="cluster", groups=GROUPS, information="observed", use_t=True)
    assert res.n_groups == 17 and res.df_inference == 16
    _close(res.pvalues.numpy(), ref.pvalues, rtol=1e-6)
    _close(res.conf_int.numpy(), ref.conf_int(), rtol=1e-6)
    R = np.eye(3)[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wt = ref.wald_test(R, scalar=True)
    ours = res.wald_test(R)
    assert ours.distribution == "F" and ours.df_denom == float(wt.df_denom)
    assert ours.pvalue == pytest.approx(float(wt.pvalue), rel=1e-6)
    assert "cluster" in res.summary() and "17 clusters" in res.summary()


@pytest.mark.parametrize("hc", ["HC0", "HC1", "HC2", "HC3"])
def test_hc_types_match_sandwich_vcovhc(case, hc):
    # statsmodels' GLM gives HC0 for every HC type; R's sandwich is the reference here
    res = case.results(cov_type=hc, information="expected")
    ref = _vcovhc(case, hc)
    _close(res.cov_params.numpy(), ref, atol=1e-14 * np.abs(ref).max())


@pytest.mark.parametrize("hc", ["HC1", "HC2", "HC3"])
def test_gaussian_identity_hc_types_match_statsmodels_ols(hc):
    c = Case("gaussian", "identity")
    ols = sm.OLS(c.y, c.exog).fit(cov_type=hc)
    res = c.results(cov_type=hc)
    _close(res.bse.numpy(), ols.bse)


@pytest.mark.parametrize("cov_type", ["HC2", "cluster"])
def test_robust_covariance_with_frequency_weights_equals_duplicated_rows(cov_type):
    c = Case("poisson", "log")
    fw = torch.tensor(np.arange(N) % 3 + 1.0)
    rep = torch.repeat_interleave(torch.arange(N), fw.long())
    g = torch.tensor(GROUPS)
    kw = {"cov_type": cov_type, "groups": g if cov_type == "cluster" else None}
    a = glm_results(c.model, c.xt, c.yt, fw, **kw)
    kw["groups"] = None if cov_type != "cluster" else g[rep]
    b = glm_results(c.model, c.xt[rep], c.yt[rep], **kw)
    _close(a.cov_params.numpy(), b.cov_params.numpy(), rtol=1e-10)


def test_robust_covariance_is_one_pass_over_batches():
    c = Case("gamma", "log")
    whole = c.results(cov_type="cluster", groups=GROUPS)
    parts = glm_results(
        c.model, batches=TensorBatches(c.xt, c.yt, batch_size=37), cov_type="cluster", groups=GROUPS
    )
    _close(parts.cov_params.numpy(), whole.cov_params.numpy(), rtol=1e-12)


def test_shuffled_batches_are_refused_where_rows_are_matched():
    c = Case("poisson", "log")
    shuffled = TensorBatches(c.xt, c.yt, batch_size=50, shuffle=True)
    with pytest.raises(InputError, match="shuffle"):
        glm_results(c.model, batches=shuffled, cov_type="cluster", groups=GROUPS)
    res = glm_results(c.model, batches=shuffled, cov_type="HC0")  # sums: order-free
    _close(res.cov_params.numpy(), c.results(cov_type="HC0").cov_params.numpy(), rtol=1e-12)
    with pytest.raises(InputError, match="shuffle"):
        res.get_influence()


def test_cov_type_and_groups_are_checked():
    c = Case("poisson", "log")
    with pytest.raises(InputError, match="cov_type"):
        c.results(cov_type="HC4")
    with pytest.raises(InputError, match="groups"):
        c.results(cov_type="cluster")
    with pytest.raises(InputError, match="groups"):
        c.results(cov_type="HC0", groups=GROUPS)
    with pytest.raises(InputError, match="groups"):
        c.results(cov_type="cluster", groups=GROUPS[:-1])
    with pytest.raises(InputError, match="cov_type"):
        fit_glm(GeneralizedLinearModel(2, "poisson"), c.xt, c.yt, cov_type="hc1")
    unfitted = GeneralizedLinearModel(2, "poisson")
    with pytest.raises(InputError, match="groups"):  # before the fit
        fit_glm(unfitted, c.xt, c.yt, cov_type="cluster", groups=GROUPS[:10])
    assert not unfitted.is_fitted
    x = torch.randn(60, 2, dtype=torch.float64)
    y = torch.arange(60) % 3
    with pytest.raises(InputError, match="cov_type"):
        fit_glm(GeneralizedLinearModel(2, "categorical", n_classes=3), x, y, cov_type="HC0")
    softmax = fit_glm(GeneralizedLinearModel(2, "categorical", n_classes=3), x, y)
    with pytest.raises(InputError, match="family"):
        softmax.get_influence()
    with pytest.raises(InputError, match="family"):
        softmax.get_prediction(x)


# -- predictions -------------------------------------------------------------------


def test_predictions_match_statsmodels_get_prediction(case):
    res = case.results(information="expected")  # statsmodels' IRLS covariance
    new = case.x[:7] * 0.9
    offset = np.linspace(-0.01, 0.01, 7) if case.link != "identity" else None
    ref_exog = sm.add_constant(new, prepend=False, has_constant="add")
    for which in ("mean", "linear"):
        ours = res.get_prediction(new, offset=offset, which=which).summary_frame(alpha=0.1)
        # statsmodels' default call has the mean's columns; which="linear" the generic ones
        kw = {} if which == "mean" else {"which": which}
        sm_offset = None if offset is None else case.sign * offset
        ref = case.r.get_prediction(ref_exog, offset=sm_offset, **kw).summary_frame(alpha=0.1)
        assert list(ours.columns) == list(ref.columns)
        ref = ref.to_numpy().copy()
        if which == "linear":
            ref[:, [0, 2, 3]] *= case.sign
        # statsmodels leaves the bounds swapped for a decreasing link or sign
        ref[:, 2:] = np.sort(ref[:, 2:], axis=1)
        _close(ours.to_numpy(), ref, rtol=1e-6)


def test_prediction_errors_are_input_errors():
    c = Case("poisson", "log")
    res = c.results()
    with pytest.raises(InputError, match="x"):
        res.get_prediction(np.ones((3, 5)))
    with pytest.raises(InputError, match="which"):
        res.get_prediction(c.x[:3], which="response")


# -- residuals and influence ---------------------------------------------------------


def test_residuals_and_influence_match_statsmodels(case):
    res = case.results(information="expected")
    r = case.r
    trials = 1.0 if case.w is None else case.w
    # statsmodels scales the binomial's response residual by the trials (and its working
    # residual by their square); R's residuals.glm, as ours, are on the proportions' scale
    _close(res.resid_response.numpy(), r.resid_response / trials, rtol=1e-8, atol=1e-12)
    working = case.sign * (case.y - r.mu) * r.family.link.deriv(r.mu)  # g'(mu) of -1/mu
    _close(res.resid_working.numpy(), working, rtol=1e-8, atol=1e-12)
    _close(res.resid_pearson.numpy(), r.resid_pearson, rtol=1e-8, atol=1e-12)
    _close(res.resid_deviance.numpy(), r.resid_deviance, rtol=1e-6, atol=1e-9)
    infl = r.get_influence(observed=False)
    ours = res.get_influence()
    _close(ours.hat_matrix_diag.numpy(), infl.hat_matrix_diag, rtol=1e-8)
    _close(ours.cooks_distance.numpy(), infl.cooks_distance[0], rtol=1e-6, atol=1e-14)
    assert float(ours.hat_matrix_diag.sum()) == pytest.approx(3.0, rel=1e-10)  # the rank
    if case.w is None:  # unweighted: the squared deviance residuals sum to the deviance
        assert float((res.resid_deviance**2).sum()) == pytest.approx(res.deviance, rel=1e-10)


def test_influence_over_batches_equals_in_memory():
    c = Case("binomial", "probit")
    a = c.results().get_influence()
    b = glm_results(c.model, batches=TensorBatches(c.xt, c.yt, c.wt, batch_size=41)).get_influence()
    for u, v in zip(a, b):
        _close(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-15)


# -- tests between and within models --------------------------------------------------


def test_lr_test_matches_analysis_of_deviance(case):
    small = Case(case.family, case.link, n_features=1)
    big = case
    rs, rb = small.results(), big.results()
    # R's anova(small, big, test="Chisq"): the deviance difference, scaled by the bigger
    # model's dispersion where it is estimated; from statsmodels' deviances and scale
    dev = small.r.deviance - big.r.deviance
    scale = big.r.scale
    out = lr_test(rs, rb)
    assert out.df_diff == 1 and out.deviance_diff == pytest.approx(dev, rel=1e-6)
    assert out.pvalue == pytest.approx(stats.chi2.sf(dev / scale, 1), rel=1e-5)
    if scale == 1.0:  # the likelihood ratio itself
        assert out.statistic == pytest.approx(2 * (big.r.llf - small.r.llf), rel=1e-6)
    f = lr_test(rs, rb, test="F")
    assert f.pvalue == pytest.approx(stats.f.sf(dev / scale, 1, big.r.df_resid), rel=1e-5)


def test_lr_f_test_of_gaussian_identity_is_statsmodels_compare_f_test():
    small, big = Case("gaussian", "identity", n_features=1), Case("gaussian", "identity")
    F, p, df = sm.OLS(big.y, big.exog).fit().compare_f_test(sm.OLS(small.y, small.exog).fit())
    out = lr_test(small.results(), big.results(), test="F")
    assert out.statistic == pytest.approx(F, rel=1e-8) and out.pvalue == pytest.approx(p, rel=1e-8)
    assert out.df_diff == df


def test_lr_test_checks_its_arguments():
    small, big = Case("poisson", "log", n_features=1), Case("poisson", "log")
    with pytest.raises(InputError, match="big"):
        lr_test(big.results(), small.results())
    with pytest.raises(InputError, match="big"):
        lr_test(small.results(), Case("poisson", "sqrt").results())
    with pytest.raises(InputError, match="test"):
        lr_test(small.results(), big.results(), test="Chisq")


@pytest.mark.parametrize("cov_type", ["nonrobust", "HC0"])
def test_wald_test_matches_statsmodels(case, cov_type):
    ref_fit = case.sm_fit(cov_type=cov_type)
    res = case.results(cov_type=cov_type, information="observed" if cov_type == "HC0" else "expected")
    R = np.array([[1.0, 0.0, 0.0], [1.0, -1.0, 0.0]])
    q = np.array([0.1, -0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ref_fit.wald_test((R, case.sign * q), scalar=True, use_f=False)
        ref_f = ref_fit.wald_test((R, case.sign * q), scalar=True, use_f=True)
    ours = res.wald_test(R, q)
    assert ours.statistic == pytest.approx(float(ref.statistic), rel=1e-6)
    assert ours.pvalue == pytest.approx(float(ref.pvalue), rel=1e-5, abs=1e-300)
    assert ours.df_num == 2 and ours.distribution == "chi2"
    f = res.wald_test(R, q, use_f=True)
    assert f.statistic == pytest.approx(float(ref_f.statistic), rel=1e-6)
    assert f.pvalue == pytest.approx(float(ref_f.pvalue), rel=1e-5, abs=1e-300)


def test_wald_test_rejects_dependent_restrictions():
    res = Case("poisson", "log").results()
    with pytest.raises(InputError, match="R"):
        res.wald_test([[1.0, 0, 0], [2.0, 0, 0]])
    with pytest.raises(InputError, match="R"):
        res.wald_test([[1.0, 0]])


@pytest.mark.parametrize("use_t", [False, True])
def test_confint_and_summary_frame_match_statsmodels(use_t):
    c = Case("gamma", "log")
    r = c.sm_fit(use_t=use_t)
    res = c.results(information="expected", use_t=use_t)
    _close(res.confint(0.1).numpy(), r.conf_int(0.1))
    _close(res.confint().numpy(), res.conf_int.numpy(), rtol=1e-14)
    frame = res.summary_frame(alpha=0.1)
    stat = "t" if use_t else "z"
    assert list(frame.columns) == ["coef", "std err", stat, f"P>|{stat}|", "[0.05", "0.95]"]
    assert list(frame.index) == res.names
    _close(frame.to_numpy(), np.column_stack([r.params, r.bse, r.tvalues, r.pvalues, r.conf_int(0.1)]))


def test_results_keep_the_estimate_they_were_computed_at():
    c = Case("gamma", "inverse")
    res = c.results()
    before = res.get_prediction(c.x[:4]).summary_frame()
    set_flat_parameters(c.model, torch.tensor(c.r.params) * 0.5)  # e.g. a later refit
    after = res.get_prediction(c.x[:4]).summary_frame()
    _close(after.to_numpy(), before.to_numpy(), rtol=1e-15)
    _close(res.resid_response.numpy(), c.y - c.r.mu, rtol=1e-8, atol=1e-12)
