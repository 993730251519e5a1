"""Bayesian logistic regression as a scikit-learn estimator: the MAP under a Gaussian
prior (:func:`torchglm.bayes.laplace_posterior` fits it with the library's solver)
and predictions from the Laplace posterior predictive (:func:`torchglm.bayes.predictive`)."""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.base import ClassifierMixin

from .._validation import check_positive
from ..models.glm import LogisticRegression as _Logistic
from ..models.glm import SoftmaxRegression
from ._base import LabelEncoding, LogProbaOutputs, TorchEstimator, to_numpy

__all__ = ["BayesianLogisticRegression"]


class BayesianLogisticRegression(LabelEncoding, LogProbaOutputs, ClassifierMixin, TorchEstimator):
    """Logistic (two classes) or softmax (more) regression with the prior
    ``w ~ N(0, prior_variance I)``, fitted at the MAP and predicting with the Laplace
    posterior ``N(theta*, H^{-1})`` (the lecture notes on probabilistic classification, §12;
    Bishop PRML §4.5).

    Two classes: ``p(C_1 | x, D) ~= sigma(kappa(sigma_a^2) mu_a)``, the probit
    approximation with ``kappa(s) = (1 + pi s / 8)^{-1/2}``, ``mu_a`` the MAP's
    ``eta`` and ``sigma_a^2 = x~^T H^{-1} x~``: the same decision as the MAP, with
    probabilities pulled towards 1/2 where the posterior is uncertain. More classes:
    the Monte Carlo average over ``n_samples`` Laplace draws (fixed by
    ``random_state``, so repeated calls agree).

    The MAP is the library objective with ``l2 = 1 / (prior_variance sum_i s_i)``, i.e.
    scikit-learn's ``LogisticRegression(C=prior_variance)``: ``coef_`` equals the
    MAP of :class:`LogisticRegression` with ``C = prior_variance``.

    Args:
        prior_variance: ``lambda > 0``, the prior variance of every weight.
        bias_variance: prior variance of the bias, ``None`` for a flat prior.
        solver, max_iter, tol: for the MAP fit (library solvers).
        n_samples: Laplace draws for the multiclass predictive.
        random_state: seed of those draws.
        device, dtype: torch device and dtype.

    Attributes:
        classes_, coef_, intercept_ (the MAP), n_iter_, posterior_
        (:class:`~torchglm.bayes.LaplacePosterior`), log_evidence_ (the Laplace
        estimate of ``ln p(D | lambda)``), n_features_in_, feature_names_in_, model_.
    """

    def __init__(
        self,
        prior_variance=1.0,
        bias_variance=None,
        solver="newton",
        max_iter=None,
        tol=None,
        n_samples=2000,
        random_state=0,
        device="cpu",
        dtype="float64",
    ):
        self.prior_variance = prior_variance
        self.bias_variance = bias_variance
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.n_samples = n_samples
        self.random_state = random_state
        self.device = device
        self.dtype = dtype

    def fit(self, X, y, sample_weight=None):
        """MAP fit and Laplace posterior on ``X`` (n, d) and labels ``y``."""
        from ..bayes import GaussianPrior, fit_map, laplace_posterior

        check_positive("prior_variance", self.prior_variance)
        X, y = self._validate_Xy(X, y)
        encoded = self._encode(y)
        weight = self._sample_weight(sample_weight, X)
        d, K, dtype = X.shape[1], len(self.classes_), self._torch_dtype()
        model = _Logistic(d, dtype=dtype) if K == 2 else SoftmaxRegression(d, K, dtype=dtype)
        model = model.to(self._torch_device())
        x, t, w, _ = model.as_data(X, encoded, weight)
        options = {k: v for k, v in (("max_iter", self.max_iter), ("tol", self.tol)) if v is not None}
        data = (x.to(dtype), t) if w is None else (x.to(dtype), t, w)
        prior = GaussianPrior(self.prior_variance, self.bias_variance)
        result = fit_map(model, data, prior, solver=self.solver, **options)
        posterior = laplace_posterior(model, data, prior, fit=False)
        self.model_ = model
        self.posterior_ = posterior
        self.log_evidence_ = posterior.log_evidence
        self.coef_ = to_numpy(model.coef)
        self.intercept_ = to_numpy(model.intercept)
        self.fit_result_ = result
        self.n_iter_ = np.array([result.n_iter])
        return self

    def _predictive(self, X):
        from ..bayes import predictive

        x = self._fitted_input(X)  # predictive() is the gate: one finiteness scan
        x = self.model_.as_data(x)[0].to(self.model_.param_dtype)
        generator = torch.Generator(device=x.device).manual_seed(int(self.random_state))
        return predictive(self.model_, self.posterior_, x, n_samples=self.n_samples, generator=generator)

    def _log_proba(self, X) -> torch.Tensor:
        pred = self._predictive(X)
        if pred.proba.dim() == 2:  # softmax: the Monte Carlo mean
            return pred.proba.log()
        a = pred.eta_mean * torch.rsqrt(1.0 + math.pi * pred.eta_var / 8.0)  # sigma(a) = p(C_1|x, D)
        return torch.stack([torch.nn.functional.logsigmoid(-a), torch.nn.functional.logsigmoid(a)], dim=1)

    def decision_function(self, X) -> np.ndarray:
        """Two classes: the predictive log-odds ``kappa(sigma_a^2) mu_a``; more: ``log p(C_k|x, D)``."""
        lp = self._log_proba(X)
        return to_numpy(lp[:, 1] - lp[:, 0] if lp.shape[1] == 2 else lp)

    def predict(self, X) -> np.ndarray:
        return self._decode(self._log_proba(X).argmax(dim=1))
