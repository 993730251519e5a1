"""torchglm.sklearn estimators wrap the same models and solvers,
match scikit-learn / statsmodels on the same data, and work in Pipeline,
GridSearchCV, cross_val_score, clone and pickle."""

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn
import sklearn.discriminant_analysis as skda
import sklearn.linear_model as sklm
import sklearn.naive_bayes as sknb
import torch
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import torchglm
import torchglm.sklearn as tgs
from torchglm.solvers import SOLVERS


@pytest.fixture(scope="module")
def binary():
    x, y = load_breast_cancer(return_X_y=True)
    x = StandardScaler().fit_transform(x)[::2, :6]
    return x, y[::2]


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


def _sk_logistic(C, x, y, w=None):
    return sklm.LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(x, y, sample_weight=w)


@pytest.mark.parametrize("solver", sorted(SOLVERS) + ["auto"])
def test_every_solver_gives_sklearns_binary_logistic_fit(binary, solver):
    x, y = binary
    est = tgs.LogisticRegression(C=0.5, solver=solver).fit(x, y)
    ref = _sk_logistic(0.5, x, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=2e-5)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=2e-5)
    assert est.coef_.shape == (1, 6) and est.intercept_.shape == (1,) and est.n_iter_[0] >= 1
    assert est.model_.__class__ is torchglm.LogisticRegression  # the core model, not a copy


@pytest.mark.parametrize("solver", ["newton", "irls", "newton-cg", "lbfgs"])
def test_multinomial_with_sample_weight_matches_sklearn(iris, solver):
    x, y = iris
    w = np.random.default_rng(0).uniform(0.2, 2.0, len(y))
    est = tgs.LogisticRegression(C=2.0, solver=solver).fit(x, y, sample_weight=w)
    ref = _sk_logistic(2.0, x, y, w)
    assert est.coef_.shape == (3, 4) and isinstance(est.model_, torchglm.SoftmaxRegression)
    np.testing.assert_allclose(est.predict_proba(x), ref.predict_proba(x), atol=1e-5)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-4)


def test_C_inf_is_unpenalized_and_probit_matches_statsmodels(binary):
    sm = pytest.importorskip("statsmodels.api")
    x, y = binary
    x = x[:, :3]
    est = tgs.ProbitRegression(C=np.inf).fit(x, y)
    assert est.model_.l2 == 0.0
    ref = sm.GLM(y, sm.add_constant(x), family=sm.families.Binomial(sm.families.links.Probit())).fit(
        tol=1e-12
    )
    np.testing.assert_allclose(np.r_[est.intercept_, est.coef_[0]], ref.params, rtol=1e-6, atol=1e-8)
    table = est.summary(x, y)
    assert "x0" in table and "probit" in table.lower()
    # statsmodels' IRLS uses the expected information (not the observed one: probit is not canonical)
    bse = est.glm_results(x, y, information="expected").bse[:3].numpy()
    np.testing.assert_allclose(bse, ref.bse[1:], rtol=1e-5)


@pytest.mark.parametrize("family, sk", [("poisson", sklm.PoissonRegressor), ("gamma", sklm.GammaRegressor)])
def test_glm_regressor_alpha_is_sklearns_alpha(family, sk):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    mu = np.exp(0.4 * x[:, 0] - 0.3 * x[:, 1] + 0.5)
    y = rng.poisson(mu).astype(float) if family == "poisson" else rng.gamma(2.0, mu / 2.0)
    est = tgs.GLMRegressor(family=family, link="log", alpha=0.1).fit(x, y)
    ref = sk(alpha=0.1, tol=1e-12, max_iter=10_000).fit(x, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=1e-6)
    np.testing.assert_allclose(est.predict(x), ref.predict(x), rtol=1e-5)
    assert est.coef_.shape == (3,) and isinstance(est.intercept_, float)
    np.testing.assert_allclose(est.score(x, y), ref.score(x, y), rtol=1e-6)  # D^2 of the same fit
    w = rng.uniform(0.5, 2.0, len(y))
    np.testing.assert_allclose(est.score(x, y, w), ref.score(x, y, w), rtol=1e-6)


