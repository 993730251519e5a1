"""Models: discriminative GLMs and generative classifiers."""

from .glm import GeneralizedLinearModel, LogisticRegression, ProbitRegression, SoftmaxRegression

__all__ = [
    "GeneralizedLinearModel",
    "LogisticRegression",
    "ProbitRegression",
    "SoftmaxRegression",
]
