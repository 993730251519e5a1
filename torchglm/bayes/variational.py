"""Variational Bayesian logistic regression with the Jaakkola-Jordan local bound
(the lecture notes on probabilistic classification, §12, option 2; Bishop, PRML §10.6; Jaakkola
& Jordan 2000).

For ``a = theta^T x~ + o`` (``o`` an offset) the logistic likelihood has the local
lower bound, tight at ``xi = |a|``,

    p(t|a) = e^{a t} sigma(-a) >= e^{a t} sigma(xi) exp{-(a + xi)/2 - lambda(xi)(a^2 - xi^2)},
    lambda(xi) = (sigma(xi) - 1/2) / (2 xi) = tanh(xi/2) / (4 xi),   lambda(0) = 1/8,

quadratic in ``theta``. With the Gaussian prior ``N(0, P^{-1})`` (``P`` diagonal,
:class:`~torchglm.bayes.GaussianPrior`; a zero entry is the flat bias prior) the
bound gives a Gaussian ``q(theta) = N(m, S)`` in closed form, and ``xi`` its own
closed-form update (PRML 10.156-10.157, 10.163):

    S^{-1} = P + 2 sum_i s_i lambda(xi_i) x~_i x~_i^T,
    m      = S sum_i s_i (t_i - 1/2 - 2 lambda(xi_i) o_i) x~_i,
    xi_i^2 = E_q[a_i^2] = (m^T x~_i + o_i)^2 + x~_i^T S x~_i.

Each iteration is one pass of batch sums (``s_i`` the sample weights): it computes
``xi_i`` from the current ``q``, accumulates ``A = 2 sum s lambda x~ x~^T``,
``r = sum s (t - 1/2 - 2 lambda o) x~`` and the constant ``c`` below, all-reduces
them, and solves for the new ``q``. Nothing per sample is stored. The evidence lower
bound at ``(q, xi, P)`` is

    F = c + r^T m - tr(A (S + m m^T)) / 2                       (E_q ln h)
        + sum_{j: P_j > 0} [ln(P_j / 2 pi) - P_j (m_j^2 + S_jj)] / 2   (E_q ln p)
        + (D/2) ln(2 pi e) + (1/2) ln |S|                         (entropy of q)
    c = sum_i s_i [ln sigma(xi_i) - xi_i/2 + lambda(xi_i) xi_i^2 + (t_i - 1/2) o_i - lambda(xi_i) o_i^2],

the flat bias prior counted as the constant density 1, exactly as the Laplace
evidence of :mod:`torchglm.bayes.laplace` counts it, so the two are comparable.
Both updates maximize ``F`` in one block of variables, so ``F`` never decreases.

The prior variance ``lambda_w`` of the weights is optionally re-estimated in the
same iterations by maximizing ``F`` over it (type-II maximum likelihood on the bound;
the EM update of PRML 10.6.2 / 9.3.4): ``lambda_w = (||m_w||^2 + tr S_ww) / M``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .._validation import ConvergenceWarning, check_positive, fail, warn
from ..data.batches import Batch
from ..passes import FitResult, Fitter, all_reduce_sum, run_passes
from ._layout import GaussianDraws, as_batches, check_model, n_bias, n_weights
from .prior import GaussianPrior

__all__ = ["VariationalPosterior", "has_jj_bound", "jj_lambda", "local_xi", "variational_posterior"]


def jj_lambda(xi: torch.Tensor) -> torch.Tensor:
    """``lambda(xi) = tanh(xi / 2) / (4 xi)`` (PRML 10.150), ``1/8`` at ``xi = 0``.

    Written with ``tanh`` (not ``sigma(xi) - 1/2``) so it keeps full relative
    precision for small ``xi``; below ``1e-4`` the series ``1/8 - xi^2/96`` is used.
    """
    small = xi.abs() < 1e-4
    safe = torch.where(small, torch.ones_like(xi), xi)
    return torch.where(small, 0.125 - xi * xi / 96.0, torch.tanh(safe / 2) / (4 * safe))


def local_xi(
    mean: torch.Tensor, covariance: torch.Tensor, x_tilde: torch.Tensor, offset: torch.Tensor | None = None
) -> torch.Tensor:
    """The optimal local parameters ``xi_i = sqrt((m^T x~_i + o_i)^2 + x~_i^T S x~_i)``
    (PRML 10.163, with an offset): the maximizer of the bound over ``xi`` for fixed ``q``.

    Args:
        mean: ``m`` (p,).
        covariance: ``S`` (p, p).
        x_tilde: design rows with the constant column when the model has a bias (n, p).
        offset: ``o`` (n,) or ``None``.

    Returns:
        ``xi`` (n,), non-negative.
    """
    mu_a = x_tilde @ mean
    if offset is not None:
        mu_a = mu_a + offset
    var_a = ((x_tilde @ covariance) * x_tilde).sum(1).clamp_min(0.0)
    return torch.sqrt(mu_a * mu_a + var_a)


@dataclass
class VariationalPosterior(GaussianDraws):
    """``q(theta) = N(mean, covariance)`` over ``theta = (vec W, b)`` from the
    Jaakkola-Jordan bound.

    Attributes:
        mean: ``m`` (p,).
        covariance: ``S`` (p, p).
        precision: ``S^{-1}`` (p, p).
        scale: ``F`` with ``S = F F^T`` (p, p).
        elbo: the lower bound ``F`` on ``ln p(D | lambda)`` at the returned ``q``.
        prior: the :class:`GaussianPrior` (the re-estimated one when ``optimize_prior``).
        shape: ``(n_outputs, n_features, fit_intercept)`` of the model it belongs to.
        result: the pass-based fit's :class:`~torchglm.passes.FitResult`
            (``history`` holds ``elbo`` per iteration).
    """

    mean: torch.Tensor
    covariance: torch.Tensor
    precision: torch.Tensor
    scale: torch.Tensor
    elbo: float
    prior: GaussianPrior
    shape: tuple[int, int, bool]
    result: FitResult = field(repr=False, default=None)

    def state_dict(self) -> dict:
        """Plain tensors and numbers, for ``torch.save`` and checkpoints."""
        return {
            "mean": self.mean,
            "covariance": self.covariance,
            "precision": self.precision,
            "scale": self.scale,
            "elbo": self.elbo,
            "prior_variance": self.prior.variance,
            "bias_variance": self.prior.bias_variance,
            "shape": self.shape,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "VariationalPosterior":
        """The posterior back from :meth:`state_dict` (without the fit's history)."""
        state = dict(state)
        prior = GaussianPrior(state.pop("prior_variance"), state.pop("bias_variance"))
        return cls(prior=prior, shape=tuple(state.pop("shape")), **state)


def _design(batch: Batch, bias: bool) -> torch.Tensor:
    x = batch.x.to_dense() if batch.x.is_sparse or batch.x.layout != torch.strided else batch.x
    return torch.cat([x, torch.ones_like(x[:, :1])], 1) if bias else x


class _JaakkolaJordan(Fitter):
    """One pass: ``xi`` from the current ``q``, the sums ``(A, r, c)``, all-reduced;
    then ``q`` (and optionally ``lambda_w``) in closed form and the bound."""

    def __init__(
        self,
        prior: GaussianPrior,
        m: int,
        k: int,
        bias: bool,
        optimize_prior: bool,
        tol: float,
        max_iter: int,
    ):
        self.prior, self.m, self.k, self.bias = prior, m, k, bias
        self.optimize_prior, self.tol, self.max_iter = optimize_prior, tol, max_iter
        self.mean = self.cov = self.prec_q = None
        self.elbo = -math.inf
        self.result = FitResult("jaakkola-jordan")
        self.done = False

    def start_pass(self) -> None:
        self.A = self.r = self.c = None

    def accumulate(self, batch: Batch) -> None:
        xt = _design(batch, self.bias)
        t = batch.y.to(xt.dtype)
        o = None if batch.offset is None else batch.offset.to(xt.dtype)
        if self.mean is None:
            xi = torch.zeros_like(t)  # first pass: lambda(0) = 1/8, the bound's largest curvature
        else:
            xi = local_xi(self.mean, self.cov, xt, o)
        lam = jj_lambda(xi)
        s = torch.ones_like(t) if batch.weight is None else batch.weight.to(xt.dtype)
        lin = t - 0.5 if o is None else t - 0.5 - 2 * lam * o
        c = F.logsigmoid(xi) - xi / 2 + lam * xi * xi
        if o is not None:
            c = c + (t - 0.5) * o - lam * o * o
        A = 2 * (xt * (s * lam)[:, None]).T @ xt
        r = xt.T @ (s * lin)
        c = (s * c).sum()
        if self.A is None:
            self.A, self.r, self.c = A, r, c
        else:
            self.A, self.r, self.c = self.A + A, self.r + r, self.c + c

    def _prior_precision(self) -> torch.Tensor:
        return self.prior.precision(self.m, self.k, self.A)

    def _bound(self, P: torch.Tensor) -> float:
        m, S, A = self.mean, self.cov, self.A
        D = m.shape[0]
        second = S + torch.outer(m, m)
        e_lnh = self.c + self.r @ m - 0.5 * (A * second).sum()
        proper = P > 0
        e_lnp = (
            0.5 * (torch.log(P[proper] / (2 * math.pi)) - P[proper] * torch.diagonal(second)[proper]).sum()
        )
        entropy = 0.5 * D * math.log(2 * math.pi * math.e) + self.half_logdet_S
        return float(e_lnh + e_lnp + entropy)

    def end_pass(self) -> bool:
        all_reduce_sum(self.A, self.r, self.c)
        P = self._prior_precision()
        prec = self.A + torch.diag(P)
        L, info = torch.linalg.cholesky_ex(prec)
        if int(info) != 0:
            raise fail(
                "variational precision S^{-1}",
                "positive definite (give the bias a finite prior variance, or drop constant columns)",
                f"a non-positive pivot at index {int(info) - 1}",
            )
        eye = torch.eye(prec.shape[0], dtype=prec.dtype, device=prec.device)
        L_inv = torch.linalg.solve_triangular(L, eye, upper=False)
        # S^{-1} = L L^T, so S = L^{-T} L^{-1} and (1/2) ln|S| = -sum ln diag(L).
        old_mean, old_cov = self.mean, self.cov
        self.scale = L_inv.T
        self.cov = self.scale @ self.scale.T
        self.mean = self.cov @ self.r
        change = (
            math.inf
            if old_mean is None
            else max(
                float((self.mean - old_mean).abs().max()) / (1.0 + float(self.mean.abs().max())),
                float((self.cov - old_cov).abs().max()) / float(self.cov.abs().max()),
            )
        )
        self.prec_q = prec
        self.half_logdet_S = -torch.log(torch.diagonal(L)).sum()
        if self.optimize_prior:
            w2 = (self.mean[: self.m] ** 2).sum() + torch.diagonal(self.cov)[: self.m].sum()
            self.prior = GaussianPrior(float(w2) / self.m, self.prior.bias_variance)
            P = self._prior_precision()
        elbo = self._bound(P)
        prev, self.elbo = self.elbo, elbo
        it = len(self.result.history)
        self.result.history.append({"iteration": it, "elbo": elbo, "prior_variance": self.prior.variance})
        self.result.n_iter = it + 1
        self.result.history[-1]["change"] = change
        if change <= self.tol:
            self.result.converged, self.done = True, True
            self.result.message = f"relative change of (m, S) <= tol={self.tol:g}"
        elif self.result.n_iter >= self.max_iter:
            self.done = True
            self.result.message = (
                f"max_iter={self.max_iter} reached; relative change of (m, S) {change:.3g}, "
                f"of the bound {elbo - prev:.3g}"
            )
        return self.done


def has_jj_bound(model) -> bool:
    """Whether the Jaakkola-Jordan bound applies: a logistic regression (Bernoulli
    family, logit link; one output)."""
    fam = model.family
    return not fam.multi_output and fam.name == "bernoulli" and fam.link.eta_is_log_odds


def variational_posterior(
    model,
    data,
    prior: GaussianPrior | None = None,
    optimize_prior: bool = False,
    tol: float = 1e-9,
    max_iter: int = 1000,
) -> VariationalPosterior:
    """Jaakkola-Jordan variational posterior ``q(theta) = N(m, S)`` of a logistic
    regression, its evidence lower bound, and optionally ``lambda`` maximizing it.

    The model only gives the layout (features, intercept); its weights are neither
    read nor changed.

    Args:
        model: a :class:`~torchglm.LogisticRegression` (Bernoulli family, logit link).
        data: ``(x, y)``, ``(x, y, weight)`` or a re-iterable of ``Batch`` (offsets honoured).
        prior: the prior; ``None`` takes ``GaussianPrior(1.0)`` (flat bias prior).
            With ``optimize_prior`` it is the starting ``lambda``.
        optimize_prior: also maximize the bound over the weights' prior variance
            ``lambda`` (``lambda = (||m_w||^2 + tr S_ww) / M`` after each ``q`` update).
        tol: stop when one pass changes ``m`` by at most ``tol (1 + max|m|)`` and ``S``
            by at most ``tol max|S|`` (entrywise). The bound is flat at its maximum, so
            a rule on the bound alone would stop ``sqrt(tol)`` away in ``(m, S)``.
        max_iter: at most this many passes (a fit that stops there warns and reports
            ``result.converged = False``).

    Returns:
        The :class:`VariationalPosterior`; ``elbo <= ln p(D | lambda)``.

    Raises:
        InputError: for another family or link, a bad ``tol``/``max_iter``, or a
            singular ``S^{-1}`` (flat bias prior with no data curvature on the bias).

    Example:
        >>> from torchglm.bayes import predictive
        >>> x = torch.randn(200, 2); y = (x[:, 0] - x[:, 1] + torch.randn(200) > 0).float()
        >>> model = LogisticRegression(2)
        >>> q = variational_posterior(model, (x, y), GaussianPrior(1.0))
        >>> pred = predictive(model, q, x[:5])      # probit approximation, as for Laplace
        >>> pred.method, pred.proba.shape
        ('probit', torch.Size([5]))
    """
    check_model(model)
    if not has_jj_bound(model):
        raise fail(
            "model",
            "a logistic regression (bernoulli family, logit link) for the Jaakkola-Jordan bound",
            f"{model.family.name} with the '{model.family.link.name}' link",
        )
    check_positive("tol", tol)
    check_positive("max_iter", max_iter)
    if prior is None:
        prior = GaussianPrior(1.0)
    if not isinstance(prior, GaussianPrior):
        raise fail("prior", "a GaussianPrior", type(prior).__name__)
    batches = as_batches(data, model)
    fitter = _JaakkolaJordan(
        prior, n_weights(model), n_bias(model), model.has_intercept, optimize_prior, tol, int(max_iter)
    )
    result = run_passes(fitter, batches, int(max_iter))
    if fitter.mean is None:
        raise fail("data", "at least one batch", "no batches")
    if not result.converged:
        warn(f"variational_posterior: {result.message}", ConvergenceWarning)
    return VariationalPosterior(
        mean=fitter.mean,
        covariance=fitter.cov,
        precision=fitter.prec_q,
        scale=fitter.scale,
        elbo=fitter.elbo,
        prior=fitter.prior,
        shape=(model.n_outputs, model.n_features, model.has_intercept),
        result=result,
    )
