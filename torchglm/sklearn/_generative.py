"""scikit-learn estimators over the library's generative classifiers (GDA and naive
Bayes): ``fit`` is the core model's one pass of sufficient statistics, predictions
are its Bayes'-rule posteriors (``log_softmax`` of the joint log-likelihoods).
Parameter names follow scikit-learn's estimators of the same name where the meaning
is the same."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import check_non_negative

from .. import models
from .._validation import fail
from ._base import LabelEncoding, TorchEstimator, log_proba_output, to_numpy

__all__ = [
    "BernoulliNB",
    "GaussianNB",
    "LinearDiscriminantAnalysis",
    "MultinomialNB",
    "PoissonNB",
    "QuadraticDiscriminantAnalysis",
]


class _GenerativeEstimator(LabelEncoding, ClassifierMixin, TorchEstimator):
    """Fit, predict and the shared fitted attributes (``class_count_``, ``class_prior_``)."""

    #: count models: scikit-learn's "Negative values in data passed to ..." check first
    _non_negative: bool = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = self._non_negative
        return tags

    def _core_model(self, n_features: int, n_classes: int):
        raise NotImplementedError

    def _priors(self, n_classes: int):
        """Fixed class priors for the core model, or ``None`` to fit them."""
        return self.priors

    def _fitted_attributes(self, model) -> None:
        """Subclasses expose their statistics under scikit-learn's names."""

    def fit(self, X, y, sample_weight=None):
        """Maximum likelihood in one pass over ``X`` (n, d) and labels ``y`` (n,)."""
        X, y = self._validate_Xy(X, y)
        if self._non_negative and not isinstance(X, torch.Tensor):
            check_non_negative(X, f"{type(self).__name__} (input X)")
        encoded = self._encode(y)
        model = self._core_model(X.shape[1], len(self.classes_)).to(self._torch_device())
        model.fit(X, encoded, weight=self._sample_weight(sample_weight, X))
        self.model_ = model
        self.class_count_ = to_numpy(model.class_count)
        self.class_prior_ = to_numpy(model.log_prior.exp())
        self._fitted_attributes(model)
        return self

    def _log_proba(self, X) -> torch.Tensor:
        x = self._predict_input(X)  # before model_ is read: the fitted check first
        return self.model_.log_posterior(x)

    def predict_log_proba(self, X) -> np.ndarray:
        """``log p(C_k | x)`` (n, K), columns in the order of ``classes_``."""
        return log_proba_output(self._log_proba(X))

    def predict_proba(self, X) -> np.ndarray:
        return to_numpy(self._log_proba(X).exp())

    def predict(self, X) -> np.ndarray:
        return self._decode(self._log_proba(X).argmax(dim=1))


class _Discriminant(_GenerativeEstimator):
    def decision_function(self, X) -> np.ndarray:
        """Binary: the log-odds ``log p(C_1|x) / p(C_0|x)``; more classes: ``log p(C_k|x)``."""
        lp = self._log_proba(X)
        return to_numpy(lp[:, 1] - lp[:, 0] if lp.shape[1] == 2 else lp)

    def _fitted_attributes(self, model):
        self.means_ = to_numpy(model.means)
        self.covariance_ = to_numpy(model.covariance)


#: scikit-learn's solver names -> the core model's ``inverse``: ``"svd"`` never forms
#: ``Sigma^-1`` and handles a singular covariance by a rank-revealing generalized
#: inverse; ``"lsqr"`` and ``"eigen"`` solve with the covariance itself, which for
#: classification is the same discriminant (the eigen solver's extra is ``transform``).
_INVERSE_OF_SOLVER = {"svd": "pinv", "lsqr": "cholesky", "eigen": "cholesky"}


class _GaussianDiscriminant(_Discriminant):
    _solvers: tuple[str, ...] = ()

    def _core_options(self) -> dict:
        if self.solver not in self._solvers:
            raise fail("solver", f"one of {list(self._solvers)}", repr(self.solver))
        return {
            "shrinkage": 0.0 if self.shrinkage is None else self.shrinkage,
            "inverse": _INVERSE_OF_SOLVER[self.solver],
            "tol": self.tol,
            "dtype": self._torch_dtype(),
        }

    def _fitted_attributes(self, model):
        super()._fitted_attributes(model)
        self.shrinkage_ = to_numpy(model.shrinkage_intensity)


