"""Models: discriminative GLMs and generative classifiers."""

from .glm import GeneralizedLinearModel, LogisticRegression, ProbitRegression, SoftmaxRegression
from .generative import ClosedFormFitter, GenerativeClassifier
from .discriminant import (
    GaussianDiscriminantAnalysis,
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)
from .naive_bayes import BernoulliNB, GaussianNB, MultinomialNB, PoissonNB

__all__ = [
    "GeneralizedLinearModel",
    "LogisticRegression",
    "ProbitRegression",
    "SoftmaxRegression",
    "GenerativeClassifier",
    "ClosedFormFitter",
    "GaussianDiscriminantAnalysis",
    "LinearDiscriminantAnalysis",
    "QuadraticDiscriminantAnalysis",
    "MultinomialNB",
    "BernoulliNB",
    "GaussianNB",
    "PoissonNB",
]
