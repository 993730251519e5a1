"""scikit-learn estimators over the library's models and solvers.

Every estimator wraps a core model (``model_`` after ``fit``) and the library's
solvers: there is no second implementation. They follow scikit-learn's conventions
(``get_params``/``set_params``, ``clone``, ``classes_`` with any hashable labels,
``coef_``, ``intercept_``, ``n_iter_``, ``n_features_in_``, ``feature_names_in_``,
``sample_weight``, ``score``, NumPy outputs) and pass scikit-learn's
``check_estimator`` (the few known exceptions, with reasons:
:func:`expected_failed_checks`), so they work in ``Pipeline``, ``GridSearchCV``
and ``cross_val_score``. ``device=`` and
``dtype=`` choose where and in what precision the core model fits; a
``torch.Tensor`` input skips scikit-learn's NumPy validation (it may live on a GPU).

Penalties: ``C`` (classifiers) is scikit-learn's inverse regularization,
``l2 = 1 / (C sum_i s_i)`` in the library's objective; ``alpha``
(:class:`GLMRegressor`) is scikit-learn's GLM ``alpha`` and equals ``l2``. ``penalty="l1"``
or ``"elasticnet"`` (with ``l1_ratio``; the regressor's ``l1_ratio`` is glum's) adds an L1
term fitted by the proximal Newton solver, and :class:`LogisticRegressionCV` chooses ``C``
by cross-validation.

Example:
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn.datasets import load_breast_cancer
    >>> from torchglm.sklearn import LogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0)).fit(X, y)
    >>> clf.score(X, y) > 0.95
    True
"""

import sklearn.exceptions  # noqa: F401  (the base the wrappers' ConvergenceWarning takes)

from .._validation import adopt_sklearn_warning
from ._bayes import BayesianLogisticRegression
from ._checks import expected_failed_checks
from ._generative import (
    BernoulliNB,
    GaussianNB,
    LinearDiscriminantAnalysis,
    MultinomialNB,
    PoissonNB,
    QuadraticDiscriminantAnalysis,
)
from ._glm import GLMClassifier, GLMRegressor, LogisticRegression, LogisticRegressionCV, ProbitRegression

adopt_sklearn_warning()  # the wrappers' warnings: scikit-learn's class as well as torchglm's

__all__ = [
    "BayesianLogisticRegression",
    "BernoulliNB",
    "GLMClassifier",
    "GLMRegressor",
    "GaussianNB",
    "LinearDiscriminantAnalysis",
    "LogisticRegression",
    "LogisticRegressionCV",
    "MultinomialNB",
    "PoissonNB",
    "ProbitRegression",
    "QuadraticDiscriminantAnalysis",
    "expected_failed_checks",
]
