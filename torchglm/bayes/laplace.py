"""The Laplace approximation to the posterior of a GLM of any family (the lecture notes
on probabilistic classification, "Bayesian logistic regression" and the regularized
Newton Hessian; Bishop PRML §4.4).

Around the MAP ``theta*`` the negative log posterior
``E(theta) = -ln p(D|theta) - ln p(theta)`` is expanded to second order, giving
``p(theta | D) ~= N(theta*, H^{-1})`` with the summed (not averaged) Hessian

    H = sum_i s_i d^2 nll_i / d theta^2 + diag(1/lambda, ..., 1/sigma_b^2)

(for logistic regression ``sum_i sigma_i (1 - sigma_i) x_i x_i^T + I / lambda``,
the lecture notes on probabilistic classification, §14; Bishop PRML eq. 4.143). The same expansion
approximates the evidence

    ln Z ~= ln p(D|theta*) + ln p(theta*) + (D/2) ln 2 pi - (1/2) ln |H|,

maximized over ``lambda`` by :mod:`torchglm.bayes.selection`.

For a family with a dispersion ``phi`` (Gaussian ``phi = 1 / beta``, Gamma) the likelihood
is taken at a given ``phi``: the data term of ``H`` is ``1 / phi`` times that at ``phi = 1``
and the MAP is the library objective with ``l2 = phi / (lambda S)``. For the Gaussian with
the identity link the log posterior is quadratic, so the "approximation" is exact: mean
``m_N = beta S_N X^T y`` and covariance ``S_N = (alpha I + beta X^T X)^{-1}`` (PRML
3.53-3.54, ``alpha = 1 / lambda``), and ``ln Z`` is the evidence of PRML 3.86. For the other
families (Poisson, Gamma, binomial, ...) it is the Laplace approximation as for logistic
regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import solvers
from .._validation import fail
from ..models.glm import GeneralizedLinearModel
from ..passes import all_reduce_sum
from ..solvers.layout import flat_parameters, penalty_mask, set_flat_parameters
from ..solvers.pass_sums import hessian_and_gradient
from ._layout import (
    GaussianDraws,
    as_batches,
    check_dispersion,
    check_glm,
    identified_basis,
    n_bias,
    n_weights,
)
from .prior import GaussianPrior

__all__ = ["LaplacePosterior", "fit_map", "laplace_posterior"]


@dataclass
class LaplacePosterior(GaussianDraws):
    """``N(mean, covariance)`` over ``theta = (vec W, b)`` (see :mod:`._layout`).

    Attributes:
        mean: the MAP ``theta*``, shape (p,).
        covariance: ``H^{-1}``, shape (p, p) (restricted to the identified
            subspace for softmax with a flat bias prior, see ``basis``).
        precision: ``H``, the summed Hessian of the negative log posterior (p, p).
        scale: a factor ``F`` (p, r) with ``covariance = F F^T``.
        log_evidence: the Laplace estimate of ``ln p(D | lambda)``.
        log_likelihood: ``ln p(D | theta*)``.
        grad_norm: ``||grad E(theta*)||``; near 0 when ``mean`` is the posterior mode.
        prior: the :class:`GaussianPrior` used.
        basis: orthonormal basis (p, r) of the identified directions, or ``None``.
        shape: ``(n_outputs, n_features, fit_intercept)`` of the model it belongs to.
        dispersion: the ``phi`` the likelihood was taken at (1 for the families
            without a dispersion).
    """

    mean: torch.Tensor
    covariance: torch.Tensor
    precision: torch.Tensor
    scale: torch.Tensor
    log_evidence: float
    log_likelihood: float
    grad_norm: float
    prior: GaussianPrior
    basis: torch.Tensor | None
    shape: tuple[int, int, bool]
    dispersion: float = 1.0

    def state_dict(self) -> dict:
        """Plain tensors and numbers, for ``torch.save`` and checkpoints."""
        return {
            "mean": self.mean,
            "covariance": self.covariance,
            "precision": self.precision,
            "scale": self.scale,
            "log_evidence": self.log_evidence,
            "log_likelihood": self.log_likelihood,
            "grad_norm": self.grad_norm,
            "prior_variance": self.prior.variance,
            "bias_variance": self.prior.bias_variance,
            "basis": self.basis,
            "shape": self.shape,
            "dispersion": self.dispersion,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "LaplacePosterior":
        state = dict(state)
        prior = GaussianPrior(state.pop("prior_variance"), state.pop("bias_variance"))
        return cls(prior=prior, shape=tuple(state.pop("shape")), **state)


def _total_weight(batches) -> float:
    """``S = sum_i s_i`` over the batches (and processes)."""
    total = None
    for batch in batches:
        s = batch.x.new_tensor(float(batch.x.shape[0])) if batch.weight is None else batch.weight.sum()
        total = s if total is None else total + s
    all_reduce_sum(total)
    return float(total)


def fit_map(model, data, prior: GaussianPrior, solver: str = "newton", dispersion=None, **options):
    """Fit the MAP ``argmin -ln p(D|w) - ln p(w)`` in place with the library's solver.

    With a flat bias prior this is the library objective with ``l2 = phi / (lambda n)``
    (``model.l2`` is set to it; ``phi`` the dispersion, 1 for the families without one). A proper bias prior ``N(0, sigma_b^2)`` is the same
    isotropic penalty on an augmented design ``[x, c 1]`` without intercept,
    ``c = sqrt(sigma_b^2 / lambda)``: the weight ``v`` of the constant column has prior
    ``N(0, lambda)``, so the bias ``c v`` has prior ``N(0, sigma_b^2)``.

    Args:
        model: a :class:`~torchglm.models.glm.GeneralizedLinearModel` of any family.
        data: ``(x, y)`` or ``(x, y, weight)``.
        prior: the :class:`GaussianPrior`.
        solver: a name for :func:`torchglm.solvers.fit` (Newton by default).
        dispersion: ``phi`` for a family with a dispersion (Gaussian ``1 / beta``, Gamma);
            ``None`` otherwise.
        **options: passed to the solver.

    Returns:
        The solver's :class:`~torchglm.passes.FitResult`.
    """
    phi = check_dispersion(check_glm(model), dispersion)
    result, model.l2 = _fit_map(model, data, prior, solver, phi, **options)
    return result


def _fit_map(model, data, prior: GaussianPrior, solver: str, phi: float = 1.0, **options):
    """:func:`fit_map` that leaves ``model.l2`` alone: the MAP is fitted on a working
    model at the prior's penalty, and its parameters are copied into ``model``.

    Returns:
        ``(FitResult, l2)``, ``l2 = phi / (lambda sum_i s_i)`` the prior's penalty: the
        objective is the mean of ``phi`` times the per-row negative log-likelihood.
    """
    check_glm(model)
    if not (isinstance(data, (tuple, list)) and isinstance(data[0], torch.Tensor)):
        raise fail("data", "(x, y) or (x, y, weight) tensors for the MAP fit", type(data).__name__)
    x, y = model.check_data(data[0], data[1], data[2] if len(data) == 3 else None)
    weight = data[2] if len(data) == 3 else None
    total = float(x.shape[0]) if weight is None else float(weight.sum())
    l2 = phi * prior.l2(total)
    if prior.bias_variance is None or not model.n_bias:
        theta = flat_parameters(model)
        with torch.random.fork_rng(devices=[]):  # nn.Linear's init must not move the caller's RNG
            work = GeneralizedLinearModel(
                model.n_features,
                model.family,
                n_classes=model.n_classes,
                l2=l2,
                fit_intercept=model.fit_intercept,
                dtype=theta.dtype,
            ).to(theta.device)
        set_flat_parameters(work, theta)
        result = solvers.fit(work, x, y, weight=weight, solver=solver, **options)
        set_flat_parameters(model, flat_parameters(work))
        model.feature_names = work.feature_names  # as solvers.fit(model, ...) sets them
        model.mark_fitted()
        return result, l2
    c = math.sqrt(prior.bias_variance / prior.variance)
    aug = GeneralizedLinearModel(
        model.n_features + 1,
        model.family,
        n_classes=model.n_classes,
        l2=l2,
        fit_intercept=False,
        dtype=x.dtype,
    ).to(x.device)
    # theta = [vec W, b] -> the augmented model's rows [W_k, b_k / c] (no intercept), and back.
    theta, m = flat_parameters(model), model.n_weights
    W, b = theta[:m].view(model.n_outputs, -1), theta[m:]
    set_flat_parameters(aug, torch.cat([W, (b / c).unsqueeze(1)], 1).reshape(-1))
    x_aug = torch.cat([x, torch.full((x.shape[0], 1), c, dtype=x.dtype, device=x.device)], 1)
    result = solvers.fit(aug, x_aug, y, weight=weight, solver=solver, **options)
    rows = flat_parameters(aug).view(model.n_outputs, -1)
    set_flat_parameters(model, torch.cat([rows[:, :-1].reshape(-1), c * rows[:, -1]]))
    model.mark_fitted()
    return result, l2


def _log_likelihood(model, theta, batches, phi: float) -> torch.Tensor:
    """``ln p(D | theta, phi) = sum_i s_i ln p(y_i | eta_i, phi)`` with every constant (one pass)."""
    total = theta.new_zeros(())
    for batch in batches:
        eta = model.linear_predictor(theta, batch.x.to(theta.dtype), batch.offset)
        total = total + model.family.log_likelihood(eta, batch.y, batch.weight, scale=phi)
    all_reduce_sum(total)
    return total


def laplace_posterior(
    model,
    data,
    prior: GaussianPrior | None = None,
    fit: bool = True,
    solver: str = "newton",
    dispersion: float | None = None,
    **options,
) -> LaplacePosterior:
    """Laplace posterior ``N(theta*, H^{-1})`` of a GLM of any family.

    Logistic, probit, softmax, Poisson, Gamma, binomial: the Laplace approximation
    around the MAP. Gaussian with the identity link: the exact posterior ``N(m_N, S_N)``
    and the exact log evidence (PRML 3.53-3.54, 3.86), at the noise precision ``beta =
    1 / dispersion``.

    Args:
        model: a GLM; with ``fit=False`` it must already hold the MAP.
        data: ``(x, y)``, ``(x, y, weight)`` or a re-iterable of ``Batch``.
        prior: the prior; ``None`` takes the prior whose MAP the model's own penalty
            gives, ``lambda = phi / (l2 n)`` (flat bias prior).
        fit: first fit the MAP like :func:`fit_map` (needs tensors as ``data``);
            ``model.l2`` is left as it is (the prior fixes the penalty of the fit).
        solver, **options: for :func:`fit_map`.
        dispersion: the dispersion ``phi`` of a family with one (the Gaussian's
            ``sigma^2 = 1 / beta``, the Gamma's ``1 / shape``): required there
            (:func:`~torchglm.bayes.evidence_fixed_point` estimates it), ``None`` for
            the others.

    Returns:
        The :class:`LaplacePosterior`, with its evidence estimate.

    Raises:
        InputError: if the model is not a fitted GLM, the dispersion is missing or
            given where the family has none, or the posterior precision is not
            positive definite (e.g. a flat bias prior on separated data: the posterior
            is then improper).

    Example:
        >>> x = torch.randn(200, 2); y = (x[:, 0] - x[:, 1] + torch.randn(200) > 0).float()
        >>> post = laplace_posterior(LogisticRegression(2), (x, y), GaussianPrior(1.0))
        >>> post.covariance.shape
        torch.Size([3, 3])
    """
    check_glm(model)
    phi = check_dispersion(model, dispersion)
    batches = as_batches(data, model)
    if prior is None:
        prior = GaussianPrior.from_l2(model.l2 / phi, _total_weight(batches))
    if fit:
        _fit_map(model, data, prior, solver, phi, **options)
    model.check_fitted()
    # The solvers' pass gives E = mean NLL (at phi = 1) + the model's penalty and its
    # derivatives; the summed negative log-likelihood at phi has the derivatives
    # S (E - penalty) / phi (the Gaussian's and the Gamma's NLL scale as 1 / phi in eta).
    total = _total_weight(batches)
    loss, g_obj, H_obj = hessian_and_gradient(model, batches)
    theta = flat_parameters(model, loss.dtype).to(loss.device)
    mask = penalty_mask(model, loss.dtype, loss.device)
    pen, w = model.l2_penalty, mask * theta
    if model.family.has_dispersion:
        nll = -_log_likelihood(model, theta, batches, phi)
    else:
        nll = total * (loss - pen.value(w))
    prec = prior.precision(n_weights(model), n_bias(model), theta)
    H = total * (H_obj - torch.diag(pen.curvature(mask))) / phi + torch.diag(prec)
    grad_post = total * (g_obj - pen.grad(w)) / phi + prec * theta
    basis = identified_basis(model, prior, theta)
    if basis is not None:
        theta = basis @ (basis.T @ theta)  # centre the softmax biases: same predictions
        grad_post = basis.T @ grad_post
        H_red = basis.T @ H @ basis
    else:
        H_red = H
    L, info = torch.linalg.cholesky_ex(H_red)
    if int(info) != 0:
        raise fail(
            "posterior precision H",
            "positive definite (a proper posterior; "
            "give the bias a finite prior variance or check for separation)",
            f"a non-positive pivot at index {int(info) - 1}",
        )
    eye = torch.eye(H_red.shape[0], dtype=H.dtype, device=H.device)
    L_inv_T = torch.linalg.solve_triangular(L, eye, upper=False).T  # H_red^{-1} = L^{-T} L^{-1}
    scale = L_inv_T if basis is None else basis @ L_inv_T
    cov = scale @ scale.T
    D = H_red.shape[0]
    log_prior = -0.5 * float((prec * theta * theta).sum()) + prior.log_normalizer(
        n_weights(model), n_bias(model)
    )
    log_evidence = (
        -float(nll) + log_prior + 0.5 * D * math.log(2 * math.pi) - float(torch.log(torch.diagonal(L)).sum())
    )
    return LaplacePosterior(
        mean=theta,
        covariance=cov,
        precision=H,
        scale=scale,
        log_evidence=log_evidence,
        log_likelihood=-float(nll),
        grad_norm=float(grad_post.norm()),
        prior=prior,
        basis=basis,
        shape=(model.n_outputs, model.n_features, model.n_bias > 0),
        dispersion=phi,
    )
