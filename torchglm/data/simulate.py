"""Data simulated from a GLM with known coefficients (the lecture notes on probabilistic
classification, §6; McCullagh & Nelder §2.2).

``simulate_glm(family, link)`` draws features ``x ~ U(-1, 1)^d``, sets
``eta = w0 + x w`` with a fixed coefficient pattern scaled so that ``eta`` stays
in ``w0 +- r``, the family's representative eta interval
(:attr:`torchglm.families.Family.eta_interval`: the link's own, or the family's
entry for it; there the mean lies in the family's domain, e.g. ``eta > 0`` for the
Gamma's inverse link), and draws ``y ~ p(y | mu = g^{-1}(eta))`` with
``sample_response(family, mu, rng)``, which also serves any other design: give it
the means, get responses of the family.
Coefficient-recovery tests, confidence-interval coverage and the
``configs/glm_*.yaml`` experiments use it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .._validation import fail
from ..families import get_family
from .dataset import Dataset

__all__ = ["SimulatedGLM", "simulate_glm", "sample_response", "glm_dataset"]


class SimulatedGLM(NamedTuple):
    """Simulated data: ``x`` (n, d), ``y`` (n,), ``weight`` (n,) trials for the
    binomial (else ``None``), the true ``coef`` (d,), ``intercept`` and ``dispersion``."""

    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None
    coef: np.ndarray
    intercept: float
    dispersion: float


def simulate_glm(
    family: str,
    link: str | None = None,
    n_samples: int = 1000,
    n_features: int = 3,
    dispersion: float | None = None,
    max_trials: int = 20,
    trials: int | None = None,
    seed: int = 0,
) -> SimulatedGLM:
    """Draw ``(x, y)`` from a GLM with known coefficients.

    Args:
        family: a single-output family name (``gaussian``, ``bernoulli``,
            ``binomial``, ``poisson``, ``gamma``, ``exponential``).
        link: a link the family allows (default: canonical).
        n_samples, n_features: shape of ``x``.
        dispersion: ``phi`` (Gaussian variance, Gamma ``1 / shape``); default
            0.25 for the Gaussian, 0.5 for the Gamma, 1 otherwise (fixed).
        max_trials: binomial trials per row are uniform on ``1..max_trials``.
        trials: every binomial row has exactly this many trials instead.
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        A :class:`SimulatedGLM`.

    Raises:
        InputError: for an unknown or multi-output family, a disallowed link or
            a dispersion given to a family without one.

    Example:
        >>> sim = simulate_glm("poisson", n_samples=200, seed=1)
        >>> sim.x.shape, float(sim.y.min()) >= 0
        ((200, 3), True)
    """
    fam = get_family(family, link)
    phi = _dispersion(fam, family, dispersion)
    lo, hi = fam.eta_interval
    w0, r = (lo + hi) / 2, (hi - lo) / 2
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(n_samples, n_features))
    pattern = np.array([(1.0 if j % 2 == 0 else -1.0) / (1 + 0.5 * j) for j in range(n_features)])
    coef = r * pattern / np.abs(pattern).sum()  # |x w| <= r
    eta = w0 + x @ coef
    mu = fam.mean(torch.as_tensor(eta, dtype=torch.float64)).numpy()
    y, weight = _draw(family, fam.name, mu, rng, phi, max_trials, trials)
    return SimulatedGLM(x, y, weight, coef, float(w0), float(phi))


def sample_response(
    family: str,
    mu: np.ndarray,
    rng: np.random.Generator,
    dispersion: float | None = None,
    max_trials: int = 20,
    trials: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Draw ``y_i ~ p(y | mu_i, phi)`` from a single-output family, one draw per mean
    (McCullagh & Nelder §2.2).

    The draws, for ``mu`` (n,): Gaussian ``mu + sqrt(phi) e``, ``e ~ N(0, 1)``;
    Bernoulli ``Bernoulli(mu)`` as int64 0/1; binomial ``Bin(m_i, mu_i) / m_i`` with
    ``m_i`` uniform on ``1 .. max_trials`` (or equal to ``trials``); Poisson
    ``Poisson(mu)``; Gamma with shape ``1 / phi`` and scale ``mu phi`` (mean ``mu``,
    variance ``phi mu^2``); exponential with mean ``mu``. Only the binomial draws
    twice from ``rng`` (its trials, then the counts), so a caller that draws its
    design from the same generator first gets reproducible data.

    Args:
        family: a single-output family name (``gaussian``, ``bernoulli``,
            ``binomial``, ``poisson``, ``gamma``, ``exponential``).
        mu: means (n,), inside the family's domain (a probability for the
            Bernoulli and binomial, >= 0 for the Poisson, > 0 for the Gamma and
            exponential, finite for the Gaussian).
        rng: the ``numpy.random.Generator`` to draw from.
        dispersion: ``phi`` (Gaussian variance, Gamma ``1 / shape``); default
            0.25 for the Gaussian, 0.5 for the Gamma, 1 otherwise (fixed).
        max_trials: binomial trials per row are uniform on ``1..max_trials``.
        trials: every binomial row has exactly this many trials instead.

    Returns:
        ``(y, weight)``: the responses (n,) (binomial: proportions) and, for the
        binomial, the trials per row (n,) as float64, else ``None``.

    Raises:
        InputError: for an unknown or multi-output family, a dispersion that is
            not positive or given to a family without one, or ``mu`` not 1-D or
            outside the family's domain.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y, trials = sample_response("binomial", np.full(4, 0.5), rng, max_trials=3)
        >>> y.shape, trials.shape, bool(((y >= 0) & (y <= 1)).all())
        ((4,), (4,), True)
    """
    fam = get_family(family)
    phi = _dispersion(fam, family, dispersion)
    return _draw(family, fam.name, np.asarray(mu, dtype=np.float64), rng, phi, max_trials, trials)


