"""The posterior predictive distribution (the lecture notes on probabilistic classification, §12;
Bishop PRML §4.5.2):

    p(C_1 | x, D) = integral sigma(w^T x~) p(w | D) dw.

Under a Gaussian posterior ``N(m, S)`` the activation ``a = w^T x~`` is Gaussian with
``mu_a = m^T x~`` and ``sigma_a^2 = x~^T S x~``, which reduces the integral to one
dimension:

* logistic: the probit approximation ``sigma(kappa(sigma_a^2) mu_a)`` with
  ``kappa(s) = (1 + pi s / 8)^{-1/2}`` (Bishop, PRML 4.5.2);
* probit: exact, ``Phi(mu_a / sqrt(1 + sigma_a^2))``;
* any model (softmax included) and any posterior (Laplace or MCMC samples):
  the Monte Carlo average ``(1/S) sum_s mu(x; theta_s)``.

Besides the mean the predictive reports ``sigma_a^2`` and the variance of
``p(C|x, theta)`` over the posterior (how much the posterior disagrees about ``x``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .._validation import check_features, check_positive, fail
from ._layout import check_model, linear_predictor, n_bias, n_weights
from .laplace import LaplacePosterior
from .sampling import PosteriorSamples
from .svi import SVIPosterior
from .variational import VariationalPosterior

__all__ = ["Predictive", "predictive", "probit_approximation"]

_METHODS = ("auto", "probit", "exact", "mc")
# Gauss-Hermite (probabilists') nodes for E[f(a)^2] under a ~ N(mu_a, sigma_a^2).
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)


@dataclass
class Predictive:
    """A posterior predictive at ``n`` points.

    Attributes:
        proba: ``p(C_1|x, D)`` (n,) for binary models, ``p(C_k|x, D)`` (n, K) for softmax.
        proba_var: the posterior variance of ``p(C|x, theta)``, same shape as ``proba``.
        eta_mean: ``mu_a`` (n,) or (n, K): the posterior mean of the linear predictor.
        eta_var: ``sigma_a^2`` (n,) for binary models; the (n, K, K) covariance for softmax.
        method: how ``proba`` was computed.
    """

    proba: torch.Tensor
    proba_var: torch.Tensor
    eta_mean: torch.Tensor
    eta_var: torch.Tensor
    method: str


def probit_approximation(mu_a: torch.Tensor, var_a: torch.Tensor) -> torch.Tensor:
    """``E[sigma(a)] ~= sigma(kappa(sigma_a^2) mu_a)``, ``kappa(s) = (1 + pi s / 8)^{-1/2}``."""
    return torch.sigmoid(mu_a * torch.rsqrt(1.0 + math.pi * var_a / 8.0))


def _gaussian_moments(model, post: LaplacePosterior | VariationalPosterior | SVIPosterior, x: torch.Tensor):
    """``mu_a`` and ``sigma_a^2`` (or the K x K covariance) of ``eta`` under ``N(m, S)``."""
    k, d = model.n_outputs, model.n_features
    xt = torch.cat([x, torch.ones_like(x[:, :1])], 1) if post.shape[2] else x
    # theta = (vec W, b) -> per-output coefficient rows (k, dt): column d is the bias.
    perm = (
        torch.cat(
            [
                (torch.arange(k, device=x.device)[:, None] * d + torch.arange(d, device=x.device)[None, :]),
                (k * d + torch.arange(k, device=x.device))[:, None],
            ],
            1,
        )
        if post.shape[2]
        else torch.arange(k * d, device=x.device).reshape(k, d)
    )
    F = post.scale[perm]  # (k, dt, r)
    mean = linear_predictor(model, post.mean, x)
    proj = torch.einsum("nd,kdr->nkr", xt, F)  # eta - mu_a = proj z, z ~ N(0, I)
    cov = proj @ proj.transpose(1, 2)  # (n, k, k)
    if not model.family.multi_output:
        return mean, cov[:, 0, 0]
    return mean, cov


def _quadrature(f, mu_a, var_a):
    nodes = torch.as_tensor(_GH_NODES, dtype=mu_a.dtype, device=mu_a.device)
    w = torch.as_tensor(_GH_WEIGHTS / _GH_WEIGHTS.sum(), dtype=mu_a.dtype, device=mu_a.device)
    vals = f(mu_a.unsqueeze(-1) + var_a.sqrt().unsqueeze(-1) * nodes)
    m1 = (vals * w).sum(-1)
    m2 = (vals * vals * w).sum(-1)
    return m1, (m2 - m1 * m1).clamp_min(0.0)


def _monte_carlo(model, samples: torch.Tensor, x: torch.Tensor, chunk: int = 256):
    """Running mean and variance of ``mu(x; theta_s)`` over the samples, in chunks so
    that ``S x n x K`` probabilities are never held at once."""
    s1 = s2 = e1 = None
    e2 = None
    for start in range(0, samples.shape[0], chunk):
        eta = linear_predictor(model, samples[start : start + chunk], x)
        mu = model.family.mean(eta)
        parts = (
            mu.sum(0),
            (mu * mu).sum(0),
            eta.sum(0),
            (eta.unsqueeze(-1) * eta.unsqueeze(-2)).sum(0) if eta.dim() == 3 else (eta * eta).sum(0),
        )
        if s1 is None:
            s1, s2, e1, e2 = parts
        else:
            s1, s2, e1, e2 = s1 + parts[0], s2 + parts[1], e1 + parts[2], e2 + parts[3]
    S = samples.shape[0]
    proba, eta_mean = s1 / S, e1 / S
    proba_var = (s2 / S - proba * proba).clamp_min(0.0)
    if eta_mean.dim() == 2:
        eta_var = e2 / S - eta_mean.unsqueeze(-1) * eta_mean.unsqueeze(-2)
    else:
        eta_var = (e2 / S - eta_mean * eta_mean).clamp_min(0.0)
    return proba, proba_var, eta_mean, eta_var


def predictive(
    model,
    posterior: LaplacePosterior | VariationalPosterior | SVIPosterior | PosteriorSamples,
    x: torch.Tensor,
    method: str = "auto",
    n_samples: int = 4000,
    generator: torch.Generator | None = None,
) -> Predictive:
    """Posterior predictive ``p(C|x, D)`` with its variance.

    Args:
        model: the GLM the posterior belongs to (its family and link give ``mu``).
        posterior: a Gaussian posterior (:class:`LaplacePosterior`,
            :class:`~torchglm.bayes.variational.VariationalPosterior`,
            :class:`~torchglm.bayes.svi.SVIPosterior`) or MCMC :class:`PosteriorSamples`.
        x: features (n, n_features).
        method: ``"probit"`` (logistic, Laplace: ``sigma(kappa mu_a)``), ``"exact"``
            (probit link, Laplace: ``Phi(mu_a / sqrt(1 + sigma_a^2))``), ``"mc"``
            (average over posterior samples: drawn from the Laplace Gaussian, or the
            MCMC draws themselves), or ``"auto"``: probit approximation for logistic,
            exact for probit, Monte Carlo for softmax and for MCMC samples.
        n_samples: Laplace draws for ``"mc"``.
        generator: random generator for those draws.

    Returns:
        A :class:`Predictive`. For the analytic methods ``proba_var`` is the
        variance of ``mu(a)`` under ``a ~ N(mu_a, sigma_a^2)`` by 64-point
        Gauss-Hermite quadrature.

    Raises:
        InputError: for an unknown method or one the model/posterior does not support,
            or a posterior over a different number of coefficients.

    Example:
        >>> from torchglm.bayes import GaussianPrior, laplace_posterior
        >>> x = torch.randn(200, 2, dtype=torch.float64)
        >>> y = (x[:, 0] - x[:, 1] + torch.randn_like(x[:, 0]) > 0).double()
        >>> x_test = torch.randn(5, 2, dtype=torch.float64)
        >>> model = LogisticRegression(2)
        >>> pred = predictive(model, laplace_posterior(model, (x, y), GaussianPrior(1.0)), x_test)
        >>> pred.method, pred.proba.shape, pred.eta_var.shape
        ('probit', torch.Size([5]), torch.Size([5]))
    """
    check_model(model)
    check_features("x", x, model.n_features)
    if method not in _METHODS:
        raise fail("method", f"one of {list(_METHODS)}", repr(method))
    if not isinstance(posterior, (LaplacePosterior, VariationalPosterior, SVIPosterior, PosteriorSamples)):
        raise fail(
            "posterior",
            "a LaplacePosterior, VariationalPosterior, SVIPosterior or PosteriorSamples",
            type(posterior).__name__,
        )
    p = n_weights(model) + n_bias(model)
    got = posterior.samples.shape[-1] if isinstance(posterior, PosteriorSamples) else posterior.mean.shape[-1]
    if got != p:
        raise fail("posterior", f"a posterior over this model's {p} coefficients", f"{got} coefficients")
    # In the posterior's precision (float64) or the data's, whichever is wider.
    ref = posterior.samples if isinstance(posterior, PosteriorSamples) else posterior.mean
    x = x.to(torch.promote_types(x.dtype, ref.dtype))
    link = model.family.link.name
    if method == "auto":
        if isinstance(posterior, PosteriorSamples) or model.family.multi_output:
            method = "mc"
        else:
            method = {"logit": "probit", "probit": "exact"}.get(link, "mc")
    if isinstance(posterior, PosteriorSamples):
        if method != "mc":
            raise fail("method", "'mc' for MCMC samples", repr(method))
        return Predictive(*_monte_carlo(model, posterior.flat(), x), method="mc")
    if method == "mc":
        check_positive("n_samples", n_samples)
        return Predictive(*_monte_carlo(model, posterior.sample(n_samples, generator), x), method="mc")
    needs = {"probit": "logit", "exact": "probit"}[method]
    if link != needs or model.family.multi_output:
        raise fail(
            "method",
            f"'mc' (or 'auto') for a model with the '{link}' link; '{method}' needs the '{needs}' link",
            repr(method),
        )
    mu_a, var_a = _gaussian_moments(model, posterior, x)
    if method == "probit":
        proba = probit_approximation(mu_a, var_a)
    else:
        proba = torch.special.ndtr(mu_a * torch.rsqrt(1.0 + var_a))
    _, proba_var = _quadrature(model.family.mean, mu_a, var_a)
    return Predictive(proba, proba_var, mu_a, var_a, method)
