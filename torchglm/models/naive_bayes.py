"""Naive Bayes classifiers: features independent given the class.

``p(x | C_k) = prod_j p(x_j | C_k)`` (the lecture notes on probabilistic classification, §1, §4 and §13;
Murphy §3.5; Manning et al. §13.2–13.3).
Each variant is a one-parameter-per-feature family whose MLE is a ratio of
per-class sums, smoothed by pseudo-counts:

=============  ==========================  =============================================
variant        ``p(x_j | C_k)``             estimate
=============  ==========================  =============================================
Multinomial    ``theta_kj^{x_j}`` (words)   ``(N_kj + alpha_j) / (N_k + sum_j alpha_j)``
Bernoulli      ``p_kj^{x_j}(1-p_kj)^{1-x_j}`` ``(N_kj + alpha) / (n_k + 2 alpha)``
Poisson        ``Poisson(x_j | lambda_kj)``  ``(N_kj + alpha) / (n_k + beta)``
Gaussian       ``N(x_j | mu_kj, s2_kj)``     ``mu_kj``, ``s2_kj + var_smoothing * max_j Var[x_j]``
=============  ==========================  =============================================

with ``N_kj = sum_{i in C_k} x_ij``, ``N_k = sum_j N_kj`` and ``n_k`` the class
size (all weighted by the sample weights); the multinomial's ``alpha`` may be one
number (``alpha_j = alpha``) or one per feature, as in scikit-learn. ``alpha = 0`` (and ``beta = 0``) is
the plain MLE of the lecture notes, §13 (the Lagrange-multiplier solution ``theta_ck =
N_ck / N_c``); when a feature then never occurs in a class, ``log theta = -inf``
and a test document containing it would get no finite log-likelihood, so the
fit falls back to ``alpha = 1e-10`` with a :class:`NumericalWarning` (as
scikit-learn does) instead of ever producing NaN probabilities.

The multinomial, Bernoulli and Poisson variants have log-odds linear in ``x``
(exponential-family class conditionals, the lecture notes, §5), so :meth:`to_linear`
returns the equivalent logistic or softmax regression.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .._validation import NumericalWarning, fail, stored_values, warn
from .generative import LOG_2PI, GenerativeClassifier, class_sums, matmul, row_sum

__all__ = ["MultinomialNB", "BernoulliNB", "GaussianNB", "PoissonNB"]

_ALPHA_FALLBACK = 1e-10


def _check_non_negative(name: str, x: torch.Tensor, extremes: tuple[float, float] | None = None) -> None:
    """The count models' support: ``x >= 0``, integer or not (see :class:`_CountSums`).
    Decided by the smallest stored value: ``extremes`` where the finiteness check read
    it, else one reduction (``(values < 0).any()`` took 3.7 ms on 3.75 million
    values, a third of a MultinomialNB fit of the 25,000 x 10,000 bag of words; the
    minimum 0.9 ms)."""
    if extremes is None:
        values = stored_values(x)
        if values.numel() == 0:
            return
        lo = float(values.min())
    else:
        lo = extremes[0]
    if lo < 0:
        raise fail(name, "non-negative counts or weights (such as tf-idf)", f"a negative value (min {lo:g})")


def _smoothing(alpha: float, has_zero: bool, what: str) -> float:
    """``alpha``, or the fallback when ``alpha == 0`` leaves a zero probability."""
    if alpha == 0 and has_zero:
        warn(
            f"alpha=0 leaves {what} at probability 0 (log-likelihood -inf for data containing it); "
            f"using alpha={_ALPHA_FALLBACK:g} instead",
            NumericalWarning,
        )
        return _ALPHA_FALLBACK
    return alpha


def _check_alpha(name: str, value: float) -> float:
    scalar = isinstance(value, numbers.Real) or (isinstance(value, torch.Tensor) and value.dim() == 0)
    if isinstance(value, bool) or not scalar:
        raise fail(name, "a finite number >= 0", repr(value))
    if not float(value) >= 0.0 or float(value) == float("inf"):
        raise fail(name, "a finite number >= 0", value)
    return float(value)


def _check_alpha_vector(name: str, value, n_features: int) -> float | torch.Tensor:
    """A scalar ``alpha`` (returned as a float) or one per feature (a float64 CPU tensor
    (d,)), as scikit-learn's ``MultinomialNB(alpha=array)`` accepts.

    Raises:
        InputError: for anything else: a string, a non-numeric or ragged sequence, the
            wrong length, a negative, NaN or infinite entry.
    """
    if isinstance(value, (numbers.Real, torch.Tensor)) and not (
        isinstance(value, torch.Tensor) and value.dim() > 0
    ):
        return _check_alpha(name, value)
    expected = f"a number >= 0 or {n_features} numbers >= 0 (one per feature)"
    try:
        arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
            raise TypeError
        vec = torch.as_tensor(arr, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise fail(name, expected, repr(value)) from None
    if vec.dim() == 0:
        return _check_alpha(name, float(vec))
    if vec.dim() != 1 or vec.shape[0] != n_features:
        raise fail(
            name, f"a number or shape ({n_features},) (one value per feature)", f"shape {tuple(vec.shape)}"
        )
    bad = ~(torch.isfinite(vec) & (vec >= 0))
    if bool(bad.any()):
        j = int(bad.nonzero()[0, 0])
        raise fail(name, "finite values >= 0", f"{name}[{j}] = {float(vec[j])}")
    return vec


class _CountSums:
    """Count features (multinomial, Poisson), summed per class into ``feature_count``
    (K, d), the one sufficient statistic of both models.

    The features may be any non-negative reals, not only integer counts: term
    weights such as tf-idf, the usual input of text classifiers (Rennie et al.,
    "Tackling the poor assumptions of naive Bayes text classifiers", ICML 2003, §4;
    Manning, Raghavan & Schütze, *Introduction to Information Retrieval*, §13.2 and
    §6.2). Classification needs only the part of ``log p(x | C_k)`` that depends
    on the class, which is linear in ``x``: ``sum_j x_j log theta_kj``
    (multinomial) and ``sum_j x_j log lambda_kj - lambda_kj`` (Poisson). The
    class-free terms (the multinomial coefficient, ``-sum_j log x_j!``) cancel in
    Bayes' rule, and for non-integer ``x`` the class-dependent part is the
    quasi-log-likelihood of the variance function ``V(mu) = mu`` (McCullagh &
    Nelder, *Generalized Linear Models*, 2nd ed., §9.2, Table 9.1), maximized by
    the same ratio-of-sums estimates. For non-integer ``x``, ``log_prob`` keeps
    those terms through ``lgamma(x + 1)`` (the continuous extension of ``log x!``),
    so it is a score, not the log-probability of a count vector. Negative values
    have no such reading and raise an InputError.
    """

    def _check_domain(self, name, x, extremes):
        _check_non_negative(name, x, extremes)

    def _statistic_shapes(self):
        return {"feature_count": (self.n_classes, self.n_features)}

    def _batch_statistics(self, x, r):
        return {"feature_count": class_sums(x, r)}


class MultinomialNB(_CountSums, GenerativeClassifier):
    """Multinomial Naive Bayes for word counts (the lecture notes, §1 and §13).

    A document is a bag of ``L = sum_j x_j`` tokens drawn from the class's
    categorical distribution ``theta_k`` over the vocabulary::

        log p(x | C_k) = sum_j x_j log theta_kj + log (L! / prod_j x_j!)
        theta_kj = (N_kj + alpha_j) / (N_k + sum_j alpha_j)

    The multinomial coefficient is shared by the classes (it cancels in the
    posterior) and makes ``log_prob`` the log-probability of the count vector
    given its length. :meth:`sample` draws lengths from a Poisson with the
    class's mean length ``N_k / n_k`` (a length model used only for sampling).

    Args:
        n_features: vocabulary size ``d``.
        n_classes: number of classes.
        alpha: additive (Laplace/Lidstone) smoothing, ``>= 0``: one number, or one per
            feature (a sequence, array or tensor of length ``d``), giving
            ``theta_kj = (N_kj + alpha_j) / (N_k + sum_j alpha_j)``; scikit-learn's
            ``MultinomialNB(alpha=..., force_alpha=True)``.
        priors: fixed class priors or ``None`` to fit them.
        dtype: dtype of the fitted statistics.

    Accepts dense or torch sparse (COO/CSR) matrices of non-negative counts or
    real-valued term weights such as tf-idf (see :class:`_CountSums`:
    ``N_kj`` is then the class's total weight of word ``j``).

    Example:
        >>> nb = MultinomialNB(3, 2, alpha=1.0)
        >>> z = torch.tensor([[3.0, 0.0, 1.0], [0.0, 2.0, 2.0]])
        >>> result = nb.fit(z, torch.tensor([0, 1]))
        >>> nb.log_theta.exp()[0]          # (3 + 1, 0 + 1, 1 + 1) / (4 + 3)
        tensor([0.5714, 0.1429, 0.2857])
    """

    accepts_sparse = True

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        alpha: float = 1.0,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(n_features, n_classes, priors, dtype)
        self.alpha = _check_alpha_vector("alpha", alpha, n_features)
        K, d = n_classes, n_features
        self.register_buffer("feature_count", torch.zeros(K, d, dtype=self.dtype))
        self.register_buffer("log_theta", torch.full((K, d), -math.log(d), dtype=self.dtype))
        self.register_buffer("mean_length", torch.zeros(K, dtype=self.dtype))

    @property
    def n_parameters(self) -> int:
        """``K (d - 1)`` word probabilities + ``K - 1`` priors."""
        return self.n_classes * (self.n_features - 1) + self._n_prior_parameters

    def _finalize(self, stats, class_count):
        self._check_class_count(class_count)
        N = stats["feature_count"]
        if isinstance(self.alpha, float):
            alpha = _smoothing(self.alpha, bool((N == 0).any()), "a word never seen in a class")
        else:
            # per feature: only the zero entries whose word is missing from a class fall back
            alpha = self.alpha.to(N.device, N.dtype)
            fallback = (alpha == 0) & (N == 0).any(0)
            if bool(fallback.any()):
                _smoothing(0.0, True, f"{int(fallback.sum())} word(s) never seen in a class")
                alpha = torch.where(fallback, torch.full_like(alpha, _ALPHA_FALLBACK), alpha)
        smoothed = N + alpha
        self.feature_count.copy_(N)
        self.log_theta.copy_(smoothed.log() - smoothed.sum(1, keepdim=True).log())
        self.mean_length.copy_(N.sum(1) / class_count)
        self._set_fitted(class_count)

    def class_log_likelihood(self, x):
        length = row_sum(x)
        log_coef = torch.lgamma(length + 1) - row_sum(x, lambda v: torch.lgamma(v + 1))
        return matmul(x, self.log_theta.T) + log_coef.unsqueeze(1)

    def relative_log_likelihood(self, x):
        """``sum_j x_j log theta_kj``: the multinomial coefficient is shared by the classes."""
        return matmul(x, self.log_theta.T)

    def _sample_features(self, y, generator):
        lengths = torch.poisson(self.mean_length[y], generator=generator).long()
        n, d = y.shape[0], self.n_features
        counts = torch.zeros(n, d, dtype=self.dtype, device=y.device)
        max_len = int(lengths.max()) if n else 0
        if max_len:
            tokens = torch.multinomial(
                self.log_theta[y].exp(), max_len, replacement=True, generator=generator
            )
            keep = torch.arange(max_len, device=y.device).unsqueeze(0) < lengths.unsqueeze(1)
            counts.scatter_add_(1, tokens, keep.to(self.dtype))
        return counts

    def _linear_parameters(self):
        """``w_kj = log theta_kj``, ``w_k0 = 0`` (the lecture notes, §13:
        ``w_k = log theta_1k - log theta_2k``)."""
        return self.log_theta, torch.zeros_like(self.log_prior)

    def extra_repr(self):
        alpha = self.alpha if isinstance(self.alpha, float) else f"<{self.alpha.numel()} per-feature values>"
        return f"{super().extra_repr()}, alpha={alpha}"


class BernoulliNB(GenerativeClassifier):
    """Bernoulli Naive Bayes for binary features (the lecture notes, §4, "GDA: discrete features")::

        log p(x | C_k) = sum_j x_j log p_kj + (1 - x_j) log(1 - p_kj)
        p_kj = (N_kj + alpha) / (n_k + 2 alpha)

    Args:
        n_features: number of binary features ``d``.
        n_classes: number of classes.
        alpha: additive smoothing ``>= 0`` (scikit-learn's ``BernoulliNB(alpha, force_alpha=True)``).
        binarize: ``None`` requires features in {0, 1}; a threshold ``t >= 0``
            maps ``x > t`` to 1 and the rest to 0 (scikit-learn's ``binarize``).
        priors: fixed class priors or ``None`` to fit them.
        dtype: dtype of the fitted statistics.

    Accepts dense or torch sparse (COO/CSR) matrices.

    Example:
        >>> nb = BernoulliNB(2, 2, alpha=1.0)
        >>> result = nb.fit(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), torch.tensor([0, 0, 1]))
        >>> nb.log_p.exp()[0]              # (2 + 1, 1 + 1) / (2 + 2)
        tensor([0.7500, 0.5000])
    """

    accepts_sparse = True

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        alpha: float = 1.0,
        binarize: float | None = None,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        self.alpha = _check_alpha("alpha", alpha)
        if binarize is not None:
            binarize = _check_alpha("binarize", binarize)
        self.binarize = binarize
        super().__init__(n_features, n_classes, priors, dtype)
        K, d = n_classes, n_features
        self.register_buffer("feature_count", torch.zeros(K, d, dtype=self.dtype))
        self.register_buffer("log_p", torch.full((K, d), -math.log(2), dtype=self.dtype))
        self.register_buffer("log1m_p", torch.full((K, d), -math.log(2), dtype=self.dtype))

    @property
    def n_parameters(self) -> int:
        """``K d`` probabilities + ``K - 1`` priors."""
        return self.n_classes * self.n_features + self._n_prior_parameters

    def _binary(self, x):
        if self.binarize is None:
            return x
        if x.layout == torch.strided:
            return (x > self.binarize).to(self.dtype)
        coo = x.to_sparse_coo().coalesce()
        values = (coo.values() > self.binarize).to(self.dtype)
        return torch.sparse_coo_tensor(coo.indices(), values, coo.shape)

    def _check_domain(self, name, x, extremes):
        if self.binarize is None:
            values = stored_values(x)
            bad = (values != 0) & (values != 1)
            if bool(bad.any()):
                raise fail(
                    name, "binary features in {0, 1} (or set binarize)", f"a value {float(values[bad][0]):g}"
                )

    def _statistic_shapes(self):
        return {"feature_count": (self.n_classes, self.n_features)}

    def _batch_statistics(self, x, r):
        return {"feature_count": class_sums(self._binary(x), r)}

    def _finalize(self, stats, class_count):
        self._check_class_count(class_count)
        N = stats["feature_count"]
        n = class_count.unsqueeze(1)
        alpha = _smoothing(
            self.alpha, bool(((N == 0) | (N == n)).any()), "a feature that is always 0 or always 1 in a class"
        )
        log_den = (n + 2 * alpha).log()
        self.feature_count.copy_(N)
        self.log_p.copy_((N + alpha).log() - log_den)
        self.log1m_p.copy_((n - N + alpha).log() - log_den)
        self._set_fitted(class_count)

    def class_log_likelihood(self, x):
        x = self._binary(x)
        return matmul(x, (self.log_p - self.log1m_p).T) + self.log1m_p.sum(1)

    def _sample_features(self, y, generator):
        return torch.bernoulli(self.log_p[y].exp(), generator=generator)

    def _linear_parameters(self):
        """``w_kj = log p_kj / (1 - p_kj)``, ``w_k0 = sum_j log(1 - p_kj)`` (the lecture notes, §4)."""
        if self.binarize is not None:
            raise NotImplementedError("to_linear() needs binarize=None: thresholding is not linear in x")
        return self.log_p - self.log1m_p, self.log1m_p.sum(1)

    def extra_repr(self):
        return f"{super().extra_repr()}, alpha={self.alpha}, binarize={self.binarize}"


class PoissonNB(_CountSums, GenerativeClassifier):
    """Poisson Naive Bayes for counts (the lecture notes, §4: "Poisson in the case of count data")::

        log p(x | C_k) = sum_j x_j log lambda_kj - lambda_kj - log x_j!
        lambda_kj = (N_kj + alpha) / (n_k + beta)

    ``lambda_kj`` is the posterior mean under a ``Gamma(alpha, beta)`` (shape,
    rate) prior, i.e. ``alpha`` pseudo-counts spread over ``beta`` pseudo-samples;
    ``alpha = beta = 0`` is the MLE ``N_kj / n_k``.

    Args:
        n_features: number of count features ``d``.
        n_classes: number of classes.
        alpha: prior shape (pseudo-counts), ``>= 0``.
        beta: prior rate (pseudo-samples), ``>= 0``.
        priors: fixed class priors or ``None`` to fit them.
        dtype: dtype of the fitted statistics.

    Accepts dense or torch sparse (COO/CSR) matrices of non-negative counts, or of
    non-negative reals, for which ``x log lambda - lambda`` is the Poisson
    quasi-log-likelihood (see :class:`_CountSums`).

    Example:
        >>> nb = PoissonNB(1, 2, alpha=0.0, beta=0.0)     # the MLE: class means
        >>> result = nb.fit(torch.tensor([[1.0], [3.0], [5.0]]), torch.tensor([0, 0, 1]))
        >>> nb.rate.flatten()
        tensor([2., 5.])
    """

    accepts_sparse = True

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        alpha: float = 1.0,
        beta: float = 1.0,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        self.alpha = _check_alpha("alpha", alpha)
        self.beta = _check_alpha("beta", beta)
        super().__init__(n_features, n_classes, priors, dtype)
        K, d = n_classes, n_features
        self.register_buffer("feature_count", torch.zeros(K, d, dtype=self.dtype))
        self.register_buffer("rate", torch.ones(K, d, dtype=self.dtype))

    @property
    def n_parameters(self) -> int:
        """``K d`` rates + ``K - 1`` priors."""
        return self.n_classes * self.n_features + self._n_prior_parameters

    def _finalize(self, stats, class_count):
        self._check_class_count(class_count)
        N = stats["feature_count"]
        alpha = _smoothing(self.alpha, bool((N == 0).any()), "a feature that is always 0 in a class")
        self.feature_count.copy_(N)
        self.rate.copy_((N + alpha) / (class_count.unsqueeze(1) + self.beta))
        self._set_fitted(class_count)

    def class_log_likelihood(self, x):
        log_fact = row_sum(x, lambda v: torch.lgamma(v + 1))
        return matmul(x, self.rate.log().T) - self.rate.sum(1) - log_fact.unsqueeze(1)

    def relative_log_likelihood(self, x):
        """``sum_j x_j log lambda_kj - lambda_kj``: ``sum_j log x_j!`` is shared by the classes."""
        return matmul(x, self.rate.log().T) - self.rate.sum(1)

    def _sample_features(self, y, generator):
        return torch.poisson(self.rate[y], generator=generator)

    def _linear_parameters(self):
        """``w_kj = log lambda_kj``, ``w_k0 = -sum_j lambda_kj``."""
        return self.rate.log(), -self.rate.sum(1)

    def extra_repr(self):
        return f"{super().extra_repr()}, alpha={self.alpha}, beta={self.beta}"


class GaussianNB(GenerativeClassifier):
    """Gaussian Naive Bayes: independent normal features per class::

        log p(x | C_k) = -1/2 sum_j [ log(2 pi s2_kj) + (x_j - mu_kj)^2 / s2_kj ]
        s2_kj = S_kj + var_smoothing * max_j Var[x_j]

    with ``S_kj`` the (biased, MLE) within-class variance and ``Var[x_j]`` the
    variance of feature ``j`` over all training samples (scikit-learn's
    ``GaussianNB(var_smoothing=...)``; with sample weights both are weighted).
    Both come from centred sums (:class:`~torchglm.models._moments.ClassMoments`),
    so an offset common to the features costs no precision.
    If a variance is still 0 (every feature constant within a class and no
    smoothing mass), ``eps * max(1, max_j E[x_j^2])`` is added with a
    :class:`NumericalWarning`, so probabilities stay finite; a feature constant
    in every class then drops out of the posterior (see
    :meth:`relative_log_likelihood`).

    Args:
        n_features: number of features ``d``.
        n_classes: number of classes.
        var_smoothing: ``>= 0``, fraction of the largest feature variance added
            to every variance.
        priors: fixed class priors or ``None`` to fit them.
        dtype: dtype of the fitted statistics.

    Example:
        >>> nb = GaussianNB(2, 2)
        >>> result = nb.fit(torch.tensor([[0.0, 1.0], [2.0, 3.0], [9.0, 9.0], [11.0, 7.0]]),
        ...                 torch.tensor([0, 0, 1, 1]))
        >>> nb.means
        tensor([[ 1.,  2.],
                [10.,  8.]])
    """

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        var_smoothing: float = 1e-9,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        self.var_smoothing = _check_alpha("var_smoothing", var_smoothing)
        super().__init__(n_features, n_classes, priors, dtype)
        K, d = n_classes, n_features
        self.register_buffer("means", torch.zeros(K, d, dtype=self.dtype))
        self.register_buffer("var", torch.ones(K, d, dtype=self.dtype))

    @property
    def n_parameters(self) -> int:
        """``2 K d`` means and variances + ``K - 1`` priors."""
        return 2 * self.n_classes * self.n_features + self._n_prior_parameters

    #: per (class, feature) means and centred sums of squares (never E[x^2] - mu^2).
    _moments_kind = "diagonal"

    def _finalize(self, stats, class_count):
        self._check_class_count(class_count)
        n_k = class_count.unsqueeze(1)
        # max(., 0): the centred sum of squares of a constant feature may round below 0.
        means, scatter = stats["means"], stats["scatter"].clamp_min(0)
        var = scatter / n_k
        # Law of total variance: Var[x_j] = (sum_k M2_kj + sum_k n_k (mu_kj - mu_j)^2) / n.
        n = class_count.sum()
        total_mean = (n_k * means).sum(0) / n
        spread = means - total_mean
        total_var = (scatter + n_k * spread * spread).sum(0) / n
        var = var + self.var_smoothing * total_var.max()
        if bool((var <= 0).any()):
            floor = torch.finfo(var.dtype).eps * (total_var + total_mean * total_mean).max().clamp_min(1)
            warn(
                f"zero variance for some (class, feature) pairs even after var_smoothing="
                f"{self.var_smoothing:g}; added {float(floor):.3g} to every variance",
                NumericalWarning,
            )
            var = var + floor
        self.means.copy_(means)
        self.var.copy_(var)
        self._set_fitted(class_count)

    def _feature_terms(self, x):
        """``t_kj = (x_j - mu_kj)^2 / s2_kj + log s2_kj``, shape (n, K, d)."""
        diff = x.unsqueeze(1) - self.means.unsqueeze(0)
        return diff * diff / self.var + self.var.log()

    def class_log_likelihood(self, x):
        return -0.5 * (self._feature_terms(x).sum(2) + self.n_features * LOG_2PI)

    def relative_log_likelihood(self, x):
        """``-1/2 sum_j (t_kj - min_l t_lj)``: each feature's class-shared part removed
        before the sum, so a feature with the same mean and variance in every class
        (a constant feature) contributes exactly 0 however far ``x_j`` is from it."""
        t = self._feature_terms(x)
        return -0.5 * (t - t.amin(dim=1, keepdim=True)).sum(2)

    def _sample_features(self, y, generator):
        z = torch.randn(
            y.shape[0], self.n_features, generator=generator, dtype=self.dtype, device=self.means.device
        )
        return self.means[y] + self.var[y].sqrt() * z

    def extra_repr(self):
        return f"{super().extra_repr()}, var_smoothing={self.var_smoothing}"
