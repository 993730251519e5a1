"""Naive Bayes: against scikit-learn on its shipped datasets, closed forms, and bad input.

The shared base contract (Bayes' rule, batch splits, sampling, to_linear) is
tested for every model in test_generative.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn import datasets as skdata
from sklearn import naive_bayes as sknb

from torchglm import InputError, NumericalWarning
from torchglm.models import BernoulliNB, GaussianNB, MultinomialNB, PoissonNB


@pytest.fixture(scope="module")
def digits():
    x, y = skdata.load_digits(return_X_y=True)  # pixel counts 0..16, 10 classes
    return x.astype(np.float64), y


def _close(a, b, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=atol)


@pytest.mark.parametrize("alpha", [1.0, 0.25])
@pytest.mark.parametrize("fit_prior", [True, False])
def test_multinomial_matches_sklearn(digits, alpha, fit_prior):
    x, y = digits
    priors = None if fit_prior else [0.1] * 10
    ref = sknb.MultinomialNB(alpha=alpha, force_alpha=True, class_prior=priors).fit(x, y)
    model = MultinomialNB(64, 10, alpha=alpha, priors=priors)
    model.fit(torch.tensor(x), torch.tensor(y))
    _close(model.log_theta, ref.feature_log_prob_, 1e-10)
    _close(model.log_prior, ref.class_log_prior_, 1e-10)
    _close(model.feature_count, ref.feature_count_, 0)
    _close(model.predict_proba(torch.tensor(x)), ref.predict_proba(x))
    # sklearn's joint log-likelihood omits the multinomial coefficient, shared by the classes.
    ours = model(torch.tensor(x)).numpy()
    diff = ours - ref.predict_joint_log_proba(x)
    _close(diff - diff[:, :1], np.zeros_like(diff), 1e-8)


def test_multinomial_log_density_is_the_multinomial_pmf(digits):
    x, y = digits
    model = MultinomialNB(64, 10, alpha=0.5)
    model.fit(torch.tensor(x), torch.tensor(y))
    rows = x[:20]
    theta = model.log_theta.exp().numpy()
    expected = np.stack(
        [stats.multinomial.logpmf(rows, rows.sum(1), theta[k] / theta[k].sum()) for k in range(10)], axis=1
    )
    _close(model.class_log_likelihood(torch.tensor(rows)), expected, 1e-9)


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_bernoulli_matches_sklearn(digits, alpha):
    x, y = digits
    xb = (x > 4).astype(np.float64)
    ref = sknb.BernoulliNB(alpha=alpha, force_alpha=True, binarize=None).fit(xb, y)
    model = BernoulliNB(64, 10, alpha=alpha)
    model.fit(torch.tensor(xb), torch.tensor(y))
    _close(model.log_p, ref.feature_log_prob_, 1e-10)
    _close(model.predict_proba(torch.tensor(xb)), ref.predict_proba(xb))
    # binarize: thresholding counts inside the model equals thresholding outside it
    thr = BernoulliNB(64, 10, alpha=alpha, binarize=4.0)
    thr.fit(torch.tensor(x), torch.tensor(y))
    ref_thr = sknb.BernoulliNB(alpha=alpha, force_alpha=True, binarize=4.0).fit(x, y)
    _close(thr.predict_proba(torch.tensor(x)), ref_thr.predict_proba(x))


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer"])
@pytest.mark.parametrize("var_smoothing", [1e-9, 1e-3])
def test_gaussian_matches_sklearn(name, var_smoothing):
    x, y = getattr(skdata, f"load_{name}")(return_X_y=True)
    k = int(y.max()) + 1
    ref = sknb.GaussianNB(var_smoothing=var_smoothing).fit(x, y)
    model = GaussianNB(x.shape[1], k, var_smoothing=var_smoothing)
    model.fit(torch.tensor(x), torch.tensor(y))
    _close(model.means, ref.theta_, 1e-9 * np.abs(ref.theta_).max())
    np.testing.assert_allclose(model.var.numpy(), ref.var_, rtol=1e-8)
    _close(model.predict_proba(torch.tensor(x)), ref.predict_proba(x))


def test_gaussian_fixed_priors_match_sklearn():
    x, y = skdata.load_iris(return_X_y=True)
    ref = sknb.GaussianNB(priors=[0.6, 0.3, 0.1]).fit(x, y)
    model = GaussianNB(4, 3, priors=[0.6, 0.3, 0.1])
    model.fit(torch.tensor(x), torch.tensor(y))
    _close(model.predict_proba(torch.tensor(x)), ref.predict_proba(x))


def test_poisson_is_the_gamma_posterior_mean_and_the_poisson_pmf(digits):
    x, y = digits
    for alpha, beta in [(0.0, 0.0), (1.0, 1.0), (2.5, 0.5)]:
        model = PoissonNB(64, 10, alpha=alpha, beta=beta)
        with pytest.warns(NumericalWarning) if alpha == 0 else _no_warning():
            model.fit(torch.tensor(x), torch.tensor(y))
        eff_alpha = 1e-10 if alpha == 0 else alpha  # digits have all-zero pixels in a class
        for k in (0, 7):
            xk = x[y == k]
            np.testing.assert_allclose(
                model.rate[k].numpy(), (xk.sum(0) + eff_alpha) / (len(xk) + beta), rtol=1e-12
            )
    rows = x[:15]
    rate = model.rate.numpy()
    expected = np.stack([stats.poisson.logpmf(rows, rate[k]).sum(1) for k in range(10)], axis=1)
    _close(model.class_log_likelihood(torch.tensor(rows)), expected, 1e-9)


def test_poisson_mle_is_a_stationary_point_of_the_likelihood():
    """With alpha = beta = 0 the rates maximize sum_i log p(x_i | C_{y_i}) (autograd)."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(200) % 2
    x = torch.poisson(torch.tensor([[1.0, 4.0, 2.0], [3.0, 0.5, 2.0]])[y], generator=g)
    model = PoissonNB(3, 2, alpha=0.0, beta=0.0)
    model.fit(x, y)
    log_rate = model.rate.log().clone().requires_grad_(True)
    ll = (x * log_rate[y] - log_rate[y].exp()).sum()
    (grad,) = torch.autograd.grad(ll, log_rate)
    torch.testing.assert_close(grad, torch.zeros_like(grad), atol=1e-10, rtol=0)