def test_glm_regressor_summary_names_dataframe_columns_and_matches_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(1)
    df = pd.DataFrame(rng.normal(size=(200, 2)), columns=["age", "dose"])
    y = rng.poisson(np.exp(0.3 * df["age"] + 0.2)).astype(float)
    est = tgs.GLMRegressor(family="poisson").fit(df, y)
    assert list(est.feature_names_in_) == ["age", "dose"]
    res = est.glm_results(df, y)
    assert res.names == ["age", "dose", "intercept"]
    assert "dose" in est.summary(df, y)
    ref = sm.GLM(y, sm.add_constant(df.to_numpy()), family=sm.families.Poisson()).fit(tol=1e-12)
    np.testing.assert_allclose(res.params.numpy()[[2, 0, 1]], ref.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy()[[2, 0, 1]], ref.bse, rtol=1e-6)


def test_any_hashable_labels_and_consistent_outputs(iris):
    x, y = iris
    names = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    est = tgs.LogisticRegression().fit(x, names)
    assert list(est.classes_) == ["setosa", "versicolor", "virginica"]
    pred = est.predict(x)
    assert pred.dtype == object and set(pred) <= set(est.classes_)
    proba, log_proba = est.predict_proba(x), est.predict_log_proba(x)
    assert isinstance(proba, np.ndarray) and proba.shape == (150, 3)
    np.testing.assert_allclose(np.exp(log_proba), proba, rtol=1e-12)
    np.testing.assert_array_equal(est.classes_[est.decision_function(x).argmax(1)], pred)
    assert est.score(x, names) > 0.95
    # binary labels {-1, 7}: decision_function > 0 means classes_[1]
    yb = np.where(y[y < 2] == 1, 7, -1)
    clf = tgs.GLMClassifier(link="cloglog").fit(x[y < 2], yb)
    dec = clf.decision_function(x[y < 2])
    np.testing.assert_array_equal(clf.predict(x[y < 2]), np.where(dec > 0, 7, -1))
    p = clf.predict_proba(x[y < 2])[:, 1]
    inside = (p > 1e-12) & (p < 1 - 1e-9)
    assert inside.sum() > 20
    np.testing.assert_allclose(dec[inside], np.log(p[inside]) - np.log1p(-p[inside]), rtol=1e-6, atol=1e-9)


def test_binary_only_estimators_refuse_three_classes(iris):
    x, y = iris
    for est in (tgs.ProbitRegression(), tgs.GLMClassifier(link="probit")):
        with pytest.raises(ValueError, match="Only binary classification is supported"):
            est.fit(x, y)


@pytest.mark.parametrize(
    "tg, sk",
    [
        (tgs.GaussianNB(), sknb.GaussianNB()),
        (tgs.BernoulliNB(alpha=0.5, binarize=0.0), sknb.BernoulliNB(alpha=0.5, binarize=0.0)),
        (tgs.LinearDiscriminantAnalysis(), skda.LinearDiscriminantAnalysis(solver="lsqr")),
        (
            tgs.LinearDiscriminantAnalysis(shrinkage=0.3),
            skda.LinearDiscriminantAnalysis(solver="lsqr", shrinkage=0.3),
        ),
    ],
)
def test_generative_estimators_match_sklearn(iris, tg, sk):
    x, y = iris
    x = x - x.mean(0)
    np.testing.assert_allclose(tg.fit(x, y).predict_proba(x), sk.fit(x, y).predict_proba(x), atol=1e-8)
    np.testing.assert_allclose(tg.class_prior_, np.bincount(y) / len(y))


