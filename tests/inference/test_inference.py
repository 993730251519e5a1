"""GLM inference against statsmodels on datasets that ship with statsmodels.

The model is set to statsmodels' own estimate, so these tests check the inference
(covariance, standard errors, log-likelihood, deviances, AIC/BIC, dispersion)
independently of any solver; ``test_glm.py`` checks the fits themselves.
"""

import json

import numpy as np
import pytest
import statsmodels.api as sm
import torch

from data_util import CASES, as_tensor, statsmodels_dataset, statsmodels_fit
from torchglm import GeneralizedLinearModel, InputError
from torchglm.data.batches import TensorBatches
from torchglm.inference import GLMResults, fit_glm, glm_results, identifiability
from torchglm.solvers.layout import set_flat_parameters
from torchglm.solvers.pass_sums import hessian_and_gradient

SM = sm.families


def _model_at(params, n_features, family, link, l2=0.0):
    m = GeneralizedLinearModel(n_features, family, link, l2=l2)
    set_flat_parameters(m, torch.tensor(np.asarray(params)))
    return m


def _gaussian_mle_llf(r):
    """statsmodels' Gaussian log-likelihood at the MLE of the dispersion, RSS / n (R's
    ``logLik``, our ``llf`` for every link), with its AIC and BIC."""
    n = r.nobs
    llf = float(r.family.loglike(r.model.endog, r.mu, scale=np.sum((r.model.endog - r.mu) ** 2) / n))
    k = r.df_model + 1
    return {"llf": llf, "aic": -2 * llf + 2 * k, "bic": -2 * llf + k * np.log(n)}


def _compare(res: GLMResults, r, rel=1e-6):
    np.testing.assert_allclose(res.params.numpy(), r.params, rtol=rel)
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=rel)
    np.testing.assert_allclose(res.pvalues.numpy(), r.pvalues, rtol=1e-5, atol=1e-300)
    np.testing.assert_allclose(res.conf_int.numpy(), r.conf_int(), rtol=rel)
    for k in (
        "llf",
        "llnull",
        "deviance",
        "null_deviance",
        "pearson_chi2",
        "aic",
        "bic",
        "scale",
        "df_resid",
        "df_model",
    ):
        ref = getattr(r, k)
        if res.family == "gaussian" and k in ("llf", "aic", "bic"):
            ref = _gaussian_mle_llf(r)[k]  # statsmodels' own llf only for the identity link
        assert getattr(res, k) == pytest.approx(float(ref), rel=rel), k
    assert res.nobs == r.model.wnobs  # the sum of frequency weights (rows, for the binomial)


@pytest.mark.parametrize(
    "dataset,family,link,smfam,fit_kw", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES]
)
def test_inference_matches_statsmodels_glm_at_its_estimate(dataset, family, link, smfam, fit_kw):
    X, y, w, off = statsmodels_dataset(dataset)
    r = statsmodels_fit(dataset, smfam, fit_kw)
    m = _model_at(r.params, X.shape[1], family, link)
    # statsmodels' IRLS covariance is the expected information
    res = glm_results(m, as_tensor(X), as_tensor(y), as_tensor(w), as_tensor(off), information="expected")
    _compare(res, r)
    assert res.unidentified == [] and res.diverging == []


@pytest.mark.parametrize("model_cls,link", [(sm.Logit, "logit"), (sm.Probit, "probit")])
def test_observed_information_matches_statsmodels_logit_probit(model_cls, link):
    d = sm.datasets.spector.load_pandas()
    X, y = d.exog.values, d.endog.values
    r = model_cls(y, sm.add_constant(X, prepend=False)).fit(method="newton", tol=1e-12, disp=0)
    m = _model_at(r.params, X.shape[1], "bernoulli", link)
    res = glm_results(m, as_tensor(X), as_tensor(y), information="observed")
    np.testing.assert_allclose(res.bse.numpy(), r.bse, rtol=1e-6)
    assert res.llf == pytest.approx(r.llf, rel=1e-10)
    assert res.llnull == pytest.approx(r.llnull, rel=1e-10)
    if link == "probit":  # non-canonical: observed and expected information differ
        exp = glm_results(m, as_tensor(X), as_tensor(y), information="expected")
        assert not np.allclose(exp.bse.numpy(), res.bse.numpy(), rtol=1e-3)