class _no_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error", NumericalWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


# -- sparse input --------------------------------------------------------------------
@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB, PoissonNB])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_input_equals_dense(digits, cls, layout):
    x, y = digits
    x = (x > 4).astype(np.float64) if cls is BernoulliNB else x
    xt = torch.tensor(x)
    xs = xt.to_sparse() if layout == "coo" else xt.to_sparse_csr()
    dense, sparse = cls(64, 10), cls(64, 10)
    dense.fit(xt, torch.tensor(y))
    sparse.fit(xs, torch.tensor(y))
    torch.testing.assert_close(sparse.state_dict(), dense.state_dict())
    torch.testing.assert_close(sparse.predict_proba(xs), dense.predict_proba(xt), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sparse.log_prob(xs), dense.log_prob(xt), rtol=1e-12, atol=1e-12)


# -- bad input -----------------------------------------------------------------------
@pytest.mark.parametrize("cls", [MultinomialNB, PoissonNB])
def test_count_features_must_be_non_negative_and_may_be_fractional(cls):
    """Negative values are refused; non-integer ones (tf-idf weights) are fitted with the
    same ratio-of-sums estimates, and their posterior drops the class-free terms."""
    x = torch.tensor([[1.0, 2.0], [0.0, 3.0], [2.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0])
    model = cls(2, 2, dtype=torch.float64)
    with pytest.raises(InputError, match="X: expected non-negative counts"):
        model.fit(torch.tensor([[1.0, -2.0], [0.0, 3.0], [2.0, 0.0]]), y)
    with pytest.raises(InputError, match="non-negative"):
        model.fit(torch.tensor([[1.0, -2.0], [0.0, 3.0], [2.0, 0.0]]).to_sparse(), y)
    model.fit(x, y)
    with pytest.raises(InputError, match="X: expected non-negative counts or weights"):
        model.predict_proba(torch.tensor([[-0.5, 1.0]]))
    weights = torch.tensor([[0.25, 0.5], [0.0, 0.75], [0.5, 0.0]], dtype=torch.float64)
    model.fit(weights, y)
    torch.testing.assert_close(
        model.feature_count, torch.tensor([[0.75, 0.5], [0.0, 0.75]], dtype=torch.float64)
    )
    probe = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    w, b = model._linear_parameters()
    expected = torch.log_softmax(probe @ w.T + b + model.log_prior, dim=1)
    torch.testing.assert_close(model.predict_log_proba(probe), expected, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(model.log_prob(probe)).all()


def test_bernoulli_rejects_non_binary_values():
    model = BernoulliNB(2, 2)
    with pytest.raises(
        InputError, match="X: expected binary features in \\{0, 1\\} \\(or set binarize\\), got a value 2"
    ):
        model.fit(torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.tensor([0, 1]))
    with pytest.raises(InputError, match="binarize"):
        BernoulliNB(2, 2, binarize=-1.0)
    thresholded = BernoulliNB(2, 2, binarize=0.5)
    thresholded.fit(torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.tensor([0, 1]))
    with pytest.raises(NotImplementedError, match="binarize"):
        thresholded.to_linear()


@pytest.mark.parametrize(
    "cls,kw",
    [
        (MultinomialNB, {"alpha": -1.0}),
        (BernoulliNB, {"alpha": float("nan")}),
        (PoissonNB, {"beta": -0.5}),
        (GaussianNB, {"var_smoothing": -1e-9}),
        (MultinomialNB, {"alpha": float("inf")}),
    ],
)
def test_hyperparameter_errors(cls, kw):
    with pytest.raises(InputError):
        cls(3, 2, **kw)


@pytest.mark.parametrize("cls", [MultinomialNB, BernoulliNB, PoissonNB])
def test_alpha_zero_falls_back_instead_of_nan(cls):
    # Feature 1 never occurs in class 0: with alpha = 0, theta_01 = 0.
    x = torch.tensor([[2.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.0, 3.0, 1.0], [1.0, 1.0, 0.0]])
    x = x.clamp(max=1) if cls is BernoulliNB else x
    y = torch.tensor([0, 0, 1, 1])
    model = cls(3, 2, alpha=0.0)
    with pytest.warns(NumericalWarning, match="alpha=1e-10"):
        model.fit(x, y)
    probe = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    p = model.predict_proba(probe)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p.sum(1), torch.ones(2))


def test_gaussian_zero_variance_features():
    # A constant feature: var_smoothing (from the other features' spread) keeps it finite.
    x = torch.tensor([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [4.0, 5.0]])
    y = torch.tensor([0, 0, 1, 1])
    model = GaussianNB(2, 2)
    model.fit(x, y)
    assert torch.isfinite(model.predict_proba(torch.tensor([[2.5, 6.0]]))).all()
    # Every feature constant: nothing to smooth with, so the documented floor + warning.
    const = torch.full((4, 2), 3.0)
    model = GaussianNB(2, 2)
    with pytest.warns(NumericalWarning, match="zero variance"):
        model.fit(const, y)
    p = model.predict_proba(torch.tensor([[3.0, 3.0], [4.0, 2.0]]))
    assert torch.isfinite(p).all()
    # Both features are shared by the classes, so the posterior is the prior (the old
    # a - logsumexp(a) gave rows summing to 2 here).
    torch.testing.assert_close(p, model.log_prior.exp().expand(2, 2), rtol=0, atol=1e-15)


def test_sparse_rejected_where_unsupported():
    with pytest.raises(InputError, match="dense"):
        GaussianNB(3, 2).fit(torch.eye(3).to_sparse(), torch.tensor([0, 1, 0]))
    with pytest.raises(InputError, match="batch_size"):
        MultinomialNB(3, 2).fit(torch.eye(3).to_sparse(), torch.tensor([0, 1, 0]), batch_size=2)


@pytest.mark.parametrize(
    "cls,expected",
    [(MultinomialNB, 10 * 63 + 9), (BernoulliNB, 640 + 9), (PoissonNB, 640 + 9), (GaussianNB, 2 * 640 + 9)],
)
def test_parameter_counts(cls, expected):
    assert cls(64, 10).n_parameters == expected


def test_multinomial_to_linear_is_the_log_ratio_of_theta(digits):
    """w_k = log theta_1k - log theta_0k, w_0 = log pi_1 - log pi_0 (the lecture notes on
    probabilistic classification, §13)."""
    x, y = digits
    keep = y < 2
    model = MultinomialNB(64, 2, alpha=0.5)
    model.fit(torch.tensor(x[keep]), torch.tensor(y[keep]))
    linear = model.to_linear()
    torch.testing.assert_close(linear.linear.weight.detach()[0], model.log_theta[1] - model.log_theta[0])
    torch.testing.assert_close(linear.linear.bias.detach()[0], model.log_prior[1] - model.log_prior[0])
    ref = sknb.MultinomialNB(alpha=0.5).fit(x[keep], y[keep])
    with torch.no_grad():
        _close(linear.predict_proba(torch.tensor(x[keep])), ref.predict_proba(x[keep])[:, 1])
