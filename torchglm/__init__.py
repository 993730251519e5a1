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
    PerformanceWarning,
    SeparationWarning,
)
from .families import FAMILIES, Family, get_family
from .inference import GLMResults, fit_glm, glm_results
from .inference.formula import glm
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

#: Submodules loaded on first access (``torchglm.bayes`` imports Pyro, ``plotting``
#: matplotlib): ``import torchglm`` stays light.
_LAZY_SUBMODULES = ("basis", "bayes", "data", "plotting", "sklearn", "solvers", "text", "training")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'torchglm' has no attribute {name!r}")


__all__ = [
    "basis",
    "bayes",
    "GLMResults",
    "fit_glm",
    "glm",
    "glm_results",
    "ConvergenceWarning",
    "InputError",
    "NotFittedError",
    "NumericalWarning",
    "PerformanceWarning",
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
