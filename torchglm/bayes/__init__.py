"""Bayesian GLM classifiers: Gaussian prior, MAP, Laplace posterior, posterior
predictive, NUTS sampling and the choice of the prior variance (the lecture notes on probabilistic
classification, §12 and §14; Bishop PRML §4.5; Murphy §8.4).

Typical use::

    from torchglm import LogisticRegression
    from torchglm.bayes import GaussianPrior, laplace_posterior, predictive, sample_posterior

    model = LogisticRegression(n_features=2)
    post = laplace_posterior(model, (x, y), GaussianPrior(variance=1.0))  # fits the MAP
    pred = predictive(model, post, x_test)            # sigma(kappa(sigma_a^2) mu_a)
    draws = sample_posterior(model, (x, y), post)     # NUTS, R-hat and ESS
    mcmc = predictive(model, draws, x_test)           # Monte Carlo over the draws
"""

from .laplace import LaplacePosterior, fit_map, laplace_posterior
from .metrics import format_table, predictive_metrics
from .predictive import Predictive, predictive, probit_approximation
from .prior import GaussianPrior
from .sampling import PosteriorSamples, sample_posterior
from .svi import SVIPosterior, svi_posterior
from .variational import VariationalPosterior, jj_lambda, local_xi, variational_posterior
from .selection import (
    EvidenceFixedPoint,
    LambdaCurve,
    default_lambdas,
    evidence_curve,
    evidence_fixed_point,
    validation_curve,
    variational_curve,
)

__all__ = [
    "GaussianPrior",
    "LaplacePosterior",
    "fit_map",
    "laplace_posterior",
    "Predictive",
    "predictive",
    "probit_approximation",
    "PosteriorSamples",
    "sample_posterior",
    "SVIPosterior",
    "svi_posterior",
    "LambdaCurve",
    "default_lambdas",
    "evidence_curve",
    "validation_curve",
    "variational_curve",
    "EvidenceFixedPoint",
    "evidence_fixed_point",
    "VariationalPosterior",
    "jj_lambda",
    "local_xi",
    "variational_posterior",
    "predictive_metrics",
    "format_table",
]
