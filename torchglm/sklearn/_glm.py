"""scikit-learn estimators over :class:`~torchglm.GeneralizedLinearModel` and the
library's solvers (no second implementation: ``fit`` builds the core model and calls
its ``fit``; predictions are the core model's).

The penalty. The library minimizes ``sum_i s_i nll_i / sum_i s_i + (l2 / 2) ||W||^2``
(the bias unpenalized). scikit-learn's classifiers minimize
``C sum_i s_i nll_i + (1/2) ||W||^2``: dividing by ``C sum_i s_i`` gives the same
minimizer with ``l2 = 1 / (C sum_i s_i)`` (``sum_i s_i = n`` without sample weights);
``C = inf`` is unpenalized. scikit-learn's GLM regressors (``PoissonRegressor``,
``GammaRegressor``, ``TweedieRegressor``) minimize
``(1 / (2 sum_i s_i)) sum_i s_i dev_i + (alpha / 2) ||W||^2``, and half the unit
deviance is the library's NLL up to a constant, so ``alpha`` *is* ``l2``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin

from .._validation import check_positive, fail
from ..families import get_family
from ..inference import GLMResults, glm_results
from ..models.glm import GeneralizedLinearModel, SoftmaxRegression
from ..models.glm import LogisticRegression as _Logistic
from ._base import LabelEncoding, LogProbaOutputs, TorchEstimator, check_target_values, to_numpy

__all__ = ["GLMClassifier", "GLMRegressor", "LogisticRegression", "ProbitRegression"]


def l2_from_C(C: float, total_weight: float) -> float:
    """The library's ``l2`` for scikit-learn's ``C``: ``1 / (C sum_i s_i)``; 0 for ``C = inf``."""
    check_positive("C", C)
    return 0.0 if math.isinf(C) else 1.0 / (C * float(total_weight))


class _GLMEstimator(TorchEstimator):
    """Shared by the GLM classifiers and the regressor: the solver call, fitted
    attributes and the statsmodels-style results."""

    _accept_sparse = True

    def _solver_options(self) -> dict:
        options = {}
        if self.max_iter is not None:
            options["max_iter"] = self.max_iter
        if self.tol is not None:
            options["tol"] = self.tol
        return options

    def _fit_core(self, model: GeneralizedLinearModel, X, y, weight) -> None:
        model = model.to(self._torch_device())
        result = model.fit(X, y, weight=weight, solver=self.solver, **self._solver_options())
        self.model_ = model
        self.fit_result_ = result
        self.n_iter_ = np.array([result.n_iter])
        self.converged_ = bool(result.converged)
        w = to_numpy(model.coef)
        b = to_numpy(model.intercept) if model.has_intercept else np.zeros(w.shape[0], w.dtype)
        self.coef_, self.intercept_ = self._shape_coef(w, b)

    def _shape_coef(self, w, b):
        return w, b

    def _targets_for_results(self, y):
        return y

    @torch.no_grad()
    def _eta(self, X) -> torch.Tensor:
        """``eta`` for ``X`` through the one prediction gate (:meth:`_predict_input`),
        then the core model's unchecked ``forward``."""
        x = self._predict_input(X)  # before model_ is read: the fitted check first
        return self.model_(x)

    def glm_results(self, X, y, sample_weight=None, **kwargs) -> GLMResults:
        """statsmodels-style inference (:func:`torchglm.glm_results`) for the fitted
        model on its training data ``X, y``: standard errors, z tests, intervals,
        deviance, AIC/BIC. Coefficients are named after ``feature_names_in_`` (a
        DataFrame's columns) when present. With ``C < inf`` (``alpha > 0``) the
        covariance is the Laplace/MAP one (see :class:`~torchglm.GLMResults`).

        ``kwargs``: ``alpha`` (interval level), ``use_t``, ``information``.
        """
        X = self._fitted_input(X)
        y = self._targets_for_results(
            y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        )
        weight = self._sample_weight(sample_weight, X)
        names = list(getattr(self, "feature_names_in_", [f"x{j}" for j in range(self.n_features_in_)]))
        return glm_results(
            self.model_, X, y, weight, fit_result=self.fit_result_, feature_names=names, **kwargs
        )

    def summary(self, X, y, sample_weight=None, **kwargs) -> str:
        """The coefficient table of :meth:`glm_results` (statsmodels' layout)."""
        return self.glm_results(X, y, sample_weight, **kwargs).summary()


