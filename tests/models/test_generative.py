"""Generative classifiers: the shared base contract (every subclass) and GDA.

References: scikit-learn's LinearDiscriminantAnalysis(solver="lsqr") and
QuadraticDiscriminantAnalysis on its shipped datasets, the closed forms of the lecture notes
on probabilistic classification, §3 and §4 (Bishop PRML §4.2.1–4.2.2),
and the one-batch fit for batch-split invariance.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn import datasets as skdata
from sklearn import discriminant_analysis as skda

from data_util import bernoulli_classes, gaussian_classes, poisson_counts
from torchglm import InputError, LogisticRegression, NotFittedError, NumericalWarning, SoftmaxRegression
from torchglm.data.batches import Batch
from torchglm.models import (
    BernoulliNB,
    ClosedFormFitter,
    GaussianDiscriminantAnalysis,
    GaussianNB,
    GenerativeClassifier,
    LinearDiscriminantAnalysis,
    MultinomialNB,
    PoissonNB,
    QuadraticDiscriminantAnalysis,
)
from torchglm.passes import run_passes


def _all_subclasses(cls):
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


#: one data maker per concrete generative classifier (a new model must add itself here).
DATA = {
    GaussianDiscriminantAnalysis: gaussian_classes,
    LinearDiscriminantAnalysis: gaussian_classes,
    QuadraticDiscriminantAnalysis: gaussian_classes,
    GaussianNB: gaussian_classes,
    MultinomialNB: poisson_counts,
    PoissonNB: poisson_counts,
    BernoulliNB: bernoulli_classes,
}
MODELS = sorted(DATA, key=lambda c: c.__name__)
LINEAR = [LinearDiscriminantAnalysis, MultinomialNB, BernoulliNB, PoissonNB]


def _fitted(cls, k=3, seed=0, **kw):
    x, y = DATA[cls](k=k, seed=seed)
    model = cls(x.shape[1], k, **kw)
    model.fit(x, y)
    return model, x, y


def test_every_generative_model_has_test_data():
    assert set(_all_subclasses(GenerativeClassifier)) == set(DATA)


# -- the base contract, for every model -------------------------------------------
@pytest.mark.parametrize("cls", MODELS)
def test_posterior_is_bayes_rule_on_the_joint(cls):
    model, x, _ = _fitted(cls)
    a = model.class_log_likelihood(x) + model.log_prior
    # Bayes' rule written out with exp/sum (fine at these magnitudes) vs logsumexp.
    joint = a.exp()
    expected = joint / joint.sum(1, keepdim=True)
    torch.testing.assert_close(model.predict_proba(x), expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(model.log_prob(x), joint.sum(1).log(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model(x), a)
    assert torch.equal(model.predict(x), a.argmax(1))
    nll = model.family.nll(model(x), model.predict(x))
    assert torch.all(nll >= 0) and model.family.is_classifier


@pytest.mark.parametrize("cls", MODELS)
def test_batch_split_invariance(cls):
    x, y = DATA[cls](n=257)
    w = torch.rand(257, generator=torch.Generator().manual_seed(3)) + 0.5
    one, split = cls(x.shape[1], 3), cls(x.shape[1], 3)
    one.fit(x, y, weight=w)
    split.fit(x, y, weight=w, batch_size=19)
    for (name, a), (_, b) in zip(one.state_dict().items(), split.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("cls", MODELS)
def test_integer_weights_equal_repeated_rows(cls):
    x, y = DATA[cls](n=60)
    w = torch.arange(60) % 4
    weighted, repeated = cls(x.shape[1], 3), cls(x.shape[1], 3)
    weighted.fit(x, y, weight=w.to(x.dtype))
    repeated.fit(x.repeat_interleave(w, 0), y.repeat_interleave(w, 0))
    torch.testing.assert_close(weighted.predict_proba(x), repeated.predict_proba(x), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cls", MODELS)
def test_fitter_contract_and_state_dict_round_trip(cls):
    x, y = DATA[cls]()
    model = cls(x.shape[1], 3)
    fitter = model.make_fitter("closed_form")
    assert isinstance(fitter, ClosedFormFitter)
    result = run_passes(fitter, [Batch(x[:100], y[:100]), Batch(x[100:], y[100:])], max_passes=5)
    assert fitter.done and result.converged and result.n_iter == 1 and result.solver == "closed_form"
    clone = cls(x.shape[1], 3)
    with pytest.raises(NotFittedError):
        clone.predict_proba(x)
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone.predict_proba(x), model.predict_proba(x))
    lowered = clone.to(torch.float32)
    assert lowered.dtype == torch.float32
    torch.testing.assert_close(
        lowered.predict_proba(x.float()), model.predict_proba(x).float(), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("cls", MODELS)
def test_not_fitted_errors(cls):
    x, _ = DATA[cls]()
    model = cls(x.shape[1], 3)
    for call in (model.predict_proba, model.predict, model.log_prob, model.predict_log_proba):
        with pytest.raises(NotFittedError):
            call(x)
    with pytest.raises(NotFittedError):
        model.sample(3)


@pytest.mark.parametrize("cls", MODELS)
def test_bad_input_common(cls):
    x, y = DATA[cls]()
    d = x.shape[1]
    model = cls(d, 3)
    with pytest.raises(InputError, match="X: expected .* feature columns"):
        model.fit(x[:, :-1], y)
    with pytest.raises(InputError, match="y: expected labels in"):
        model.fit(x, torch.full_like(y, 3))
    with pytest.raises(InputError, match="X/y"):
        model.fit(x, y[:-1])
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(InputError, match="finite"):
        model.fit(bad, y)
    with pytest.raises(InputError, match="weight"):
        model.fit(x, y, weight=-torch.ones(len(y)))
    with pytest.raises(InputError, match="class 2"):  # an empty class
        model.fit(x[y < 2], y[y < 2])
    with pytest.raises(InputError, match="n_features"):
        cls(0, 3)
    with pytest.raises(InputError, match="n_classes"):
        cls(d, 1)
    with pytest.raises(InputError, match="priors"):
        cls(d, 3, priors=[0.5, 0.5])
    with pytest.raises(InputError, match="priors"):
        cls(d, 3, priors=[0.5, 0.6, -0.1])
    with pytest.raises(InputError, match="solver"):
        model.make_fitter("newton")


@pytest.mark.parametrize("cls", MODELS)
def test_fixed_priors_shift_the_log_odds(cls):
    x, y = DATA[cls]()
    priors = torch.tensor([0.2, 0.3, 0.5])
    fitted, fixed = cls(x.shape[1], 3), cls(x.shape[1], 3, priors=priors)
    fitted.fit(x, y)
    fixed.fit(x, y)
    torch.testing.assert_close(fixed.log_prior, priors.log())
    # a_k changes by log(pi_k / pi_hat_k) only: the class conditionals are unchanged.
    shift = priors.log() - fitted.log_prior
    torch.testing.assert_close(fixed(x), fitted(x) + shift)
    assert fixed.n_parameters == fitted.n_parameters - 2


def _estimates_and_standard_errors(model, refit):
    """(refit estimate, original value, standard error of one estimate from n_k draws)."""
    n_k = refit.class_count.unsqueeze(1)
    if isinstance(model, GaussianDiscriminantAnalysis):
        cov = model.covariance if not model.shared else model.covariance.expand(3, -1, -1)
        var = cov.diagonal(dim1=-2, dim2=-1)
        # Var of a sample covariance entry: (S_ii S_jj + S_ij^2) / n (Gaussian data).
        cov_se = ((var.unsqueeze(2) * var.unsqueeze(1) + cov**2) / n_k.unsqueeze(2)).sqrt()
        if model.shared:
            cov_se = (cov[0] ** 2 + var[0].unsqueeze(1) * var[0].unsqueeze(0)).div(n_k.sum()).sqrt()
        return [(refit.means, model.means, (var / n_k).sqrt()), (refit.covariance, model.covariance, cov_se)]
    if isinstance(model, GaussianNB):
        return [
            (refit.means, model.means, (model.var / n_k).sqrt()),
            (refit.var, model.var, model.var * (2 / n_k).sqrt()),
        ]
    if isinstance(model, BernoulliNB):
        p = model.log_p.exp()
        return [(refit.log_p.exp(), p, (p * (1 - p) / n_k).sqrt())]
    if isinstance(model, PoissonNB):
        return [(refit.rate, model.rate, (model.rate / n_k).sqrt())]
    theta = model.log_theta.exp()
    n_tokens = refit.feature_count.sum(1, keepdim=True)
    return [(refit.log_theta.exp(), theta, (theta * (1 - theta) / n_tokens).sqrt())]


@pytest.mark.parametrize("cls", MODELS)
def test_sample_then_refit_recovers_the_parameters(cls):
    model, _, _ = _fitted(cls)
    xs, ys = model.sample(20000, torch.Generator().manual_seed(1))
    assert xs.shape == (20000, model.n_features) and ys.shape == (20000,)
    refit = cls(model.n_features, 3)
    if cls in (MultinomialNB, BernoulliNB):
        refit = cls(model.n_features, 3, alpha=0.0)
    elif cls is PoissonNB:
        refit = cls(model.n_features, 3, alpha=0.0, beta=0.0)
    refit.fit(xs, ys)
    # Class frequencies: binomial standard error sqrt(p(1-p)/n) < 0.0036; allow 5 s.e.
    torch.testing.assert_close(refit.log_prior.exp(), model.log_prior.exp(), rtol=0, atol=0.018)
    # Every refitted parameter lies within 5 standard errors of the generating value
    # (over <= 200 parameters a 5-s.e. excursion has probability ~1e-4).
    for estimate, truth, se in _estimates_and_standard_errors(model, refit):
        z = ((estimate - truth) / se).abs().max()
        assert z < 5, float(z)


def test_sample_reproducible_with_generator():
    model, _, _ = _fitted(QuadraticDiscriminantAnalysis)
    a = model.sample(50, torch.Generator().manual_seed(7))
    b = model.sample(50, torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(InputError, match="n: expected a positive integer"):
        model.sample(0)


@pytest.mark.parametrize("cls", LINEAR)
@pytest.mark.parametrize("k", [2, 3])
def test_to_linear_has_the_same_probabilities(cls, k):
    model, x, _ = _fitted(cls, k=k)
    linear = model.to_linear()
    p = model.predict_proba(x)
    if k == 2:
        assert isinstance(linear, LogisticRegression)
        torch.testing.assert_close(linear.predict_proba(x).detach(), p[:, 1], rtol=0, atol=1e-10)
    else:
        assert isinstance(linear, SoftmaxRegression)
        torch.testing.assert_close(linear.predict_proba(x).detach(), p, rtol=0, atol=1e-10)
    assert linear.is_fitted


@pytest.mark.parametrize("cls", [QuadraticDiscriminantAnalysis, GaussianNB])
def test_to_linear_refuses_quadratic_models(cls):
    model, _, _ = _fitted(cls)
    with pytest.raises(NotImplementedError):
        model.to_linear()


def test_lda_to_linear_is_the_closed_form():
    """w = Sigma^{-1}(mu_1 - mu_0), w0 = 1/2 (mu_0' S^-1 mu_0 - mu_1' S^-1 mu_1) + log pi_1/pi_0
    (the lecture notes, §3; Bishop PRML eqs. 4.66-4.67)."""
    model, _, _ = _fitted(LinearDiscriminantAnalysis, k=2)
    mu0, mu1 = model.means.numpy()
    s_inv = np.linalg.inv(model.covariance.numpy())
    pi = model.log_prior.exp().numpy()
    w = s_inv @ (mu1 - mu0)
    w0 = 0.5 * (mu0 @ s_inv @ mu0 - mu1 @ s_inv @ mu1) + math.log(pi[1] / pi[0])
    linear = model.to_linear()
    np.testing.assert_allclose(linear.linear.weight.detach().numpy()[0], w, rtol=1e-10)
    np.testing.assert_allclose(linear.linear.bias.detach().numpy()[0], w0, rtol=1e-10)


# -- GDA against scikit-learn ------------------------------------------------------
SHIPPED = {"iris": skdata.load_iris, "wine": skdata.load_wine, "breast_cancer": skdata.load_breast_cancer}


def _shipped(name):
    x, y = SHIPPED[name](return_X_y=True)
    return x, y, torch.tensor(x), torch.tensor(y)


@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("shrinkage", [0.0, 0.3])
def test_lda_matches_sklearn_lsqr(name, shrinkage):
    x, y, xt, yt = _shipped(name)
    k = int(y.max()) + 1
    ref = skda.LinearDiscriminantAnalysis(solver="lsqr", shrinkage=shrinkage or None).fit(x, y)
    model = LinearDiscriminantAnalysis(x.shape[1], k, shrinkage=shrinkage)
    model.fit(xt, yt)
    np.testing.assert_allclose(model.means.numpy(), ref.means_, rtol=1e-10)
    np.testing.assert_allclose(
        model.covariance.numpy(), ref.covariance_, rtol=1e-8, atol=1e-10 * np.abs(ref.covariance_).max()
    )
    np.testing.assert_allclose(model.predict_proba(xt).numpy(), ref.predict_proba(x), rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.log_prior.exp().numpy(), ref.priors_, rtol=1e-12)


def test_lda_fixed_priors_match_sklearn():
    x, y, xt, yt = _shipped("iris")
    priors = [0.5, 0.3, 0.2]
    ref = skda.LinearDiscriminantAnalysis(solver="lsqr", priors=priors).fit(x, y)
    model = LinearDiscriminantAnalysis(4, 3, priors=priors)
    model.fit(xt, yt)
    # sklearn pools the class covariances with the given priors as weights, the
    # MLE (the lecture notes, §4) with n_k / n; given sklearn's pooled covariance the posteriors agree.
    assert not np.allclose(model.covariance.numpy(), ref.covariance_)
    model.covariance.copy_(torch.tensor(ref.covariance_))
    model.scale_tril.copy_(torch.linalg.cholesky(model.covariance))
    model.log_det.copy_(torch.logdet(model.covariance))
    np.testing.assert_allclose(model.predict_proba(xt).numpy(), ref.predict_proba(x), atol=1e-6)


# breast_cancer without reg: sklearn refuses (eigenvalues below its tol=1e-4).
@pytest.mark.parametrize(
    "name,reg", [("iris", 0.0), ("wine", 0.0), ("iris", 0.1), ("wine", 0.1), ("breast_cancer", 0.1)]
)
def test_qda_matches_sklearn(name, reg):
    x, y, xt, yt = _shipped(name)
    k = int(y.max()) + 1
    ref = skda.QuadraticDiscriminantAnalysis(reg_param=reg, store_covariance=True).fit(x, y)
    model = QuadraticDiscriminantAnalysis(x.shape[1], k, reg=reg)
    model.fit(xt, yt)
    np.testing.assert_allclose(model.means.numpy(), ref.means_, rtol=1e-10)
    cov = np.stack(ref.covariance_)
    np.testing.assert_allclose(model.covariance.numpy(), cov, rtol=1e-7, atol=1e-9 * np.abs(cov).max())
    np.testing.assert_allclose(model.predict_proba(xt).numpy(), ref.predict_proba(x), rtol=0, atol=1e-6)


def test_qda_shrinkage_matches_sklearn_eigen():
    x, y, xt, yt = _shipped("wine")
    ref = skda.QuadraticDiscriminantAnalysis(solver="eigen", shrinkage=0.2).fit(x, y)
    model = QuadraticDiscriminantAnalysis(13, 3, shrinkage=0.2)
    model.fit(xt, yt)
    np.testing.assert_allclose(model.predict_proba(xt).numpy(), ref.predict_proba(x), rtol=0, atol=1e-6)


# -- Ledoit-Wolf shrinkage and the generalized inverse (issue 27) -----------------------
def _ledoit_wolf_per_class(x, y):
    from sklearn.covariance import ledoit_wolf_shrinkage
    from sklearn.preprocessing import StandardScaler

    return np.array([ledoit_wolf_shrinkage(StandardScaler().fit_transform(x[y == k])) for k in np.unique(y)])


@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("solver", ["lsqr", "eigen"])
def test_lda_ledoit_wolf_matches_sklearn(name, solver):
    x, y, xt, yt = _shipped(name)
    k = int(y.max()) + 1
    ref = skda.LinearDiscriminantAnalysis(solver=solver, shrinkage="auto").fit(x, y)
    model = LinearDiscriminantAnalysis(x.shape[1], k, shrinkage="auto")
    model.fit(xt, yt)
    np.testing.assert_allclose(model.shrinkage_intensity.numpy(), _ledoit_wolf_per_class(x, y), rtol=1e-10)
    assert (model.shrinkage_intensity > 0).all()
    np.testing.assert_allclose(model.covariance.numpy(), ref.covariance_, rtol=1e-8, atol=0)
    linear = model.to_linear()
    # two classes: one row, the difference of the classes' discriminants, as scikit-learn
    coef, intercept = linear.coef.detach().numpy(), linear.intercept.detach().numpy()
    np.testing.assert_allclose(coef, ref.coef_, rtol=1e-8, atol=1e-8 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(intercept, ref.intercept_, rtol=1e-8, atol=1e-8 * np.abs(ref.intercept_).max())
    # breast_cancer's shrunk covariance has cond ~1e11: scikit-learn's lsqr and eigen
    # posteriors differ by 4.3e-8 there (ours is 3e-13 from eigen and from a centred solve)
    atol = 1e-7 if (name, solver) == ("breast_cancer", "lsqr") else 1e-8
    np.testing.assert_allclose(model.predict_proba(xt).numpy(), ref.predict_proba(x), rtol=0, atol=atol)


@pytest.mark.parametrize("name", ["iris", "wine"])
def test_qda_ledoit_wolf_matches_sklearn_eigen(name):
    x, y, xt, yt = _shipped(name)
    ref = skda.QuadraticDiscriminantAnalysis(solver="eigen", shrinkage="auto", store_covariance=True).fit(
        x, y
    )
    model = QuadraticDiscriminantAnalysis(x.shape[1], 3, shrinkage="auto")
    model.fit(xt, yt)
    np.testing.assert_allclose(model.shrinkage_intensity.numpy(), _ledoit_wolf_per_class(x, y), rtol=1e-10)
    np.testing.assert_allclose(model.covariance.numpy(), np.stack(ref.covariance_), rtol=1e-8, atol=0)
    np.testing.assert_allclose(model.predict_proba(xt).numpy(), ref.predict_proba(x), rtol=0, atol=1e-8)


def test_ledoit_wolf_edge_cases_match_sklearn():
    """One feature (intensity 0), a constant feature (scale 1, as StandardScaler), a
    two-sample class; and sample weights count as repetitions."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3))
    x[:, 1] = 2.5
    y = np.r_[np.zeros(38, int), 1, 1]
    model = LinearDiscriminantAnalysis(3, 2, shrinkage="auto")
    model.fit(torch.tensor(x), torch.tensor(y))
    np.testing.assert_allclose(
        model.shrinkage_intensity.numpy(), _ledoit_wolf_per_class(x, y), rtol=1e-10, atol=1e-15
    )
    ref = skda.LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto").fit(x, y)
    np.testing.assert_allclose(model.covariance.numpy(), ref.covariance_, rtol=1e-10, atol=1e-15)
    one = LinearDiscriminantAnalysis(1, 2, shrinkage="auto")
    one.fit(torch.tensor(x[:, :1]), torch.tensor(y))
    assert (one.shrinkage_intensity == 0).all()
    w = rng.integers(1, 4, size=40)
    weighted = QuadraticDiscriminantAnalysis(3, 2, shrinkage="auto")
    weighted.fit(torch.tensor(x), torch.tensor(y), weight=torch.tensor(w, dtype=torch.float64))
    repeated = QuadraticDiscriminantAnalysis(3, 2, shrinkage="auto")
    repeated.fit(torch.tensor(x.repeat(w, axis=0)), torch.tensor(y.repeat(w)))
    torch.testing.assert_close(weighted.shrinkage_intensity, repeated.shrinkage_intensity, rtol=1e-12, atol=0)
    torch.testing.assert_close(weighted.covariance, repeated.covariance, rtol=1e-12, atol=1e-15)


