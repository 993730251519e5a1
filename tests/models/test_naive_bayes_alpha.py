"""MultinomialNB with one smoothing value per feature, against scikit-learn's
MultinomialNB(alpha=array, force_alpha=True), and one InputError per malformed alpha."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.naive_bayes import MultinomialNB as SkMultinomialNB

from torchglm import NumericalWarning
from torchglm._validation import InputError
from torchglm.models.naive_bayes import MultinomialNB
from torchglm.sklearn import MultinomialNB as GlmMultinomialNB


def _counts(n=60, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.poisson([[0.5, 2.0, 0.0, 3.0, 1.0]], size=(n, d)).astype(float)
    y = rng.integers(0, 3, n)
    x[y == 2, 4] = 0.0  # word 4 never occurs in class 2
    return x, y


@pytest.mark.parametrize("as_type", [list, np.asarray, torch.tensor])
def test_per_feature_alpha_matches_scikit_learn(as_type):
    x, y = _counts()
    alpha = [0.5, 1.0, 2.0, 0.1, 3.0]
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    sk = SkMultinomialNB(alpha=np.array(alpha), force_alpha=True).fit(x, y, sample_weight=w)
    nb = MultinomialNB(5, 3, alpha=as_type(alpha), dtype=torch.float64)
    nb.fit(torch.tensor(x), torch.tensor(y), torch.tensor(w))
    np.testing.assert_allclose(nb.log_theta.numpy(), sk.feature_log_prob_, rtol=1e-12)
    np.testing.assert_allclose(nb.predict_proba(torch.tensor(x)).numpy(), sk.predict_proba(x), rtol=1e-10)
    # theta_kj = (N_kj + alpha_j) / (N_k + sum_j alpha_j), by hand
    N = np.stack([(w[y == k, None] * x[y == k]).sum(0) for k in range(3)])
    ref = (N + alpha) / (N.sum(1, keepdims=True) + sum(alpha))
    np.testing.assert_allclose(nb.log_theta.exp().numpy(), ref, rtol=1e-12)
    # a constant vector is the scalar alpha
    vec = MultinomialNB(5, 3, alpha=np.full(5, 0.7), dtype=torch.float64)
    scalar = MultinomialNB(5, 3, alpha=0.7, dtype=torch.float64)
    for m in (vec, scalar):
        m.fit(torch.tensor(x), torch.tensor(y))
    torch.testing.assert_close(vec.log_theta, scalar.log_theta, rtol=1e-15, atol=0)


def test_the_estimator_passes_a_vector_alpha_through():
    x, y = _counts(seed=2)
    alpha = np.array([0.5, 1.0, 2.0, 0.1, 3.0])
    sk = SkMultinomialNB(alpha=alpha, force_alpha=True).fit(x, y)
    ours = GlmMultinomialNB(alpha=alpha).fit(x, y)
    np.testing.assert_allclose(ours.predict_proba(x), sk.predict_proba(x), rtol=1e-10)


def test_zero_entries_fall_back_only_where_a_word_is_missing():
    x, y = _counts()
    alpha = [0.0, 1.0, 0.0, 0.0, 0.0]  # word 2 never occurs anywhere, word 4 not in class 2
    nb = MultinomialNB(5, 3, alpha=alpha, dtype=torch.float64)
    with pytest.warns(NumericalWarning, match="alpha=0"):
        nb.fit(torch.tensor(x), torch.tensor(y))
    eff = np.array([0.0, 1.0, 1e-10, 0.0, 1e-10])
    N = np.stack([x[y == k].sum(0) for k in range(3)])
    np.testing.assert_allclose(
        nb.log_theta.exp().numpy(), (N + eff) / (N + eff).sum(1, keepdims=True), rtol=1e-12
    )
    assert bool(torch.isfinite(nb.log_theta).all())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MultinomialNB(5, 3, alpha=[0.0, 1.0, 1.0, 0.0, 1.0]).fit(torch.tensor(x), torch.tensor(y))


@pytest.mark.parametrize(
    "alpha, match",
    [
        ("1.0", "alpha: expected a number >= 0 or 5 numbers"),
        (["a", "b", "c", "d", "e"], "alpha: expected a number >= 0 or 5 numbers"),
        ([[1.0, 2.0], [3.0]], "alpha: expected a number >= 0 or 5 numbers"),
        ({"a": 1.0}, "alpha: expected a number >= 0 or 5 numbers"),
        (None, "alpha: expected a number >= 0 or 5 numbers"),
        ([True] * 5, "alpha: expected a number >= 0 or 5 numbers"),
        ([1.0, 2.0, 3.0], r"alpha: expected a number or shape \(5,\)"),
        (np.ones((5, 1)), r"alpha: expected a number or shape \(5,\)"),
        ([1.0, -2.0, 3.0, 1.0, 1.0], r"alpha: expected finite values >= 0, got alpha\[1\] = -2"),
        (torch.tensor([1.0, 1.0, float("nan"), 1.0, 1.0]), r"got alpha\[2\] = nan"),
        (-1.0, "alpha: expected a finite number >= 0"),
        (float("inf"), "alpha: expected a finite number >= 0"),
    ],
)
def test_malformed_alpha_is_one_input_error(alpha, match):
    with pytest.raises(InputError, match=match):
        MultinomialNB(5, 3, alpha=alpha)