class GLMClassifier(LabelEncoding, LogProbaOutputs, ClassifierMixin, _GLMEstimator):
    """Binary classification with a Bernoulli GLM and any of its links.

    ``p(y = classes_[1] | x) = g^{-1}(w^T x + b)`` with ``g`` the ``link``
    (``"logit"``, ``"probit"``, ``"cloglog"``), fitted by the library's solvers on
    ``C sum_i s_i nll_i + ||w||^2 / 2`` (see the module docstring for ``C`` versus
    the library's ``l2``).

    Args:
        link: the Bernoulli family's link.
        C: inverse penalty strength, ``> 0``; ``np.inf`` is unpenalized
            (scikit-learn's ``penalty=None``). Library: ``l2 = 1 / (C sum_i s_i)``.
        fit_intercept: fit the (unpenalized) bias.
        solver: a name in :data:`torchglm.solvers.SOLVERS` or ``"auto"``.
        max_iter, tol: passed to the solver (``None``: the solver's defaults).
        device: torch device of the model and the fit (``"cpu"``, ``"cuda"``).
        dtype: ``"float64"`` (default) or ``"float32"``: the model's parameters.

    Attributes:
        classes_, coef_ (1, d), intercept_ (1,), n_iter_ (1,), converged_,
        n_features_in_, feature_names_in_ (DataFrame input), model_ (the fitted
        torch module), fit_result_ (the solver's :class:`FitResult`).

    Example:
        >>> from sklearn.datasets import make_classification
        >>> X, y = make_classification(200, n_features=4, random_state=0)
        >>> clf = GLMClassifier(link="cloglog", C=10.0).fit(X, y)
        >>> clf.predict_proba(X[:2]).shape
        (2, 2)
    """

    _binary_only = True

    def __init__(
        self,
        link="logit",
        C=1.0,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        device="cpu",
        dtype="float64",
    ):
        self.link = link
        self.C = C
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = not self._binary_only
        return tags

    def _link_name(self) -> str:
        return self.link

    def _core_model(self, n_features: int, n_classes: int, l2: float) -> GeneralizedLinearModel:
        return GeneralizedLinearModel(
            n_features,
            "bernoulli",
            self._link_name(),
            2,
            l2=l2,
            fit_intercept=self.fit_intercept,
            dtype=self._torch_dtype(),
        )

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d: array, DataFrame, scipy.sparse or tensor) and labels ``y``."""
        X, y = self._validate_Xy(X, y)
        encoded = self._encode(y)
        weight = self._sample_weight(sample_weight, X)
        total = X.shape[0] if weight is None else weight.sum()
        model = self._core_model(X.shape[1], len(self.classes_), l2_from_C(self.C, total))
        self._fit_core(model, X, encoded, weight)
        return self

    def _targets_for_results(self, y):
        index = np.searchsorted(self.classes_, y)
        index = np.clip(index, 0, len(self.classes_) - 1)
        if not np.array_equal(self.classes_[index], y):
            raise fail("y", f"labels among classes_ {self.classes_.tolist()}", "an unseen label")
        return index

    def _log_proba(self, X) -> torch.Tensor:
        """``log p(C_k | x)``, (n, K), on the eta scale (no log of a rounded probability)."""
        eta = self._eta(X)
        if self.model_.family.multi_output:
            return torch.log_softmax(eta, dim=1)
        link = self.model_.family.link
        return torch.stack([link.log1m_inverse(eta), link.log_inverse(eta)], dim=1)

    def decision_function(self, X) -> np.ndarray:
        """Binary: the log-odds ``log p1 / p0`` (``eta`` itself for the logit link), > 0
        for ``classes_[1]``; multinomial: ``eta`` (n, K)."""
        if self._link_name() == "logit":  # binary logit, and multinomial (always logit)
            return to_numpy(self._eta(X))
        lp = self._log_proba(X)
        return to_numpy(lp[:, 1] - lp[:, 0])

    def predict(self, X) -> np.ndarray:
        eta = self._eta(X)  # first: its fitted check comes before model_ is read
        return self._decode(self.model_.family.predict(eta))


class LogisticRegression(GLMClassifier):
    """Logistic regression: binary (``sigma(w^T x + b)``, the core
    :class:`~torchglm.LogisticRegression`) or multinomial for three or more classes
    (``softmax(W x + b)``, the core :class:`~torchglm.SoftmaxRegression`), as
    scikit-learn's ``LogisticRegression`` with its default multinomial loss.

    Args: as :class:`GLMClassifier` without ``link``. ``C`` means what it means in
    scikit-learn (``l2 = 1 / (C sum_i s_i)`` in the library's terms), so the same
    ``C`` gives the same coefficients.

    Attributes: ``coef_`` is (1, d) for two classes and (K, d) for K > 2 (one row per
    class, as scikit-learn's multinomial fit).

    Example:
        >>> from sklearn.datasets import load_iris
        >>> X, y = load_iris(return_X_y=True)
        >>> LogisticRegression(C=1.0).fit(X, y).score(X, y) > 0.9
        True
    """

    _binary_only = False

    def __init__(
        self, C=1.0, fit_intercept=True, solver="auto", max_iter=None, tol=None, device="cpu", dtype="float64"
    ):
        self.C = C
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.dtype = dtype

    def _link_name(self) -> str:
        return "logit"

    def _core_model(self, n_features, n_classes, l2):
        if n_classes == 2:
            return _Logistic(n_features, l2=l2, fit_intercept=self.fit_intercept, dtype=self._torch_dtype())
        return SoftmaxRegression(
            n_features, n_classes, l2=l2, fit_intercept=self.fit_intercept, dtype=self._torch_dtype()
        )


class ProbitRegression(GLMClassifier):
    """Binary probit regression, ``p(y = classes_[1] | x) = Phi(w^T x + b)`` (the core
    :class:`~torchglm.ProbitRegression`); arguments as :class:`GLMClassifier`
    without ``link``. ``decision_function`` is the log-odds ``log Phi(eta) / Phi(-eta)``."""

    def __init__(
        self, C=1.0, fit_intercept=True, solver="auto", max_iter=None, tol=None, device="cpu", dtype="float64"
    ):
        self.C = C
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.dtype = dtype

    def _link_name(self) -> str:
        return "probit"


class GLMRegressor(RegressorMixin, _GLMEstimator):
    """A GLM regressor: ``E[y | x] = g^{-1}(w^T x + b)`` for a family and link of the
    library (``"gaussian"``, ``"poisson"``, ``"gamma"``, ``"exponential"``,
    ``"binomial"`` with proportions as ``y`` and trials as ``sample_weight``).

    Args:
        family: a name in :data:`torchglm.FAMILIES` (not the classifiers'
            ``"bernoulli"``/``"categorical"``: use :class:`GLMClassifier`).
        link: a link the family allows; ``None`` is its canonical link.
        alpha: L2 penalty on the weights, ``>= 0``: scikit-learn's ``alpha`` of
            ``PoissonRegressor``/``GammaRegressor``/``TweedieRegressor``, and exactly
            the library's ``l2`` (see the module docstring). Default 0 (unpenalized,
            as statsmodels; scikit-learn's default is 1).
        fit_intercept, solver, max_iter, tol, device, dtype: as :class:`GLMClassifier`.

    Attributes:
        coef_ (d,), intercept_ (float), n_iter_ (1,), converged_, n_features_in_,
        feature_names_in_, model_, fit_result_.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2)); counts = rng.poisson(np.exp(0.5 * X[:, 0] - 0.3 * X[:, 1]))
        >>> reg = GLMRegressor(family="poisson").fit(X, counts)
        >>> print(reg.summary(X, counts))
                               Generalized linear model results
        ==============================================================================
        Family:                        poisson  No. observations:                  200
        Link:                              log  Df residuals:                      197
        ...
        x0 ...
        x1 ...
        intercept ...
        ==============================================================================
    """

    def __init__(
        self,
        family="gaussian",
        link=None,
        alpha=0.0,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        device="cpu",
        dtype="float64",
    ):
        self.family = family
        self.link = link
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.family in ("poisson", "gamma", "exponential"):
            tags.target_tags.positive_only = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) and real targets ``y`` (n,) in the family's support."""
        X, y = self._validate_Xy(X, y, y_numeric=True)
        family = get_family(self.family, self.link)
        if family.is_classifier:
            raise fail(
                "family", "a regression family (use GLMClassifier for classification)", repr(self.family)
            )
        check_positive("alpha", self.alpha, allow_zero=True)
        model = GeneralizedLinearModel(
            X.shape[1],
            family,
            l2=float(self.alpha),
            fit_intercept=self.fit_intercept,
            dtype=self._torch_dtype(),
        )
        y = y.astype(np.float64 if self._torch_dtype() == torch.float64 else np.float32, copy=False)
        self._fit_core(model, X, y, self._sample_weight(sample_weight, X))
        return self

    def _shape_coef(self, w, b):
        return w[0], float(b[0])

    def score(self, X, y, sample_weight=None) -> float:
        """``D^2 = 1 - D(y, mu) / D(y, ybar)``, the fraction of deviance explained (the
        score of scikit-learn's GLM regressors; ``R^2`` for the Gaussian family), with
        ``D = sum_i s_i d(y_i, mu_i)`` the family's deviance and ``ybar`` the weighted mean."""
        X = self._fitted_input(X)
        check_target_values(y)
        if isinstance(y, torch.Tensor):
            y = y.detach()
        # the targets through the gate model.fit applies (check_data: the family's
        # support, finiteness, one message), not scored into a NaN
        x, y, s, _ = self.model_.as_data(X, y, self._sample_weight(sample_weight, X))
        x, y = self.model_.check_data(x, y, s, fitting=False)
        with torch.no_grad():
            mu = self.model_.family.mean(self.model_(x.to(self.model_.param_dtype)))
        y = y.to(mu)
        s = torch.ones_like(y) if s is None else s.to(mu)
        family = self.model_.family
        ybar = (s * y).sum() / s.sum()
        dev = (s * family.unit_deviance(y, mu)).sum()
        null = (s * family.unit_deviance(y, ybar.expand_as(y))).sum()
        return float(1.0 - dev / null)

    def predict(self, X) -> np.ndarray:
        """The predicted mean ``E[y | x]``, shape (n,)."""
        eta = self._eta(X)  # first: its fitted check comes before model_ is read
        return to_numpy(self.model_.family.mean(eta))