def _singular_data():
    # scikit-learn's sample-weight check: 15 samples, 30 features, 3 classes
    rng = np.random.RandomState(42)
    return rng.rand(15, 30), rng.randint(0, 3, size=15), rng.randint(0, 5, size=15)


@pytest.mark.parametrize("name", ["iris", "wine", "singular"])
def test_lda_pinv_matches_sklearn_svd(name):
    if name == "singular":
        x, y, _ = _singular_data()
        xt, yt = torch.tensor(x), torch.tensor(y)
    else:
        x, y, xt, yt = _shipped(name)
    ref = skda.LinearDiscriminantAnalysis().fit(x, y)  # solver="svd"
    model = LinearDiscriminantAnalysis(x.shape[1], 3, inverse="pinv")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(xt, yt)
    assert any("singular" in str(w.message) for w in caught) == (name == "singular")
    probe = np.vstack([x, np.random.default_rng(0).normal(x.mean(0), x.std(0), size=x.shape)])
    np.testing.assert_allclose(
        model.predict_proba(torch.tensor(probe)).numpy(), ref.predict_proba(probe), atol=1e-10
    )
    linear = model.to_linear()
    np.testing.assert_allclose(
        linear.predict_proba(torch.tensor(probe)).detach().numpy(), ref.predict_proba(probe), atol=1e-10
    )