class LinearDiscriminantAnalysis(_GaussianDiscriminant):
    """Gaussian classes with one shared covariance (the core
    :class:`~torchglm.LinearDiscriminantAnalysis`): linear boundaries.

    Args:
        solver: ``"svd"`` (default, as scikit-learn): a singular covariance is
            handled by a generalized inverse on the span of the data (standardized
            singular values ``<= tol`` dropped); ``"lsqr"`` or ``"eigen"``: the
            covariance itself (with a jitter and a warning if it is singular). For
            a positive definite covariance all three give the same model; unlike
            scikit-learn's, ``"svd"`` accepts ``shrinkage``.
        shrinkage: ``None``, ``"auto"`` (Ledoit-Wolf per class on standardized
            features, scikit-learn's definition) or a float in [0, 1], towards the
            mean variance times I (scikit-learn's ``shrinkage=float``).
        priors: class priors in the order of ``classes_``, or ``None`` to fit them.
        tol: singular-value threshold of ``"svd"`` (scikit-learn's ``tol``).
        device, dtype: torch device and dtype of the fitted statistics.

    Attributes:
        classes_, means_ (K, d), covariance_ (d, d), class_count_, class_prior_,
        coef_/intercept_ (the implied linear model: (1, d)/(1,) for two classes,
        (K, d)/(K,) otherwise), shrinkage_ (K,) (each class's shrinkage intensity:
        the Ledoit-Wolf estimates for ``"auto"``), n_features_in_,
        feature_names_in_, model_.
    """

    _solvers = ("svd", "lsqr", "eigen")

    def __init__(self, solver="svd", shrinkage=None, priors=None, tol=1e-4, device="cpu", dtype="float64"):
        self.solver = solver
        self.shrinkage = shrinkage
        self.priors = priors
        self.tol = tol
        self.device = device
        self.dtype = dtype

    def _core_model(self, n_features, n_classes):
        return models.LinearDiscriminantAnalysis(
            n_features, n_classes, priors=self._priors(n_classes), **self._core_options()
        )

    def _fitted_attributes(self, model):
        super()._fitted_attributes(model)
        linear = model.to_linear()
        self.coef_ = to_numpy(linear.coef)
        self.intercept_ = to_numpy(linear.intercept)


class QuadraticDiscriminantAnalysis(_GaussianDiscriminant):
    """Gaussian classes with one covariance each (the core
    :class:`~torchglm.QuadraticDiscriminantAnalysis`): quadratic boundaries.

    Args:
        reg_param: in [0, 1], ``Sigma_k <- (1 - reg_param) Sigma_k + reg_param I``
            (scikit-learn's ``reg_param``; the core model's ``reg``).
        priors: as :class:`LinearDiscriminantAnalysis`.
        solver: ``"svd"`` (default) or ``"eigen"``, as :class:`LinearDiscriminantAnalysis`;
            where scikit-learn refuses a singular class covariance, ``"svd"`` takes the
            degenerate Gaussian on the span of the class's data, with a warning.
        shrinkage: ``None``, ``"auto"`` or a float in [0, 1], as
            :class:`LinearDiscriminantAnalysis`, applied to each class's covariance.
        tol, device, dtype: as :class:`LinearDiscriminantAnalysis` (``tol`` is on
            standardized singular values, not scikit-learn QDA's absolute variances).
    """

    _solvers = ("svd", "eigen")

    def __init__(
        self,
        reg_param=0.0,
        priors=None,
        solver="svd",
        shrinkage=None,
        tol=1e-4,
        device="cpu",
        dtype="float64",
    ):
        self.reg_param = reg_param
        self.priors = priors
        self.solver = solver
        self.shrinkage = shrinkage
        self.tol = tol
        self.device = device
        self.dtype = dtype

    def _core_model(self, n_features, n_classes):
        return models.QuadraticDiscriminantAnalysis(
            n_features, n_classes, reg=self.reg_param, priors=self._priors(n_classes), **self._core_options()
        )


class GaussianNB(_GenerativeEstimator):
    """Gaussian naive Bayes (the core :class:`~torchglm.GaussianNB`).

    Args:
        priors: class priors, or ``None`` to fit them.
        var_smoothing: fraction of the largest feature variance added to every variance.
        device, dtype: torch device and dtype of the fitted statistics.

    Attributes: ``theta_`` (K, d) means, ``var_`` (K, d) variances, ``class_count_``,
    ``class_prior_``, ``classes_``, ``model_``.
    """

    def __init__(self, priors=None, var_smoothing=1e-9, device="cpu", dtype="float64"):
        self.priors = priors
        self.var_smoothing = var_smoothing
        self.device = device
        self.dtype = dtype

    def _core_model(self, n_features, n_classes):
        return models.GaussianNB(
            n_features,
            n_classes,
            var_smoothing=self.var_smoothing,
            priors=self._priors(n_classes),
            dtype=self._torch_dtype(),
        )

    def _fitted_attributes(self, model):
        self.theta_ = to_numpy(model.means)
        self.var_ = to_numpy(model.var)