@pytest.mark.parametrize("solver", ["lsqr", "eigen"])
def test_lda_ledoit_wolf_estimator_matches_sklearn(iris, solver):
    from sklearn.covariance import ledoit_wolf_shrinkage

    x, y = iris
    ours = tgs.LinearDiscriminantAnalysis(solver=solver, shrinkage="auto").fit(x, y)
    ref = skda.LinearDiscriminantAnalysis(solver=solver, shrinkage="auto").fit(x, y)
    lam = [ledoit_wolf_shrinkage(StandardScaler().fit_transform(x[y == k])) for k in range(3)]
    np.testing.assert_allclose(ours.shrinkage_, lam, rtol=1e-10)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-8 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-8)
    np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), rtol=0, atol=1e-8)
    qda = tgs.QuadraticDiscriminantAnalysis(solver="eigen", shrinkage="auto").fit(x, y)
    ref = skda.QuadraticDiscriminantAnalysis(solver="eigen", shrinkage="auto").fit(x, y)
    np.testing.assert_allclose(qda.predict_proba(x), ref.predict_proba(x), rtol=0, atol=1e-8)
    with pytest.raises(ValueError, match="solver: expected one of"):
        tgs.LinearDiscriminantAnalysis(solver="cholesky").fit(x, y)
    with pytest.raises(ValueError, match="solver"):
        tgs.QuadraticDiscriminantAnalysis(solver="lsqr").fit(x, y)


def test_lda_default_is_sklearns_svd_on_a_singular_covariance():
    """15 samples, 30 features: scikit-learn's default solver drops the directions
    without within-class variance; so does ours, and weights are repetitions."""
    rng = np.random.RandomState(42)
    x, y, w = rng.rand(15, 30), rng.randint(0, 3, size=15), rng.randint(0, 5, size=15)
    ref = skda.LinearDiscriminantAnalysis().fit(x, y)
    with pytest.warns(torchglm.NumericalWarning, match="singular"):
        ours = tgs.LinearDiscriminantAnalysis().fit(x, y)
    probe = rng.rand(20, 30)
    np.testing.assert_allclose(ours.predict_proba(probe), ref.predict_proba(probe), atol=1e-10)
    np.testing.assert_allclose(ours.predict_log_proba(probe), ref.predict_log_proba(probe), rtol=1e-8)
    for est in (tgs.LinearDiscriminantAnalysis(), tgs.QuadraticDiscriminantAnalysis()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torchglm.NumericalWarning)
            weighted = clone(est).fit(x, y, sample_weight=w)
            repeated = clone(est).fit(x.repeat(w, axis=0), y.repeat(w))
        np.testing.assert_allclose(weighted.decision_function(x), repeated.decision_function(x), rtol=1e-9)


def test_count_naive_bayes_match_sklearn_on_counts_sparse_or_dense():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    z = rng.poisson(1.0 + y[:, None] * np.linspace(0, 1, 8)).astype(float)
    ref = sknb.MultinomialNB(alpha=0.7).fit(z, y)
    for xz in (z, sp.csr_matrix(z)):
        est = tgs.MultinomialNB(alpha=0.7).fit(xz, y)
        np.testing.assert_allclose(est.feature_log_prob_, ref.feature_log_prob_, rtol=1e-12)
        np.testing.assert_allclose(est.predict_proba(xz), ref.predict_proba(z), atol=1e-12)
    pnb = tgs.PoissonNB(alpha=0.0, beta=0.0).fit(z, y)
    np.testing.assert_allclose(pnb.rate_, np.stack([z[y == k].mean(0) for k in range(3)]), rtol=1e-12)
    with pytest.raises(ValueError, match="Negative values in data passed to PoissonNB"):
        tgs.PoissonNB().fit(-z, y)


