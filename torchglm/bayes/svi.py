"""Stochastic variational inference with a full-rank Gaussian for any GLM classifier
(the lecture notes on probabilistic classification, §12, option 2: "approximate
p(w | X, t) with a density which can be treated analytically"; Bishop, PRML 10.1;
Kucukelbir et al. 2017, "Automatic differentiation variational inference").

The Jaakkola-Jordan bound (:mod:`torchglm.bayes.variational`) exists for the
logistic likelihood only. The general route maximizes the evidence lower bound

    L(q) = E_q[ln p(D | theta) + ln p(theta)] + H[q] <= ln p(D),     q = N(mean, S),

over every Gaussian ``q`` directly, with reparameterized Monte Carlo gradients
(``theta = mean + S^{1/2} eps``, ``eps ~ N(0, I)``): it only needs the likelihood,
so probit and softmax regression are covered by the same code. It runs in Pyro
(``pyro.infer.SVI``, ``Trace_ELBO``) with an explicit ``MultivariateNormal`` guide
parametrized by its Cholesky factor.

The guide lives in the whitened coordinates of the Laplace posterior
``N(m, F F^T)`` (as the NUTS sampler does): ``theta = m + F z`` and
``q(z) = N(mu, L L^T)``, started at ``mu = 0, L = I``, i.e. at the Laplace
posterior itself. There the target is close to ``N(0, I)``, so a few hundred steps
of a decaying Adam move ``q`` from the Laplace Gaussian to the variational optimum.
The change of variables is linear, so ``L`` in ``z`` equals ``L`` in ``theta`` up to
the constant ``ln |F|``, which is added: the reported ``elbo`` is a bound on
``ln p(D | lambda)`` comparable with the Laplace evidence and the Jaakkola-Jordan
bound (the flat bias prior counted as the density 1, as they count it).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer import SVI, Trace_ELBO
from pyro.optim import ClippedAdam
from torch.func import vmap

from .._validation import check_positive, fail
from ._layout import GaussianDraws, as_batches, check_model, data_nll, n_bias, n_weights
from ._rng import global_rng_restored
from .laplace import LaplacePosterior, laplace_posterior
from .prior import GaussianPrior

__all__ = ["SVIPosterior", "svi_posterior"]


@dataclass
class SVIPosterior(GaussianDraws):
    """``q(theta) = N(mean, covariance)`` over ``theta = (vec W, b)`` fitted by SVI.

    Attributes:
        mean: ``E_q theta`` (p,).
        covariance: ``S`` (p, p) (of rank ``p - 1`` for softmax with a flat bias
            prior: the unidentified shift ``b -> b + c 1`` is left out, as in the
            Laplace posterior).
        scale: ``F`` (p, r) with ``S = F F^T``.
        elbo: a Monte Carlo estimate of the lower bound ``L(q)`` on ``ln p(D | lambda)``
            with ``elbo_draws`` draws from ``q`` (the entropy is exact).
        elbo_se: the Monte Carlo standard error of ``elbo``.
        prior: the :class:`GaussianPrior`.
        shape: ``(n_outputs, n_features, fit_intercept)`` of the model it belongs to.
        history: ``{"step", "elbo"}`` per SVI step: Pyro's ``num_particles``-draw
            estimate of ``L`` at that step (noisy; it shows the climb and its plateau).
        info: the settings (steps, particles, learning rates, seed) and ``wall_s``.
    """

    mean: torch.Tensor
    covariance: torch.Tensor
    scale: torch.Tensor
    elbo: float
    elbo_se: float
    prior: GaussianPrior
    shape: tuple[int, int, bool]
    history: list[dict] = field(default_factory=list, repr=False)
    info: dict = field(default_factory=dict)

    def state_dict(self) -> dict:
        """Plain tensors and numbers, for ``torch.save`` and checkpoints."""
        return {
            "mean": self.mean,
            "covariance": self.covariance,
            "scale": self.scale,
            "elbo": self.elbo,
            "elbo_se": self.elbo_se,
            "prior_variance": self.prior.variance,
            "bias_variance": self.prior.bias_variance,
            "shape": self.shape,
            "history": self.history,
            "info": self.info,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "SVIPosterior":
        state = dict(state)
        prior = GaussianPrior(state.pop("prior_variance"), state.pop("bias_variance"))
        return cls(prior=prior, shape=tuple(state.pop("shape")), **state)


def _log_joint(model, batches, m, F, prec, const):
    """``z (..., r) -> ln p(D | theta) + ln p(theta) + ln |F|`` at ``theta = m + F z``, one
    value per leading index: ``data_nll`` of each draw, vectorized with ``vmap``."""
    nll = vmap(lambda theta: data_nll(model, theta, batches))

    def log_joint(z: torch.Tensor) -> torch.Tensor:
        theta = m + z @ F.T
        flat = theta.reshape(-1, theta.shape[-1])
        with warnings.catch_warnings():
            # ops without a vmap batching rule (log_ndtr: probit) fall back to a loop
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            value = -nll(flat) - 0.5 * (prec * flat * flat).sum(-1) + const
        return value.reshape(theta.shape[:-1])

    return log_joint


def svi_posterior(
    model,
    data,
    prior: GaussianPrior | None = None,
    laplace: LaplacePosterior | None = None,
    num_steps: int = 600,
    num_particles: int = 32,
    lr: float = 0.02,
    final_lr: float = 0.001,
    average_last: float = 0.25,
    elbo_draws: int = 4000,
    seed: int = 0,
) -> SVIPosterior:
    """Full-rank Gaussian variational posterior ``q(theta) = N(mean, S)`` of a logistic,
    probit or softmax model by stochastic variational inference (Pyro).

    Each step draws ``num_particles`` ``theta ~ q`` (vectorized), evaluates
    ``ln p(D | theta)`` by one pass over the batches per draw (:func:`~._layout.data_nll`)
    and takes one Adam step on ``(mu, L)``; the learning rate decays geometrically
    from ``lr`` to ``final_lr``, and the returned ``(mu, L)`` is the average of the
    iterates over the last ``average_last`` of the steps (Polyak-Ruppert), which
    removes most of the remaining gradient noise. The global torch, numpy and
    ``random`` states and Pyro's parameter store are left as they were; the result
    depends only on ``seed``.

    Args:
        model: a classification :class:`~torchglm.models.GeneralizedLinearModel`
            (logistic, probit, softmax); it gives the likelihood and the layout and is
            not changed.
        data: ``(x, y)``, ``(x, y, weight)`` or a re-iterable of ``Batch`` (offsets honoured).
        prior: the prior; ``None`` takes ``laplace.prior``, or ``GaussianPrior(1.0)``
            (flat bias prior) without ``laplace``.
        laplace: the Laplace posterior under ``prior`` to start from; ``None`` computes
            it (on a copy of ``model``; needs tensors as ``data``).
        num_steps: SVI steps.
        num_particles: draws of ``theta`` per step (the gradient's Monte Carlo size).
        lr, final_lr: Adam's learning rate at the first and the last step.
        average_last: the fraction of the last steps whose iterates are averaged (0: none).
        elbo_draws: draws from the final ``q`` for the ``elbo`` estimate.
        seed: the seed of every draw.

    Returns:
        The :class:`SVIPosterior`; ``predictive(model, q, x)`` works as for Laplace.

    Raises:
        InputError: a model that is not a GLM classifier, a ``laplace`` for another
            model or prior, batches without ``laplace``, or a bad setting.

    Example:
        >>> from torchglm.bayes import predictive
        >>> x = torch.randn(200, 2, dtype=torch.float64)
        >>> y = (x[:, 0] - x[:, 1] + torch.randn_like(x[:, 0]) > 0).double()
        >>> model = ProbitRegression(2)
        >>> q = svi_posterior(model, (x, y), GaussianPrior(1.0), num_steps=200)
        >>> pred = predictive(model, q, x[:5])        # exact probit predictive under q
        >>> pred.method, pred.proba.shape
        ('exact', torch.Size([5]))
    """
    check_model(model)
    batches = as_batches(data, model)
    _check_settings(num_steps, num_particles, lr, final_lr, average_last, elbo_draws, seed, prior)
    laplace = _starting_laplace(model, data, prior, laplace)
    prior = laplace.prior
    m, F = laplace.mean, laplace.scale
    r = F.shape[1]
    prec = prior.precision(n_weights(model), n_bias(model), m)
    # ln |F| (the pseudo-determinant on the identified subspace): the density of z is
    # g(m + F z) |F|, so L over z equals L over theta.
    half_logdet_F = 0.5 * float(torch.linalg.slogdet(F.T @ F)[1])
    const = prior.log_normalizer(n_weights(model), n_bias(model)) + half_logdet_F
    log_joint = _log_joint(model, batches, m, F, prec, const)

    def target():
        z = pyro.sample("z", dist.ImproperUniform(constraints.real_vector, (), (r,)))
        pyro.factor("log_joint", log_joint(z))

    def guide():
        loc = pyro.param("loc", torch.zeros(r, dtype=m.dtype, device=m.device))
        tril = pyro.param(
            "scale_tril", torch.eye(r, dtype=m.dtype, device=m.device), constraint=constraints.lower_cholesky
        )
        pyro.sample("z", dist.MultivariateNormal(loc, scale_tril=tril))

    # lr_t = lr * lrd^t reaches final_lr at the last step.
    lrd = (final_lr / lr) ** (1.0 / max(num_steps - 1, 1))
    n_avg = int(round(average_last * num_steps))
    start = time.perf_counter()
    history = []
    # pyro.set_rng_seed reseeds torch, numpy and random globally: restored after;
    # the parameter store is Pyro's global one: use a fresh scope.
    with global_rng_restored(), pyro.get_param_store().scope():
        pyro.set_rng_seed(seed)
        svi = SVI(
            target,
            guide,
            ClippedAdam({"lr": lr, "lrd": lrd, "clip_norm": 10.0}),
            Trace_ELBO(num_particles=num_particles, vectorize_particles=True, max_plate_nesting=0),
        )
        loc_sum = tril_sum = None
        for step in range(num_steps):
            loss = svi.step()
            history.append({"step": step, "elbo": -float(loss)})
            if step >= num_steps - n_avg:
                loc, tril = pyro.param("loc").detach(), pyro.param("scale_tril").detach()
                loc_sum = loc.clone() if loc_sum is None else loc_sum + loc
                tril_sum = tril.clone() if tril_sum is None else tril_sum + tril
        if n_avg:
            mu, L = loc_sum / n_avg, tril_sum / n_avg
        else:
            mu, L = pyro.param("loc").detach(), pyro.param("scale_tril").detach()
        elbo, elbo_se = _elbo(log_joint, mu, L, elbo_draws, seed)
    scale = F @ L
    info = {
        "method": "SVI (pyro Trace_ELBO), full-rank Gaussian guide whitened by Laplace",
        "num_steps": num_steps,
        "num_particles": num_particles,
        "lr": lr,
        "final_lr": final_lr,
        "average_last": average_last,
        "elbo_draws": elbo_draws,
        "seed": seed,
        "laplace_log_evidence": laplace.log_evidence,
        "wall_s": time.perf_counter() - start,
    }
    return SVIPosterior(
        mean=m + F @ mu,
        covariance=scale @ scale.T,
        scale=scale,
        elbo=elbo,
        elbo_se=elbo_se,
        prior=prior,
        shape=(model.n_outputs, model.n_features, model.n_bias > 0),
        history=history,
        info=info,
    )


def _check_settings(num_steps, num_particles, lr, final_lr, average_last, elbo_draws, seed, prior) -> None:
    """:func:`svi_posterior`'s settings, each checked at the boundary."""
    for name, v in (
        ("num_steps", num_steps),
        ("num_particles", num_particles),
        ("lr", lr),
        ("final_lr", final_lr),
        ("elbo_draws", elbo_draws),
    ):
        check_positive(name, v)
    if final_lr > lr:
        raise fail("final_lr", f"at most lr={lr:g} (the learning rate decays)", final_lr)
    if not 0 <= average_last < 1:
        raise fail("average_last", "a fraction in [0, 1)", average_last)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise fail("seed", "an integer", repr(seed))
    if prior is not None and not isinstance(prior, GaussianPrior):
        raise fail("prior", "a GaussianPrior", type(prior).__name__)


def _starting_laplace(model, data, prior: GaussianPrior | None, laplace) -> LaplacePosterior:
    """The Laplace posterior SVI starts from: the given one, checked against the model
    and ``prior``, or computed on a copy of ``model`` (``prior``, or ``GaussianPrior(1.0)``)."""
    p = n_weights(model) + n_bias(model)
    if laplace is None:
        if not (isinstance(data, (tuple, list)) and isinstance(data[0], torch.Tensor)):
            raise fail(
                "laplace",
                "a LaplacePosterior to start from when data are batches (the MAP fit needs tensors)",
                None,
            )
        work = copy.deepcopy(model)
        return laplace_posterior(work, data, prior if prior is not None else GaussianPrior(1.0))
    if not isinstance(laplace, LaplacePosterior):
        raise fail("laplace", "a LaplacePosterior", type(laplace).__name__)
    if laplace.mean.numel() != p:
        raise fail("laplace", f"a posterior over this model's {p} coefficients", laplace.mean.numel())
    if prior is not None and prior != laplace.prior:
        raise fail("prior", f"the prior of laplace ({laplace.prior})", prior)
    return laplace


def _elbo(log_joint, mu: torch.Tensor, L: torch.Tensor, draws: int, seed: int, chunk: int = 500):
    """``L(q) = E_q[ln g] + H[q]`` (``H`` exact: ``(r/2) ln 2 pi e + ln |L|``, the
    ``ln |F|`` being inside ``ln g``) and the standard error of the Monte Carlo mean."""
    g = torch.Generator(device=mu.device).manual_seed(seed + 1)
    values = []
    with torch.no_grad():
        for s in range(0, draws, chunk):
            eps = torch.randn(
                min(chunk, draws - s), mu.shape[0], generator=g, dtype=mu.dtype, device=mu.device
            )
            values.append(log_joint(mu + eps @ L.T))
    v = torch.cat(values)
    r = mu.shape[0]
    entropy = 0.5 * r * math.log(2 * math.pi * math.e) + float(torch.log(torch.diagonal(L)).sum())
    return float(v.mean()) + entropy, float(v.std()) / math.sqrt(draws)
