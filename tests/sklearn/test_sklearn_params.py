"""scikit-learn's parameters on the GLM wrappers: ``penalty`` / ``l1_ratio`` (L1 and the
elastic net), ``class_weight``, ``warm_start``, ``random_state``, ``n_jobs``, and
``LogisticRegressionCV`` against scikit-learn's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.linear_model import LogisticRegressionCV as SkLogisticCV
from sklearn.preprocessing import StandardScaler

import torchglm.sklearn as tgs
from torchglm import InputError


def _data(n=300, d=6, classes=2, seed=0):
    x, y = make_classification(
        n, d, n_informative=3, n_redundant=0, n_classes=classes, weights=None, random_state=seed
    )
    return x, y


def _unbalanced(seed=0):
    x, y = make_classification(400, 5, n_informative=3, weights=[0.8, 0.2], random_state=seed)
    return x, y


def _saga(**kwargs):
    return SkLogistic(solver="saga", tol=1e-13, max_iter=1_000_000, **kwargs)


@pytest.mark.parametrize(
    "params, sk_params",
    [
        ({"penalty": "l1", "C": 0.05}, {"l1_ratio": 1.0, "C": 0.05}),
        ({"penalty": "elasticnet", "l1_ratio": 0.3, "C": 0.2}, {"l1_ratio": 0.3, "C": 0.2}),
        (
            {"penalty": "elasticnet", "l1_ratio": 0.7, "C": 0.1, "class_weight": "balanced"},
            {"l1_ratio": 0.7, "C": 0.1, "class_weight": "balanced"},
        ),
        (
            {"penalty": "l1", "C": 0.3, "class_weight": {0: 2.0, 1: 0.5}},
            {"l1_ratio": 1.0, "C": 0.3, "class_weight": {0: 2.0, 1: 0.5}},
        ),
    ],
    ids=["l1", "elasticnet", "elasticnet-balanced", "l1-dict"],
)
def test_penalties_and_class_weights_match_scikit_learn(params, sk_params):
    x, y = _unbalanced()
    ours = tgs.LogisticRegression(**params).fit(x, y)
    theirs = _saga(**sk_params).fit(x, y)
    assert ours.converged_ and ours.fit_result_.solver == "proximal"
    np.testing.assert_allclose(ours.coef_, theirs.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, atol=1e-6)
    assert np.array_equal(ours.coef_ == 0, theirs.coef_ == 0)


def test_multinomial_l1_matches_scikit_learn():
    x, y = _data(classes=3, seed=2)
    x = StandardScaler().fit_transform(x)
    ours = tgs.LogisticRegression(penalty="l1", C=0.1).fit(x, y)
    theirs = _saga(l1_ratio=1.0, C=0.1).fit(x, y)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.predict_proba(x), theirs.predict_proba(x), atol=1e-6)


def test_balanced_class_weight_is_n_over_k_bincount():
    """``"balanced"`` is the sample weight ``n / (K bincount(y))[y]`` (computed here)."""
    x, y = _unbalanced()
    a = tgs.LogisticRegression(class_weight="balanced", C=0.5).fit(x, y)
    w = (len(y) / (2 * np.bincount(y)))[y]
    b = tgs.LogisticRegression(C=0.5).fit(x, y, sample_weight=w)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    c = tgs.LogisticRegression(class_weight={0: 3.0}, C=0.5).fit(x, y)  # missing labels weigh 1
    d = tgs.LogisticRegression(C=0.5).fit(x, y, sample_weight=np.where(y == 0, 3.0, 1.0))
    np.testing.assert_allclose(c.coef_, d.coef_, rtol=1e-10, atol=1e-12)


def test_warm_start_starts_from_the_previous_coefficients():
    x, y = _data()
    cold = tgs.LogisticRegression(penalty="l1", C=0.1)
    first = cold.fit(x, y).n_iter_[0]
    assert cold.fit(x, y).n_iter_[0] == first  # without warm_start every fit starts over
    warm = tgs.LogisticRegression(penalty="l1", C=0.1, warm_start=True).fit(x, y)
    coef = warm.coef_.copy()
    warm.fit(x, y)
    assert warm.n_iter_[0] == 0 and warm.converged_  # the start is the optimum: verified at once
    np.testing.assert_allclose(warm.coef_, coef, atol=1e-10)
    reg = tgs.GLMRegressor(family="poisson", alpha=0.01, l1_ratio=0.5, warm_start=True)
    counts = np.random.default_rng(0).poisson(np.exp(0.3 * x[:, 0]))
    reg.fit(x, counts)
    assert reg.fit(x, counts).n_iter_[0] == 0


def _threads_of_each_fit(monkeypatch) -> list[int]:
    """The torch thread count inside each model fit from now on (appended per fit:
    the core fit sets it, :func:`torchglm.solvers.fit`'s ``n_jobs``)."""
    import torchglm.solvers.api as api

    seen = []
    original = api._fit_stages

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(api, "_fit_stages", spy)
    return seen


def test_n_jobs_sets_torch_threads_during_the_fit_only(monkeypatch):
    seen = _threads_of_each_fit(monkeypatch)
    before = torch.get_num_threads()
    x, y = _data()
    tgs.LogisticRegression(n_jobs=2, random_state=0).fit(x, y)
    assert seen == [2] and torch.get_num_threads() == before
    with pytest.raises(InputError, match="n_jobs"):
        tgs.LogisticRegression(n_jobs=0).fit(x, y)


def test_n_jobs_none_leaves_the_cores_other_processes_use(monkeypatch):
    # a busy machine (one CPU idle): the default fit takes one thread, not torch's 2+
    import torchglm.threads

    seen = _threads_of_each_fit(monkeypatch)
    monkeypatch.setattr(torchglm.threads, "idle_cpus", lambda: 1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x, y = _data()
        tgs.LogisticRegression().fit(x, y)
        tgs.LogisticRegression(n_jobs=2).fit(x, y)  # a count given is taken as it is
        assert seen == [1, 2] and torch.get_num_threads() == 2
        seen.clear()
        tgs.LogisticRegressionCV(Cs=[1.0], cv=2, n_jobs=2).fit(x, y)  # every fold's fit too
        assert seen == [2, 2, 2]
    finally:
        torch.set_num_threads(before)


def test_random_state_changes_nothing():
    x, y = _data()
    a = tgs.LogisticRegression(penalty="l1", C=0.1, random_state=0).fit(x, y)
    b = tgs.LogisticRegression(penalty="l1", C=0.1, random_state=123).fit(x, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)


@pytest.mark.parametrize(
    "params, name",
    [
        ({"penalty": "l3"}, "penalty"),
        ({"penalty": "elasticnet"}, "l1_ratio"),
        ({"penalty": "elasticnet", "l1_ratio": 1.5}, "l1_ratio"),
        ({"penalty": "l1", "solver": "newton"}, "solver"),
        ({"class_weight": {7: 1.0}}, "class_weight"),
        ({"class_weight": "unbalanced"}, "class_weight"),
    ],
)
def test_bad_parameters_are_one_input_error(params, name):
    x, y = _data()
    with pytest.raises(InputError, match=name):
        tgs.LogisticRegression(**params).fit(x, y)


def test_penalty_none_is_unpenalized_whatever_C():
    x, y = _data()
    a = tgs.LogisticRegression(penalty=None, C=0.01).fit(x, y)
    b = tgs.LogisticRegression(C=np.inf).fit(x, y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)


def test_regressor_l1_ratio_matches_glum():
    from glum import GeneralizedLinearRegressor

    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 6))
    y = rng.poisson(np.exp(0.5 * x[:, 0] - 0.3 * x[:, 1] + 0.2))
    ours = tgs.GLMRegressor(family="poisson", alpha=0.05, l1_ratio=0.6).fit(x, y)
    glum = GeneralizedLinearRegressor(family="poisson", alpha=0.05, l1_ratio=0.6, gradient_tol=1e-12).fit(
        x, y
    )
    np.testing.assert_allclose(ours.coef_, glum.coef_, atol=1e-6)
    assert ours.intercept_ == pytest.approx(glum.intercept_, abs=1e-6)
    assert int((ours.coef_ == 0).sum()) > 0