class _DiscreteNB(_GenerativeEstimator):
    """``fit_prior``/``class_prior`` as scikit-learn's discrete naive Bayes."""

    _accept_sparse = True

    def _priors(self, n_classes):
        if self.class_prior is not None:
            return self.class_prior
        return None if self.fit_prior else [1.0 / n_classes] * n_classes


class MultinomialNB(_DiscreteNB):
    """Multinomial naive Bayes (the core :class:`~torchglm.MultinomialNB`) for word
    counts or any non-negative term weights such as tf-idf (a ``TfidfVectorizer``
    in a pipeline); dense or scipy.sparse ``X`` (kept sparse). Negative values raise.

    Args:
        alpha: additive smoothing ``>= 0`` (scikit-learn's ``force_alpha=True``).
        fit_prior: fit the class priors (else uniform); class_prior: fixed priors.
        device, dtype: torch device and dtype of the fitted statistics.

    Attributes: ``feature_count_``, ``feature_log_prob_`` (K, d), ``class_count_``,
    ``class_prior_``, ``classes_``, ``model_``.
    """

    _non_negative = True

    def __init__(self, alpha=1.0, fit_prior=True, class_prior=None, device="cpu", dtype="float64"):
        self.alpha = alpha
        self.fit_prior = fit_prior
        self.class_prior = class_prior
        self.device = device
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # the multinomial sees only each row's proportions x / sum_j x_j, not its
        # length: on the checks' shifted Gaussian blobs its training accuracy is low by
        # the model, not by a bug (scikit-learn's MultinomialNB sets the same tag)
        tags.classifier_tags.poor_score = True
        return tags

    def _core_model(self, n_features, n_classes):
        return models.MultinomialNB(
            n_features, n_classes, alpha=self.alpha, priors=self._priors(n_classes), dtype=self._torch_dtype()
        )

    def _fitted_attributes(self, model):
        self.feature_count_ = to_numpy(model.feature_count)
        self.feature_log_prob_ = to_numpy(model.log_theta)


class BernoulliNB(_DiscreteNB):
    """Bernoulli naive Bayes (the core :class:`~torchglm.BernoulliNB`).

    Args:
        alpha: additive smoothing ``>= 0``.
        binarize: threshold, ``x > binarize`` is 1 (scikit-learn's default 0.0);
            ``None`` requires features in {0, 1}.
        fit_prior, class_prior, device, dtype: as :class:`MultinomialNB`.

    Attributes: ``feature_count_``, ``feature_log_prob_`` (K, d), ``class_count_``,
    ``class_prior_``, ``classes_``, ``model_``.
    """

    def __init__(
        self, alpha=1.0, binarize=0.0, fit_prior=True, class_prior=None, device="cpu", dtype="float64"
    ):
        self.alpha = alpha
        self.binarize = binarize
        self.fit_prior = fit_prior
        self.class_prior = class_prior
        self.device = device
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # thresholding continuous features at ``binarize`` discards most of their
        # information: low training accuracy on such data is the model, not a bug
        tags.classifier_tags.poor_score = True
        return tags

    def _core_model(self, n_features, n_classes):
        return models.BernoulliNB(
            n_features,
            n_classes,
            alpha=self.alpha,
            binarize=self.binarize,
            priors=self._priors(n_classes),
            dtype=self._torch_dtype(),
        )

    def _fitted_attributes(self, model):
        self.feature_count_ = to_numpy(model.feature_count)
        self.feature_log_prob_ = to_numpy(model.log_p)


class PoissonNB(_DiscreteNB):
    """Poisson naive Bayes (the core :class:`~torchglm.PoissonNB`) for counts or other
    non-negative values (then ``x log lambda - lambda`` is the Poisson
    quasi-log-likelihood); ``lambda_kj = (N_kj + alpha) / (n_k + beta)``.

    Args:
        alpha, beta: Gamma prior shape (pseudo-counts) and rate (pseudo-samples).
        fit_prior, class_prior, device, dtype: as :class:`MultinomialNB`.

    Attributes: ``feature_count_``, ``rate_`` (K, d), ``class_count_``,
    ``class_prior_``, ``classes_``, ``model_``.
    """

    _non_negative = True

    def __init__(self, alpha=1.0, beta=1.0, fit_prior=True, class_prior=None, device="cpu", dtype="float64"):
        self.alpha = alpha
        self.beta = beta
        self.fit_prior = fit_prior
        self.class_prior = class_prior
        self.device = device
        self.dtype = dtype

    def _core_model(self, n_features, n_classes):
        return models.PoissonNB(
            n_features,
            n_classes,
            alpha=self.alpha,
            beta=self.beta,
            priors=self._priors(n_classes),
            dtype=self._torch_dtype(),
        )

    def _fitted_attributes(self, model):
        self.feature_count_ = to_numpy(model.feature_count)
        self.rate_ = to_numpy(model.rate)