def test_frequency_weights_match_statsmodels_freq_weights():
    X, y, _, _ = statsmodels_dataset("cpunish")
    fw = np.arange(len(y)) % 3 + 1.0
    r = statsmodels_fit("cpunish", SM.Poisson(), {}, freq_weights=fw)
    m = _model_at(r.params, X.shape[1], "poisson", "log")
    res = glm_results(m, as_tensor(X), as_tensor(y), as_tensor(fw), information="expected")
    _compare(res, r)
    # ... and equal the inference on the duplicated rows
    rep = np.repeat(np.arange(len(y)), fw.astype(int))
    dup = glm_results(m, as_tensor(X[rep]), as_tensor(y[rep]), information="expected")
    np.testing.assert_allclose(dup.bse.numpy(), res.bse.numpy(), rtol=1e-12)
    for k in ("llf", "deviance", "aic", "bic", "df_resid"):
        assert getattr(dup, k) == pytest.approx(getattr(res, k), rel=1e-12)


def test_collinear_column_is_reported_unidentified():
    X, y, _, _ = statsmodels_dataset("cpunish")
    r = statsmodels_fit("cpunish", SM.Poisson(), {})
    X2 = np.column_stack([X, 2 * X[:, 1]])  # a copy of column 1, scaled
    params = np.concatenate([r.params[:-1], [0.0], r.params[-1:]])
    m = _model_at(params, X2.shape[1], "poisson", "log")
    res = glm_results(m, as_tensor(X2), as_tensor(y), feature_names=[f"c{j}" for j in range(X2.shape[1])])
    assert res.unidentified == ["c1", "c6"]
    assert np.isnan(res.bse[1]) and np.isnan(res.bse[6])
    # the estimable coefficients keep statsmodels' standard errors
    keep = [0, 2, 3, 4, 5, 7]
    np.testing.assert_allclose(res.bse.numpy()[keep], r.bse[[0, 2, 3, 4, 5, 6]], rtol=1e-6)
    assert res.df_resid == pytest.approx(r.df_resid)  # rank 7, as without the copy
    assert "not identified" in res.summary()


def test_identifiability_ignores_column_scale():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=g) * torch.tensor([1e6, 1.0, 1e-6])
    ident = identifiability(X.T @ X)
    assert ident.rank == 3 and not bool(ident.unidentified().any())
    assert torch.allclose(ident.inverse, torch.linalg.inv(X.T @ X), rtol=1e-8, atol=0)


def test_penalized_fit_says_laplace_map_and_covariance_includes_prior():
    X, y, _, _ = statsmodels_dataset("cpunish")
    r = statsmodels_fit("cpunish", SM.Poisson(), {})
    m = _model_at(r.params, X.shape[1], "poisson", "log", l2=0.05)
    res = glm_results(m, as_tensor(X), as_tensor(y))
    assert "Laplace" in res.summary() and res.to_dict()["covariance"].startswith("Laplace")
    # precision = information + n * l2 on the weights (not the intercept)
    m0 = _model_at(r.params, X.shape[1], "poisson", "log")
    res0 = glm_results(m0, as_tensor(X), as_tensor(y))
    prec = torch.linalg.inv(res0.cov_params) + len(y) * 0.05 * torch.diag(torch.tensor([1.0] * 6 + [0.0]))
    assert torch.allclose(res.cov_params, torch.linalg.inv(prec), rtol=1e-8)


def test_to_dict_is_json_and_summary_lists_every_coefficient():
    X, y, w, _ = statsmodels_dataset("star98")
    r = statsmodels_fit("star98", SM.Binomial(), {})
    m = _model_at(r.params, X.shape[1], "binomial", "logit")
    names = list(sm.datasets.star98.load_pandas().exog.columns)
    res = glm_results(m, as_tensor(X), as_tensor(y), as_tensor(w), feature_names=names)
    d = json.loads(res.to_json())
    assert set(d["coefficients"]) == set(names) | {"intercept"}
    assert d["coefficients"]["LOWINC"]["std_err"] == pytest.approx(r.bse[0], rel=1e-6)
    text = res.summary()
    for n in names + ["intercept", "Deviance", "AIC", "BIC"]:
        assert n in text