def _breast_cancer():
    x, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(x), y


def test_logistic_regression_cv_chooses_scikit_learns_C():
    x, y = _breast_cancer()
    ours = tgs.LogisticRegressionCV(Cs=8, scoring="neg_log_loss").fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        theirs = SkLogisticCV(
            Cs=8,
            scoring="neg_log_loss",
            tol=1e-10,
            max_iter=10_000,
            l1_ratios=(0.0,),
            use_legacy_attributes=False,
        ).fit(x, y)
    assert ours.C_ == theirs.C_
    np.testing.assert_allclose(ours.Cs_, theirs.Cs_)
    # (folds, l1_ratios, Cs); lbfgs stops on a relative change of its objective, short of
    # the optimum at the weakest penalties of this nearly separable set (1.6e-5 seen there)
    np.testing.assert_allclose(ours.scores_, theirs.scores_, atol=1e-4)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, atol=1e-5)


def test_logistic_regression_cv_elastic_net_grid_and_refit_false():
    x, y = _unbalanced()
    cv = tgs.LogisticRegressionCV(Cs=[0.01, 0.1, 1.0], penalty="elasticnet", l1_ratios=[0.2, 0.8], cv=3).fit(
        x, y
    )
    assert cv.scores_.shape == (3, 2, 3) and cv.coefs_paths_.shape == (3, 2, 3, 1, 6)
    summed = cv.scores_.sum(0)
    r, c = np.unravel_index(np.argmax(summed), summed.shape)
    assert summed[r, c] == summed[list(cv.l1_ratios_).index(cv.l1_ratio_), list(cv.Cs_).index(cv.C_)]
    single = tgs.LogisticRegression(C=cv.C_, penalty="elasticnet", l1_ratio=cv.l1_ratio_).fit(x, y)
    np.testing.assert_allclose(cv.coef_, single.coef_, atol=1e-10)
    mean = tgs.LogisticRegressionCV(Cs=[0.01, 0.1, 1.0], cv=3, refit=False).fit(x, y)
    assert mean.C_ > 0 and not mean.converged_ and mean.predict(x).shape == y.shape


def test_cv_estimator_params_round_trip_through_clone():
    est = tgs.LogisticRegressionCV(Cs=[0.1, 1.0], penalty="l1", cv=4, scoring="roc_auc", n_jobs=1)
    copy = clone(est)
    assert copy.get_params() == est.get_params()
    assert copy.set_params(Cs=3).Cs == 3
    with pytest.raises(InputError, match="l1_ratios"):
        tgs.LogisticRegressionCV(penalty="elasticnet").fit(*_data())