@pytest.mark.parametrize("alpha", [1.0, 0.05])
def test_multinomial_nb_on_tfidf_matches_sklearn(alpha):
    """Issue 27: tf-idf weights (non-negative reals, kept sparse) in a pipeline give
    scikit-learn's MultinomialNB posteriors; the shipped movie reviews are the corpus."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from torchglm.data.movie_reviews import load_movie_reviews

    texts, y = load_movie_reviews(include_plots=True)
    train, test = slice(0, None, 2), slice(1, None, 2)
    texts_train, texts_test = texts[train], texts[test]
    ours = make_pipeline(TfidfVectorizer(), tgs.MultinomialNB(alpha=alpha))
    ref = make_pipeline(TfidfVectorizer(), sknb.MultinomialNB(alpha=alpha))
    ours.fit(texts_train, y[train])
    ref.fit(texts_train, y[train])
    assert ref[-1].feature_count_.dtype == np.float64 and (ref[-1].feature_count_ % 1 != 0).any()
    np.testing.assert_allclose(ours[-1].feature_log_prob_, ref[-1].feature_log_prob_, rtol=1e-12)
    for part in (texts_train, texts_test):
        np.testing.assert_allclose(ours.predict_proba(part), ref.predict_proba(part), rtol=0, atol=1e-10)
        np.testing.assert_array_equal(ours.predict(part), ref.predict(part))
    # Poisson NB on the same weights: the quasi-likelihood x log(lambda) - lambda
    pnb = make_pipeline(TfidfVectorizer(), tgs.PoissonNB(alpha=0.5, beta=2.0)).fit(texts_train, y[train])
    tfidf = pnb[0].transform(texts_train).toarray()
    rate = np.stack([(tfidf[y[train] == k].sum(0) + 0.5) / ((y[train] == k).sum() + 2.0) for k in range(3)])
    np.testing.assert_allclose(pnb[-1].rate_, rate, rtol=1e-12)
    with pytest.raises(ValueError, match="Negative values in data passed to MultinomialNB"):
        tgs.MultinomialNB().fit(-tfidf, y[train])


def test_fit_prior_and_class_prior():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(30, int), np.ones(10, int)]
    z = rng.poisson(2.0, size=(40, 4))
    assert np.allclose(tgs.MultinomialNB(fit_prior=False).fit(z, y).class_prior_, [0.5, 0.5])
    assert np.allclose(tgs.MultinomialNB(class_prior=[0.2, 0.8]).fit(z, y).class_prior_, [0.2, 0.8])
    assert np.allclose(tgs.MultinomialNB().fit(z, y).class_prior_, [0.75, 0.25])


def test_bayesian_logistic_map_is_logistic_with_C_equal_prior_variance(binary, iris):
    x, y = binary
    bayes = tgs.BayesianLogisticRegression(prior_variance=0.3).fit(x, y)
    np.testing.assert_allclose(bayes.coef_, tgs.LogisticRegression(C=0.3).fit(x, y).coef_, atol=1e-7)
    p_map = bayes.model_.predict_proba(x).numpy()
    p = bayes.predict_proba(x)[:, 1]
    # the Laplace predictive pulls towards 1/2, never across it
    assert np.all(np.abs(p - 0.5) <= np.abs(p_map - 0.5) + 1e-12)
    np.testing.assert_array_equal(p > 0.5, p_map > 0.5)
    assert np.isfinite(bayes.log_evidence_)
    xi, yi = iris
    multi = tgs.BayesianLogisticRegression(prior_variance=1.0, n_samples=500).fit(xi, yi)
    # the same draws for every call: a subset's predictive is the subset of the predictive
    np.testing.assert_allclose(multi.predict_proba(xi[:7]), multi.predict_proba(xi)[:7], rtol=1e-12)
    assert multi.score(xi, yi) > 0.9


def _pipeline_estimators():
    return [
        tgs.LogisticRegression(),
        tgs.ProbitRegression(),
        tgs.GLMClassifier(link="cloglog"),
        tgs.LinearDiscriminantAnalysis(),
        tgs.QuadraticDiscriminantAnalysis(reg_param=0.1),
        tgs.GaussianNB(),
        tgs.BernoulliNB(),
        tgs.BayesianLogisticRegression(),
    ]


@pytest.mark.parametrize("est", _pipeline_estimators(), ids=lambda e: type(e).__name__)
def test_pipeline_cross_val_score_clone_and_pickle(binary, est):
    x, y = binary
    pipe = make_pipeline(StandardScaler(), est)
    scores = cross_val_score(pipe, x, y, cv=3)
    assert scores.shape == (3,) and scores.min() > 0.8
    fitted = clone(pipe).fit(x, y)
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.predict_proba(x), fitted.predict_proba(x))
    unfitted = clone(est)
    assert unfitted.get_params() == est.get_params() and not hasattr(unfitted, "model_")


def test_grid_search_over_C_and_solver(binary):
    x, y = binary
    grid = GridSearchCV(
        make_pipeline(StandardScaler(), tgs.LogisticRegression()),
        {"logisticregression__C": [0.01, 0.1, 1.0], "logisticregression__solver": ["newton", "lbfgs"]},
        cv=3,
    ).fit(x, y)
    assert grid.best_params_["logisticregression__C"] in (0.01, 0.1, 1.0)
    assert grid.best_score_ > 0.9
    # solvers agree, so each C scores the same under both
    s = grid.cv_results_["mean_test_score"].reshape(3, 2)
    np.testing.assert_allclose(s[:, 0], s[:, 1])
    assert grid.predict(x).shape == y.shape


def test_regressor_in_grid_search_over_alpha():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(150, 3))
    y = rng.poisson(np.exp(0.5 * x[:, 0])).astype(float)
    grid = GridSearchCV(tgs.GLMRegressor(family="poisson"), {"alpha": [0.0, 0.1, 1.0]}, cv=3).fit(x, y)
    assert grid.best_params_["alpha"] in (0.0, 0.1, 1.0)


def test_tensors_in_outputs_numpy_and_dtype_device(binary):
    x, y = binary
    est = tgs.LogisticRegression(dtype="float32").fit(torch.from_numpy(x), torch.from_numpy(y))
    assert est.coef_.dtype == np.float32 and est.n_features_in_ == 6
    ref = tgs.LogisticRegression(dtype="float32").fit(x, y)
    np.testing.assert_allclose(est.predict_proba(torch.from_numpy(x)), ref.predict_proba(x), rtol=0, atol=0)
    assert isinstance(est.predict(torch.from_numpy(x)), np.ndarray)
    with pytest.raises(torchglm.InputError, match="dtype"):
        tgs.LogisticRegression(dtype="int8").fit(x, y)
    if torch.cuda.is_available():
        gpu = tgs.LogisticRegression(device="cuda").fit(x, y)
        assert gpu.model_.linear.weight.device.type == "cuda"
        np.testing.assert_allclose(
            gpu.predict_proba(x), tgs.LogisticRegression().fit(x, y).predict_proba(x), atol=1e-6
        )


def test_errors_follow_sklearn(binary):
    x, y = binary
    with pytest.raises(NotFittedError):
        tgs.LogisticRegression().predict(x)
    est = tgs.LogisticRegression().fit(x, y)
    with pytest.raises(ValueError, match="X has 5 features, but LogisticRegression is expecting 6"):
        est.predict(x[:, :5])
    with pytest.raises(ValueError, match="NaN"):
        est.predict(np.full_like(x, np.nan))
    with pytest.raises(ValueError, match="one class"):
        tgs.LogisticRegression().fit(x, np.zeros(len(y)))
    with pytest.raises(torchglm.InputError, match="solver"):
        tgs.LogisticRegression(solver="nope").fit(x, y)
    with pytest.raises(torchglm.InputError, match="C: expected a positive number"):
        tgs.LogisticRegression(C=0.0).fit(x, y)


def test_non_convergence_warns_sklearns_convergence_warning(binary):
    x, y = binary
    with pytest.warns(ConvergenceWarning):
        est = tgs.LogisticRegression(solver="gd", max_iter=2).fit(x, y)
    assert est.converged_ is False and est.n_iter_[0] <= 2


def test_sklearn_version_has_the_api_these_estimators_use():
    # validate_data and __sklearn_tags__ (scikit-learn >= 1.6): fail loudly, not oddly
    major, minor = (int(p) for p in sklearn.__version__.split(".")[:2])
    assert (major, minor) >= (1, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tgs.LogisticRegression().fit(np.eye(4), [0, 1, 0, 1])


def _classifiers():
    """Every classifier of torchglm.sklearn, with defaults (the registry: a new one is
    counted for free)."""
    return [
        getattr(tgs, name)()
        for name in tgs.__all__
        if isinstance(getattr(tgs, name), type) and sklearn.base.is_classifier(getattr(tgs, name)())
    ]


@pytest.mark.parametrize("est", _classifiers(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("method", ["predict_proba", "predict_log_proba", "predict"])
def test_one_gate_per_prediction(monkeypatch, est, method):
    """A prediction passes one gate: one fitted check and one finiteness scan of X
    (scikit-learn's check_is_fitted, then the core's input gate; the wrapper takes the
    core's unchecked path after it), not the wrapper's and the core's both."""
    import sys

    import sklearn.utils.validation as skv

    from torchglm import _validation
    from torchglm.models._fitted import FittedFlag

    rng = np.random.default_rng(0)
    x = rng.poisson(2.0, size=(60, 3)).astype(np.float64)
    y = (x[:, 0] + rng.normal(size=60) > 2).astype(int)
    if type(est).__name__ == "BernoulliNB":
        x = (x > 1).astype(np.float64)
    est.fit(x, y)
    counts = {"fitted": 0, "finite": 0}

    def counted(kind, f):
        def g(*args, **kwargs):
            counts[kind] += 1
            return f(*args, **kwargs)

        return g

    checks = {
        "check_is_fitted": (skv.check_is_fitted, counted("fitted", skv.check_is_fitted)),
        "check_finite": (_validation.check_finite, counted("finite", _validation.check_finite)),
        "_assert_all_finite": (skv._assert_all_finite, counted("finite", skv._assert_all_finite)),
    }
    for name, module in list(sys.modules.items()):  # every module's binding of each check
        if name.split(".")[0] in ("torchglm", "sklearn"):
            for attr, (original, wrapper) in checks.items():
                if getattr(module, attr, None) is original:
                    monkeypatch.setattr(module, attr, wrapper)
    monkeypatch.setattr(FittedFlag, "check_fitted", counted("fitted", FittedFlag.check_fitted))
    getattr(est, method)(x)
    assert counts == {"fitted": 1, "finite": 1}


def test_score_with_a_label_never_seen_in_fit_is_sklearns_accuracy(binary):
    """scikit-learn's LogisticRegression.score counts a label outside classes_ as a wrong
    prediction (accuracy_score of y and predict(X)), no error: the same here."""
    x, y = binary
    unseen = y.copy()
    unseen[:7] = 7
    ours = tgs.LogisticRegression(C=1.0).fit(x, y).score(x, unseen)
    theirs = sklm.LogisticRegression(C=1.0).fit(x, y).score(x, unseen)
    assert ours == pytest.approx(theirs, abs=1.0 / len(y)) and ours < tgs.LogisticRegression(C=1.0).fit(
        x, y
    ).score(x, y)


@pytest.mark.parametrize("est", _classifiers() + [tgs.GLMRegressor()], ids=lambda e: type(e).__name__)
def test_nan_sample_weight_gets_the_librarys_message(binary, est):
    """A NaN sample weight is refused as model.fit refuses it (an InputError, which is a
    ValueError as scikit-learn's checks expect), not in scikit-learn's words."""
    x, y = binary
    x = np.abs(x) if type(est).__name__ in ("MultinomialNB", "PoissonNB") else x
    x = np.round(x) if type(est).__name__ in ("MultinomialNB", "PoissonNB", "BernoulliNB") else x
    w = np.ones(len(y))
    w[4] = np.nan
    with pytest.raises(
        torchglm.InputError, match=r"^weight: expected finite values .* first at index \(4,\)$"
    ):
        est.fit(x, y, sample_weight=w)
