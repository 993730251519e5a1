"""Link functions ``g``: ``eta = g(mu)``, ``mu = g^{-1}(eta)``.

A GLM (seed 000, "Exponential families and GLM") predicts ``mu = E[y|x]`` through
an activation ``f = g^{-1}`` applied to the linear predictor ``eta = w^T x + w0``.
Each link is one small class; the registry :data:`LINKS` maps names to classes,
so adding a link touches no other file.

Links whose inverse maps into (0, 1) also give ``log_inverse(eta) = log mu`` and
``log1m_inverse(eta) = log(1 - mu)`` computed on the eta scale with stable
primitives (``logsigmoid``, ``log_ndtr``, ``expm1``); the Bernoulli family builds
its likelihood from them, never from ``log(sigmoid(.))``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validation import fail

__all__ = [
    "Link",
    "Identity",
    "Logit",
    "Probit",
    "CLogLog",
    "Log",
    "Inverse",
    "NegativeReciprocal",
    "Softmax",
    "LINKS",
    "get_link",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)


class Link:
    """Base class of link functions.

    Subclasses implement ``link`` (mu -> eta), ``inverse`` (eta -> mu) and
    ``inverse_derivative`` (d mu / d eta). ``name`` is the registry key.
    """

    name: str = ""
    #: True when eta has one column per class (softmax).
    multi_output: bool = False

    def link(self, mu: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def inverse(self, eta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def inverse_derivative(self, eta: torch.Tensor) -> torch.Tensor:
        """d mu / d eta, elementwise."""
        raise NotImplementedError

    def log_inverse(self, eta: torch.Tensor) -> torch.Tensor:
        """log mu, for links onto (0, 1) (or (0, inf))."""
        return torch.log(self.inverse(eta))

    def log1m_inverse(self, eta: torch.Tensor) -> torch.Tensor:
        """log(1 - mu), for links onto (0, 1)."""
        return torch.log1p(-self.inverse(eta))

    def valid_eta(self, eta: torch.Tensor) -> torch.Tensor:
        """Boolean mask of eta values inside the link's domain (all True by default)."""
        return torch.ones_like(eta, dtype=torch.bool)

    def __call__(self, mu: torch.Tensor) -> torch.Tensor:
        return self.link(mu)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class Identity(Link):
    """``mu = eta`` (canonical for the Gaussian: linear regression)."""

    name = "identity"

    def link(self, mu):
        return mu

    def inverse(self, eta):
        return eta

    def inverse_derivative(self, eta):
        return torch.ones_like(eta)


class Logit(Link):
    """``mu = sigma(eta) = 1 / (1 + e^{-eta})`` (canonical for Bernoulli; seed 000).

    ``d sigma / d eta = sigma (1 - sigma)``.
    """

    name = "logit"

    def link(self, mu):
        return torch.logit(mu)

    def inverse(self, eta):
        return torch.sigmoid(eta)

    def inverse_derivative(self, eta):
        s = torch.sigmoid(eta)
        return s * (1 - s)

    def log_inverse(self, eta):
        return F.logsigmoid(eta)

    def log1m_inverse(self, eta):
        return F.logsigmoid(-eta)


class Probit(Link):
    """``mu = Phi(eta)``, the standard normal CDF (seed 000, "Probit regression").

    The outputs of a probit model are probits, not logits.
    """

    name = "probit"

    def link(self, mu):
        return torch.special.ndtri(mu)

    def inverse(self, eta):
        return torch.special.ndtr(eta)

    def inverse_derivative(self, eta):
        return torch.exp(-0.5 * eta * eta) / _SQRT_2PI

    def log_inverse(self, eta):
        return torch.special.log_ndtr(eta)

    def log1m_inverse(self, eta):
        # 1 - Phi(eta) = Phi(-eta): no cancellation in the upper tail.
        return torch.special.log_ndtr(-eta)