def test_use_t_gives_student_t_intervals():
    X, y, _, _ = statsmodels_dataset("longley")
    r = statsmodels_fit("longley", SM.Gaussian(), {"use_t": True})
    m = _model_at(r.params, X.shape[1], "gaussian", "identity")
    res = glm_results(m, as_tensor(X), as_tensor(y), use_t=True, information="expected")
    np.testing.assert_allclose(res.pvalues.numpy(), r.pvalues, rtol=1e-6)
    np.testing.assert_allclose(res.conf_int.numpy(), r.conf_int(), rtol=1e-6)


def test_bad_arguments():
    m = GeneralizedLinearModel(2, "poisson")
    x, y = torch.zeros(3, 2), torch.ones(3)
    with pytest.raises(InputError, match="information: expected 'observed' or 'expected'"):
        glm_results(m, x, y, information="fisher")
    with pytest.raises(InputError, match="x/batches: expected either x and y or batches"):
        glm_results(m)
    with pytest.raises(InputError, match="offset: expected"):
        glm_results(
            GeneralizedLinearModel(2, "categorical", n_classes=3),
            x,
            torch.tensor([0, 1, 2]),
            offset=torch.zeros(4),
        )


def test_softmax_contrasts_match_statsmodels_mnlogit():
    d = sm.datasets.anes96.load_pandas()
    X = d.exog[["logpopul", "selfLR", "age", "educ", "income"]].values
    y = d.endog.values.astype(int)
    y = np.minimum(y, 2)  # three ordered groups keep every class well populated
    r = sm.MNLogit(y, sm.add_constant(X, prepend=False)).fit(method="newton", tol=1e-12, disp=0)
    K, dd = 3, X.shape[1]
    # a symmetric parametrization with the same contrasts: w_0 = 0, w_k = MNLogit's column k-1
    W = np.zeros((K, dd))
    b = np.zeros(K)
    W[1:] = r.params[:dd].T
    b[1:] = r.params[dd]
    m = GeneralizedLinearModel(dd, "categorical", n_classes=K)
    set_flat_parameters(m, torch.tensor(np.concatenate([W.ravel(), b])))
    res = glm_results(m, as_tensor(X), torch.tensor(y))
    ref_params = r.params.T.ravel()  # class 1 (features..., const), then class 2
    np.testing.assert_allclose(res.params.numpy(), ref_params, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.bse.numpy(), r.bse.T.ravel(), rtol=1e-6)
    for k in ("llf", "llnull", "aic", "bic", "df_model", "df_resid"):
        assert getattr(res, k) == pytest.approx(float(getattr(r, k)), rel=1e-8), k
    assert res.names[0] == "1:x0" and res.names[dd] == "1:intercept" and "contrasts" in res.summary()


def _anes3():
    d = sm.datasets.anes96.load_pandas()
    X = d.exog[["logpopul", "selfLR", "age", "educ", "income"]].values
    return X, np.minimum(d.endog.values.astype(int), 2)