def _dispersion(fam, family, dispersion) -> float:
    """``phi`` given or the family's default, after the single-output and positivity checks."""
    if fam.multi_output:
        raise fail("family", "a single-output family", repr(family))
    if dispersion is not None and not fam.has_dispersion:
        raise fail("dispersion", f"None for the '{fam.name}' family (phi = 1)", dispersion)
    phi = dispersion if dispersion is not None else {"gaussian": 0.25, "gamma": 0.5}.get(fam.name, 1.0)
    if phi <= 0:
        raise fail("dispersion", "a positive number", phi)
    return phi


#: Where each family's mean lies (McCullagh & Nelder Table 2.1), as (test, words).
_MEAN_DOMAIN = {
    "gaussian": (np.isfinite, "finite means"),
    "bernoulli": (lambda m: (m >= 0) & (m <= 1), "probabilities in [0, 1]"),
    "binomial": (lambda m: (m >= 0) & (m <= 1), "probabilities in [0, 1]"),
    "poisson": (lambda m: np.isfinite(m) & (m >= 0), "finite means >= 0"),
    "gamma": (lambda m: np.isfinite(m) & (m > 0), "finite means > 0"),
    "exponential": (lambda m: np.isfinite(m) & (m > 0), "finite means > 0"),
}


def _draw(family, name, mu, rng, phi, max_trials, trials):
    if name not in _MEAN_DOMAIN:
        raise fail("family", f"a family with a sampler ({', '.join(_MEAN_DOMAIN)})", repr(family))
    inside, words = _MEAN_DOMAIN[name]
    if mu.ndim != 1:
        raise fail("mu", "a 1-D array of means", f"shape {tuple(mu.shape)}")
    if not inside(mu).all():
        raise fail("mu", words, f"{mu[~inside(mu)][0]} at index {int(np.flatnonzero(~inside(mu))[0])}")
    n = mu.shape[0]
    weight = None
    if name == "gaussian":
        y = mu + np.sqrt(phi) * rng.standard_normal(n)
    elif name == "bernoulli":
        y = rng.binomial(1, mu).astype(np.int64)
    elif name == "binomial":
        if trials is not None:
            weight = np.full(n, float(trials))
        else:
            weight = rng.integers(1, max_trials + 1, size=n).astype(np.float64)
        y = rng.binomial(weight.astype(np.int64), mu) / weight
    elif name == "poisson":
        y = rng.poisson(mu).astype(np.float64)
    elif name == "gamma":
        y = rng.gamma(1.0 / phi, mu * phi)
    else:
        y = rng.exponential(mu)
    return y, weight


def glm_dataset(
    family: str,
    link: str | None = None,
    n_samples: int = 1000,
    n_features: int = 3,
    dispersion: float | None = None,
    seed: int = 0,
):
    """:func:`simulate_glm` as a built-in dataset (``source: glm_<family>`` in a config).

    The data module has no weight column, so the binomial dataset has one trial
    per row (proportions 0 or 1): its fit and standard errors are then exact.

    Returns:
        A :class:`torchglm.data.Dataset`; the true coefficients are in
        its ``description``.
    """
    sim = simulate_glm(
        family, link, n_samples, n_features, dispersion, trials=1 if family == "binomial" else None, seed=seed
    )
    fam = get_family(family, link)
    task = "classification" if fam.is_classifier else "regression"
    desc = (
        f"simulated {fam.name} GLM ({fam.link.name} link), seed {seed}: intercept "
        f"{sim.intercept:g}, coef {np.round(sim.coef, 6).tolist()}, dispersion {sim.dispersion:g}"
    )
    return Dataset(sim.x, sim.y, task, 2 if task == "classification" else None, description=desc)
