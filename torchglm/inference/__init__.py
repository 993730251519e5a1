"""Statistical inference for a fitted GLM: covariance, tests, deviance, AIC/BIC.

At the maximum-likelihood estimate ``beta^`` of a GLM (the lecture notes on probabilistic classification, §8;
McCullagh & Nelder §2.5 and §4.4), the asymptotic covariance is the inverse Fisher information times the
dispersion::

    Cov(beta^) = phi * I(beta^)^{-1},   I = sum_i s_i x~_i h_i x~_i^T = S * H,

where ``H`` is the Hessian of the solvers' objective (the weighted *mean* NLL at
``phi = 1``, so the information of the summed log-likelihood is ``S = sum_i s_i``
times it) and ``h_i`` is the observed second derivative of the NLL in ``eta``
(``information="observed"``) or the expected one ``mu'(eta)^2 / V(mu)``
(``"expected"``, Fisher scoring / IRLS; the two coincide for canonical links).
For a penalized fit (``l2 > 0``) ``H`` includes the penalty, so ``phi (S H)^{-1}``
is the covariance of the Laplace approximation to the posterior at the MAP
estimate (the Gaussian prior of the lecture notes, §14; Bishop PRML §4.5.1), not a sampling covariance.

The dispersion is estimated after the fit as Pearson's ``X^2 / (n - p)``
(statsmodels' default; 1 for Bernoulli, binomial, Poisson and exponential).
Log-likelihood, deviance, null deviance, AIC and BIC follow statsmodels' GLM
conventions (see :class:`GLMResults`), so the numbers can be compared one to one.

Every quantity is a sum over batches (one pass each), so the same code serves
in-memory tensors, larger-than-memory batches and many processes.

The package's modules: :mod:`.results` (:class:`GLMResults`, its table and JSON),
:mod:`.statistics` (the per-observation sums and the null model, fitted by the
solvers), :mod:`.covariance` (generalized inverse, dispersion, Wald tests) and
:mod:`.glm` (:func:`glm_results` as named steps, :func:`fit_glm`), :mod:`.observations`
(sandwich covariances, residuals, leverage, Cook's distance), :mod:`.prediction`
(:meth:`GLMResults.get_prediction`) and :mod:`.hypothesis` (:func:`lr_test`, Wald tests); :mod:`.formula` is the formula
interface (:func:`torchglm.glm`, formulaic's design matrices; not re-exported here, where
``glm`` names the module).
"""

from .covariance import Identifiability, identifiability
from .formula import FormulaDesign
from .glm import fit_glm, glm_results
from .hypothesis import LRTestResults, WaldTestResults, lr_test
from .observations import GLMInfluence
from .prediction import PredictionResults
from .results import GLMResults

__all__ = [
    "GLMResults",
    "glm_results",
    "fit_glm",
    "FormulaDesign",
    "identifiability",
    "Identifiability",
    "lr_test",
    "LRTestResults",
    "WaldTestResults",
    "PredictionResults",
    "GLMInfluence",
]