@pytest.mark.parametrize("solver", ["newton", "irls", "lbfgs"])
def test_softmax_offset_is_added_to_every_class(solver):
    """A softmax offset is the scalar families' offset: one value per sample added to
    eta, here to every class's eta. softmax(eta + o 1) = softmax(eta), so the fit and
    every reported number equal those without the offset, hence statsmodels' MNLogit
    on the same data (MNLogit accepts ``offset=`` but its likelihood does not use it, so
    it is no reference for offsets; the invariance is). A note says so. Before, the
    solvers' pass broadcast the (n,) offset against the (n, K) eta and the results
    refused offsets."""
    X, y = _anes3()
    g = np.random.default_rng(0)
    off = 3.0 * g.standard_normal(len(y))
    r = sm.MNLogit(y, sm.add_constant(X, prepend=False)).fit(method="newton", tol=1e-12, disp=0)
    res = fit_glm(
        GeneralizedLinearModel(X.shape[1], "categorical", n_classes=3),
        as_tensor(X),
        torch.tensor(y),
        offset=as_tensor(off),
        solver=solver,
        tol=1e-12,
    )
    base = fit_glm(
        GeneralizedLinearModel(X.shape[1], "categorical", n_classes=3),
        as_tensor(X),
        torch.tensor(y),
        solver=solver,
        tol=1e-12,
    )
    # against MNLogit: to the solvers' accuracy (their stop is on the decrement of the
    # mean NLL, lambda^2 <= 1e-12: parameters within ~1e-5 of the optimum here)
    np.testing.assert_allclose(res.params.numpy(), r.params.T.ravel(), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(res.bse.numpy(), r.bse.T.ravel(), rtol=1e-5)
    for k in ("llf", "llnull", "aic", "bic", "df_model", "df_resid"):
        assert getattr(res, k) == pytest.approx(float(getattr(r, k)), rel=1e-9), k
        assert getattr(res, k) == pytest.approx(getattr(base, k), rel=1e-12), k
    # against the same solver without the offset: the same iterates up to rounding
    np.testing.assert_allclose(res.params.numpy(), base.params.numpy(), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(res.bse.numpy(), base.bse.numpy(), rtol=1e-8)
    assert "every class's eta" in res.summary() and "every class's eta" not in base.summary()
    # the same through batches (the data module's route), offsets sliced with the rows
    m = GeneralizedLinearModel(X.shape[1], "categorical", n_classes=3)
    m.fit(as_tensor(X), torch.tensor(y), offset=as_tensor(off), solver="newton", tol=1e-12)
    batched = glm_results(
        m, batches=TensorBatches(as_tensor(X), torch.tensor(y), offset=as_tensor(off), batch_size=97)
    )
    np.testing.assert_allclose(batched.bse.numpy(), r.bse.T.ravel(), rtol=1e-5)
    assert batched.llf == pytest.approx(float(r.llf), rel=1e-9)


def test_softmax_offset_against_the_logistic_offset():
    """K = 2: softmax eta = (eta_0, eta_1) is logistic regression on eta_1 - eta_0. The
    logistic offset o is the class-specific offset (0, o); the softmax offset (o, o)
    is the logistic offset o - o = 0. So the two-class softmax with offset o reports
    the logistic fit *without* offset (contrasts = logistic coefficients, same
    standard errors and log-likelihoods), and not the logistic fit with it."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(400, 2, generator=g, dtype=torch.float64)
    off = torch.randn(400, generator=g, dtype=torch.float64)
    y = (
        torch.rand(400, generator=g, dtype=torch.float64)
        < torch.sigmoid(x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + off)
    ).to(torch.float64)
    soft = fit_glm(GeneralizedLinearModel(2, "categorical", n_classes=2), x, y.long(), offset=off, tol=1e-12)
    logit = fit_glm(GeneralizedLinearModel(2, "bernoulli"), x, y, tol=1e-12)
    logit_off = fit_glm(GeneralizedLinearModel(2, "bernoulli"), x, y, offset=off, tol=1e-12)
    torch.testing.assert_close(soft.params, logit.params, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(soft.bse, logit.bse, rtol=1e-8, atol=0)
    for k in ("llf", "llnull", "deviance", "null_deviance"):
        assert getattr(soft, k) == pytest.approx(getattr(logit, k), rel=1e-10), k
    assert float((soft.params - logit_off.params).abs().max()) > 0.1
    assert abs(soft.llf - logit_off.llf) > 1.0


@pytest.mark.parametrize("n", [3, 40])
def test_softmax_offset_in_the_solvers_pass(n):
    """The solvers' derivative pass adds the (n,) offset to every class's eta, as the
    model's linear_predictor does: loss, gradient and Hessian equal those without it.
    n = 3 = K is the case where adding it along the class axis broadcast silently."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 2, generator=g, dtype=torch.float64)
    y = torch.arange(n) % 3
    m = GeneralizedLinearModel(2, "categorical", n_classes=3)
    set_flat_parameters(m, torch.randn(9, generator=g, dtype=torch.float64))
    off = 2.0 * torch.randn(n, generator=g, dtype=torch.float64)
    with_off = hessian_and_gradient(m, TensorBatches(x, y, offset=off))
    without = hessian_and_gradient(m, TensorBatches(x, y))
    for a, b in zip(with_off, without):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(with_off[0], m.loss(x, y, offset=off), rtol=1e-12, atol=0)