@pytest.mark.parametrize("cls", [LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis])
def test_pinv_weights_are_repetitions_and_scale_free(cls):
    """With a singular covariance the Cholesky path's log-odds are ~1/jitter (1e11) and
    their rounding differs between weighted and repeated sums (scikit-learn's
    check_sample_weight_equivalence_on_dense_data failed); the generalized inverse
    gives the same posteriors either way, and for a rescaled feature."""
    x, y, w = _singular_data()
    fits = {}
    for key, (xs, ys, ws) in {
        "weighted": (x, y, torch.tensor(w, dtype=torch.float64)),
        "repeated": (x.repeat(w, axis=0), y.repeat(w), None),
        "rescaled": (x * np.r_[1e3, np.ones(29)], y, torch.tensor(w, dtype=torch.float64)),
    }.items():
        model = cls(30, 3, inverse="pinv")
        with pytest.warns(NumericalWarning, match="singular"):
            model.fit(torch.tensor(xs), torch.tensor(ys), weight=ws)
        fits[key] = model
    a = fits["weighted"].joint_log_likelihood(torch.tensor(x))
    assert float(a.abs().max()) < 1e4
    p = fits["weighted"].predict_proba(torch.tensor(x))
    torch.testing.assert_close(fits["repeated"].predict_proba(torch.tensor(x)), p, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(
        fits["rescaled"].predict_proba(torch.tensor(x * np.r_[1e3, np.ones(29)])), p, rtol=1e-9, atol=1e-12
    )
    assert int(fits["weighted"].rank.min()) < 30


def test_gda_log_density_is_the_gaussian_mixture():
    model, x, _ = _fitted(QuadraticDiscriminantAnalysis)
    comps = torch.distributions.MultivariateNormal(model.means, covariance_matrix=model.covariance)
    expected = torch.logsumexp(comps.log_prob(x.unsqueeze(1)) + model.log_prior, dim=1)
    torch.testing.assert_close(model.log_prob(x), expected, rtol=1e-10, atol=1e-10)
    shared, x, _ = _fitted(LinearDiscriminantAnalysis)
    comps = torch.distributions.MultivariateNormal(shared.means, covariance_matrix=shared.covariance)
    expected = torch.logsumexp(comps.log_prob(x.unsqueeze(1)) + shared.log_prior, dim=1)
    torch.testing.assert_close(shared.log_prob(x), expected, rtol=1e-10, atol=1e-10)


def test_gda_mle_is_the_closed_form():
    """pi_k = n_k/n, mu_k = class mean, Sigma = sum_k (n_k/n) S_k (the lecture notes, §4; PRML §4.2.2)."""
    x, y = gaussian_classes(n=301)
    model = LinearDiscriminantAnalysis(4, 3)
    model.fit(x, y)
    n = len(y)
    sigma = torch.zeros(4, 4)
    for k in range(3):
        xk = x[y == k]
        mu = xk.mean(0)
        torch.testing.assert_close(model.means[k], mu)
        sk = (xk - mu).T @ (xk - mu) / len(xk)
        sigma += len(xk) / n * sk
        torch.testing.assert_close(model.log_prior[k].exp(), torch.tensor(len(xk) / n, dtype=x.dtype))
    torch.testing.assert_close(model.covariance, sigma, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("d", [1, 2, 5, 13])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_parameter_counts(d, k):
    lda = LinearDiscriminantAnalysis(d, k)
    qda = QuadraticDiscriminantAnalysis(d, k)
    if k == 2:  # the lecture notes' counts (§7, "Degrees of freedom")
        assert lda.n_parameters == d * (d + 5) // 2 + 1
        assert qda.n_parameters == d * (d + 3) + 1
    assert lda.n_parameters == k * d + d * (d + 1) // 2 + k - 1
    assert qda.n_parameters == k * d + k * d * (d + 1) // 2 + k - 1


# -- singular covariances ------------------------------------------------------------
def test_too_few_samples_per_class_falls_back_with_a_warning():
    x, y = gaussian_classes(n=9, d=5, k=3)  # 3 samples per class, 5 features
    model = QuadraticDiscriminantAnalysis(5, 3)
    with pytest.warns(NumericalWarning, match="singular"):
        model.fit(x, y)
    p = model.predict_proba(torch.randn(20, 5))
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p.sum(1), torch.ones(20))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        QuadraticDiscriminantAnalysis(5, 3, reg=0.1).fit(x, y)  # a chosen regularizer: no warning


def test_constant_feature_falls_back_with_a_warning():
    x, y = gaussian_classes()
    x[:, 2] = 1.5
    for cls in (LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis):
        model = cls(4, 3)
        with pytest.warns(NumericalWarning):
            model.fit(x, y)
        probe = x.clone()
        probe[:, 2] = 2.0  # off the constant: a huge but finite Mahalanobis distance
        assert torch.isfinite(model.predict_proba(probe)).all()
        assert torch.isfinite(model.log_prob(x)).all()


def test_single_sample_class_and_all_constant_data():
    x, y = gaussian_classes(n=30, d=3, k=2)
    y[0] = 2
    model = QuadraticDiscriminantAnalysis(3, 3)
    with pytest.warns(NumericalWarning):
        model.fit(x, y)
    assert torch.isfinite(model.predict_proba(x)).all()
    const = torch.zeros(12, 3)
    model = LinearDiscriminantAnalysis(3, 2)
    with pytest.warns(NumericalWarning):
        model.fit(const, torch.arange(12) % 2)
    assert torch.isfinite(model.predict_proba(torch.randn(4, 3))).all()


def test_gda_argument_errors():
    with pytest.raises(InputError, match="covariance"):
        GaussianDiscriminantAnalysis(3, 2, covariance="diagonal")
    with pytest.raises(InputError, match="shrinkage"):
        LinearDiscriminantAnalysis(3, 2, shrinkage=1.5)
    with pytest.raises(InputError, match="shrinkage: expected 'auto'"):
        LinearDiscriminantAnalysis(3, 2, shrinkage="ledoit")
    with pytest.raises(InputError, match="inverse"):
        LinearDiscriminantAnalysis(3, 2, inverse="svd")
    with pytest.raises(InputError, match="tol"):
        QuadraticDiscriminantAnalysis(3, 2, inverse="pinv", tol=-1.0)
    with pytest.raises(InputError, match="reg"):
        QuadraticDiscriminantAnalysis(3, 2, reg=-0.1)
    model = LinearDiscriminantAnalysis(3, 2)
    with pytest.raises(InputError, match="dense"):
        model.fit(torch.eye(3).to_sparse(), torch.tensor([0, 1, 0]))
    with pytest.raises(InputError, match="array-like of numbers"):
        model.fit(np.array([["a"] * 3] * 3), torch.tensor([0, 1, 0]))


@pytest.mark.parametrize("shrinkage", [0.0, 0.3])
def test_a_checkpoint_from_before_shrinkage_auto_loads(shrinkage):
    """A state dict saved before the Ledoit-Wolf intensities were stored (no
    ``shrinkage_intensity``) loads strictly: its covariances were shrunk by the fixed
    ``shrinkage``, which becomes each class's intensity; predictions are unchanged."""
    x, y = skdata.load_iris(return_X_y=True)
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    fitted = LinearDiscriminantAnalysis(4, 3, shrinkage=shrinkage, dtype=torch.float64)
    fitted.fit(x, y)
    old = {k: v for k, v in fitted.state_dict().items() if k != "shrinkage_intensity"}
    loaded = LinearDiscriminantAnalysis(4, 3, shrinkage=shrinkage, dtype=torch.float64)
    loaded.load_state_dict(old)
    assert torch.equal(loaded.shrinkage_intensity, torch.full((3,), shrinkage, dtype=torch.float64))
    assert torch.equal(loaded.predict_proba(x), fitted.predict_proba(x))