class CLogLog(Link):
    """Complementary log-log: ``mu = 1 - exp(-exp(eta))``."""

    name = "cloglog"

    def link(self, mu):
        return torch.log(-torch.log1p(-mu))

    def inverse(self, eta):
        return -torch.expm1(-torch.exp(eta))

    def inverse_derivative(self, eta):
        return torch.exp(eta - torch.exp(eta))

    def log_inverse(self, eta):
        # log(1 - e^{-x}) with x = e^eta.  Once x < e^-20 the series
        # log x - x/2 + O(x^2) is exact to 1e-19 and, unlike the direct form,
        # stays finite after e^{-x} rounds to 1 (eta < -37) or x underflows.
        x = torch.exp(eta)
        small = eta < -20.0
        direct = torch.log(-torch.expm1(-torch.where(small, torch.ones_like(x), x)))
        return torch.where(small, eta - 0.5 * x, direct)

    def log1m_inverse(self, eta):
        return -torch.exp(eta)


class Log(Link):
    """``mu = exp(eta)`` (canonical for Poisson; seed 000, Poisson regression)."""

    name = "log"

    def link(self, mu):
        return torch.log(mu)

    def inverse(self, eta):
        return torch.exp(eta)

    def inverse_derivative(self, eta):
        return torch.exp(eta)

    def log_inverse(self, eta):
        return eta

    def log1m_inverse(self, eta):
        # log(1 - e^eta) for the binomial log link (eta < 0): expm1 keeps
        # precision as eta -> 0-.
        return torch.log(-torch.expm1(eta))


class Inverse(Link):
    """``mu = 1 / eta`` (the Gamma's canonical link in statsmodels' sign convention).

    Defined for eta > 0 when the mean must be positive.
    """

    name = "inverse"

    def link(self, mu):
        return 1.0 / mu

    def inverse(self, eta):
        return 1.0 / eta

    def inverse_derivative(self, eta):
        return -1.0 / (eta * eta)

    def log_inverse(self, eta):
        return -torch.log(eta)

    def valid_eta(self, eta):
        return eta > 0


class NegativeReciprocal(Link):
    """``mu = -1 / eta`` (seed 000's exponential regression: theta = -lambda, y = -1/theta).

    Defined for eta < 0 so that the mean ``mu = 1/lambda`` is positive.
    """

    name = "negative_reciprocal"

    def link(self, mu):
        return -1.0 / mu

    def inverse(self, eta):
        return -1.0 / eta

    def inverse_derivative(self, eta):
        return 1.0 / (eta * eta)

    def log_inverse(self, eta):
        return -torch.log(-eta)

    def valid_eta(self, eta):
        return eta < 0


class Softmax(Link):
    """``mu_k = exp(eta_k) / sum_j exp(eta_j)`` over the last dimension (seed 000).

    The canonical (multi-output) link of the categorical family. Its "link" maps
    probabilities to log-probabilities, defined up to an additive constant per row.
    """

    name = "softmax"
    multi_output = True

    def link(self, mu):
        return torch.log(mu)

    def inverse(self, eta):
        return torch.softmax(eta, dim=-1)

    def inverse_derivative(self, eta):
        """Jacobian d mu / d eta: ``diag(mu) - mu mu^T`` per row, shape (..., K, K)."""
        mu = torch.softmax(eta, dim=-1)
        return torch.diag_embed(mu) - mu.unsqueeze(-1) * mu.unsqueeze(-2)

    def log_inverse(self, eta):
        return torch.log_softmax(eta, dim=-1)


#: Registry of link names to classes.
LINKS: dict[str, type[Link]] = {
    cls.name: cls
    for cls in (Identity, Logit, Probit, CLogLog, Log, Inverse, NegativeReciprocal, Softmax)
}


def get_link(link: str | Link) -> Link:
    """Return a link instance from a name in :data:`LINKS` or an instance."""
    if isinstance(link, Link):
        return link
    if isinstance(link, str) and link in LINKS:
        return LINKS[link]()
    raise fail("link", f"one of {sorted(LINKS)}", repr(link))
