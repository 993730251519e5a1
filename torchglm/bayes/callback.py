"""The Bayesian evaluation callback under its former name (``class_path:
torchglm.bayes.callback.BayesianEvaluation`` in configs and saved runs): it lives in
:mod:`torchglm.training.bayes_callback`, with the rest of the Lightning layer.

``import torchglm.bayes`` does not import this module, so the Bayesian API stays
free of Lightning; importing this module imports it.
"""

from ..training.bayes_callback import BayesianEvaluation

__all__ = ["BayesianEvaluation"]
