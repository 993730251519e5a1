"""torchglm: probabilistic classification and generalized linear models in PyTorch.

Vocabulary: ``eta`` is the linear predictor, ``mu`` the mean (a probability for
classifiers), ``y`` the target, ``weight`` a sample weight; shapes are written in
``n_samples, n_features, n_classes``. Every model has ``forward(x) -> eta``,
``predict_proba(x) -> mu`` and ``predict(x) -> labels`` (or the mean, for
regression families). Probit outputs are never called logits.
"""

from ._validation import (
    ConvergenceWarning,
    InputError,
    NotFittedError,
    NumericalWarning,
    SeparationWarning,
)
from .families import FAMILIES, Family, get_family
from .links import LINKS, Link, get_link
from .models import (
    BernoulliNB,
    GaussianDiscriminantAnalysis,
    GaussianNB,
    GenerativeClassifier,
    GeneralizedLinearModel,
    LinearDiscriminantAnalysis,
    LogisticRegression,
    MultinomialNB,
    PoissonNB,
    ProbitRegression,
    QuadraticDiscriminantAnalysis,
    SoftmaxRegression,
)

__version__ = "0.1.0"

__all__ = [
    "ConvergenceWarning",
    "InputError",
    "NotFittedError",
    "NumericalWarning",
    "SeparationWarning",
    "FAMILIES",
    "Family",
    "get_family",
    "LINKS",
    "Link",
    "get_link",
    "GeneralizedLinearModel",
    "LogisticRegression",
    "ProbitRegression",
    "SoftmaxRegression",
    "GenerativeClassifier",
    "GaussianDiscriminantAnalysis",
    "LinearDiscriminantAnalysis",
    "QuadraticDiscriminantAnalysis",
    "MultinomialNB",
    "BernoulliNB",
    "GaussianNB",
    "PoissonNB",
]
