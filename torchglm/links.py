"""Link functions ``g``: ``eta = g(mu)``, ``mu = g^{-1}(eta)``.

A GLM (the lecture notes on probabilistic classification, §6; McCullagh & Nelder §2.2.4) predicts
``mu = E[y|x]`` through an activation ``f = g^{-1}`` applied to the linear predictor ``eta = w^T x + w0``.
Each link is one small class, registered in :data:`LINKS` by its ``@register``
line; it declares a representative ``eta_interval``, which the simulated data and
the tests read, so adding a link touches no other file (the families list the links
they allow).

Links whose inverse maps into (0, 1) also give ``log_inverse(eta) = log mu`` and
``log1m_inverse(eta) = log(1 - mu)`` computed on the eta scale with stable
primitives (``logsigmoid``, ``log_ndtr``, ``expm1``); the Bernoulli family builds
its likelihood from them, never from ``log(sigmoid(.))``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validation import fail, host_readable

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
    "Sqrt",
    "Cauchit",
    "LINKS",
    "get_link",
    "log_softmax",
    "softmax",
    "SHORT_SOFTMAX_MAX_CLASSES",
    "softmax_nll",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)
_LOG2 = math.log(2.0)
#: (-1)^(k+1) (2k-1)!! for k = 1..14: the series of 1 - t m(t) in u = 1/t^2.
_MILLS_COEF = tuple((-1) ** (k + 1) * math.prod(range(1, 2 * k, 2)) for k in range(1, 15))

#: Registry of link names to classes, filled by :func:`register` where each class is defined.
LINKS: dict[str, type[Link]] = {}


def register(cls: type[Link]) -> type[Link]:
    """Class decorator: add a link class to :data:`LINKS` under its ``name``."""
    if not cls.name or cls.name in LINKS:
        raise ValueError(f"link class {cls.__qualname__}: name {cls.name!r} is empty or taken")
    LINKS[cls.name] = cls
    return cls


class Link:
    """Base class of link functions.

    Subclasses implement ``link`` (mu -> eta), ``inverse`` (eta -> mu) and
    ``inverse_derivative`` (d mu / d eta). ``name`` is the registry key.
    """

    name: str = ""
    #: True when eta has one column per class (softmax).
    multi_output: bool = False
    #: True when only part of the real line is a valid eta (:meth:`valid_eta` is then
    #: overridden); the solvers count the samples outside it only for such links.
    restricts_eta: bool = False
    #: True when eta is the log-odds ``log(mu / (1 - mu))`` (logit): binary families
    #: then take their NLL from ``binary_cross_entropy_with_logits``.
    eta_is_log_odds: bool = False
    #: A representative interval ``(lo, hi)`` of eta: its means ``g^{-1}(eta)`` lie inside
    #: the mean domain of every family that allows the link, away from the boundary
    #: (a family overrides it where its domain needs: ``Family.link_eta_intervals``).
    #: :func:`torchglm.data.simulate.simulate_glm` draws the true eta in it, and the
    #: tests take their eta grids from it. ``None`` for the multi-output softmax.
    eta_interval: tuple[float, float] | None = None
    #: True when the inverse is the CDF of a symmetric distribution, ``F(-t) = 1 - F(t)``:
    #: ``log(1 - mu)`` at eta is ``log mu`` at ``-eta``, so a 0/1 target's NLL is
    #: ``-log F(q eta)`` with ``q = 2y - 1`` (one tail per sample, :meth:`log_inverse_derivatives`).
    symmetric: bool = False

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

    def log_inverse_derivatives(self, eta: torch.Tensor, order: int):
        """``log mu`` and its closed-form derivatives with respect to eta, for links
        onto (0, 1): ``(a0, a1)`` for ``order=1``, ``(a0, a1, a2)`` for ``order=2`` (the
        digit the order), or ``None`` where the link has none. One elementwise pass, not
        an autodiff graph."""
        return None

    def log_mean_derivatives(self, eta: torch.Tensor, order: int):
        """``log mu``, ``log(1 - mu)`` and their closed-form derivatives with respect
        to eta, for links onto (0, 1): ``(a0, b0, a1, b1)`` for ``order=1`` and
        ``(a0, b0, a1, b1, a2, b2)`` for ``order=2`` (``a`` for ``log mu``, ``b`` for
        ``log(1 - mu)``, the digit the order), or ``None`` where the link has none
        (the binary families then differentiate their NLL with :mod:`torch.func`).

        A :attr:`symmetric` link's ``log(1 - mu)`` is ``log F(-eta)``: its derivatives
        are :meth:`log_inverse_derivatives` at ``-eta`` with the odd orders' signs
        flipped."""
        if not self.symmetric:
            return None
        at = self.log_inverse_derivatives(eta, order)
        if at is None:
            return None
        op = self.log_inverse_derivatives(-eta, order)
        out = (at[0], op[0], at[1], -op[1])
        return out if order == 1 else (*out, at[2], op[2])

    def reciprocal_inverse(self, eta: torch.Tensor) -> torch.Tensor:
        """1 / mu, for the Gamma's ``y / mu`` (links override it where ``1 / g^{-1}``
        would overflow or lose its derivative: ``e^{-eta}`` for the log link)."""
        return 1.0 / self.inverse(eta)

    def valid_eta(self, eta: torch.Tensor) -> torch.Tensor:
        """Boolean mask of eta values inside the link's domain (all True by default;
        a link that overrides it declares ``restricts_eta = True``)."""
        return torch.ones_like(eta, dtype=torch.bool)

    def __call__(self, mu: torch.Tensor) -> torch.Tensor:
        return self.link(mu)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


@register
class Identity(Link):
    """``mu = eta`` (canonical for the Gaussian: linear regression)."""

    name = "identity"
    eta_interval = (0.0, 2.0)

    def link(self, mu):
        return mu

    def inverse(self, eta):
        return eta

    def inverse_derivative(self, eta):
        return torch.ones_like(eta)


@register
class Logit(Link):
    """``mu = sigma(eta) = 1 / (1 + e^{-eta})`` (canonical for Bernoulli; the lecture notes, §6).

    ``d sigma / d eta = sigma (1 - sigma) = sigma(eta) sigma(-eta)``.
    """

    name = "logit"
    eta_interval = (-1.5, 1.5)
    eta_is_log_odds = True
    symmetric = True

    def link(self, mu):
        return torch.logit(mu)

    def inverse(self, eta):
        return torch.sigmoid(eta)

    def inverse_derivative(self, eta):
        # sigma(eta) sigma(-eta): no 1 - sigma rounding to 0 for eta > 37.
        return torch.sigmoid(eta) * torch.sigmoid(-eta)

    def log_inverse(self, eta):
        return F.logsigmoid(eta)

    def log1m_inverse(self, eta):
        return F.logsigmoid(-eta)


def _mills_asymptotic(t: torch.Tensor) -> torch.Tensor:
    """``1 - t m(t)`` for large ``t``, ``m(t) = (1 - Phi(t)) / phi(t)`` (Mills' ratio).

    From ``m(t) ~ (1/t) sum_k (-1)^k (2k-1)!! / t^{2k}`` (Abramowitz & Stegun
    26.2.12): ``1 - t m = 1/t^2 - 3/t^4 + 15/t^6 - ...``. Fourteen terms are within 20
    float64 ulps for ``t >= 12``, where the direct form loses ``t^2`` ulps.
    """
    u = 1.0 / (t * t)
    total = torch.zeros_like(t)
    for c in reversed(_MILLS_COEF):  # Horner in u
        total.add_(c).mul_(u)
    return total


#: Where ``t <= -a0``, :func:`_log_ndtr_derivatives` takes ``log Phi(t)`` and ``r(t)``
#: from the asymptotic series of Mills' ratio (:func:`_mills_asymptotic`; its fourteen
#: terms are within 20 float64 ulps from 12, 4e-6 relative from 6), in float64 from 12
#: and in float32 (and narrower) from 6: there ``erfc(|t| / sqrt 2)`` is far from
#: underflow, and the second derivative's cancellation ``t + r`` (``a^2`` times the ulps
#: of ``r``) stays within 260 ulps of 60-digit values in float64 and 330 in float32 (the
#: ``erfcx`` form before it: 370 and 410).
_MILLS_FROM = 12.0
_MILLS_FROM_NARROW = 6.0
#: Dekker's splitter ``2^27 + 1``: ``z = z_hi + z_lo`` with ``z_hi^2`` exact in float64.
_SPLIT = 2.0**27 + 1.0


def _exp_neg_square(z: torch.Tensor) -> torch.Tensor:
    """``exp(-z^2)`` without the rounding of ``z^2`` (``z^2`` ulps of ``exp``): ``z^2 =
    h + l`` split exactly (Dekker 1971: ``h = fl(z^2)``, ``l`` from ``z = z_hi + z_lo``),
    ``exp(-h) (1 - l)``. Beyond ``z = 40`` (where ``exp(-z^2)`` underflows) ``z`` is
    clamped, so the split never overflows."""
    z = z.clamp(max=40.0)
    c = z * _SPLIT
    hi = c - (c - z)
    lo = z - hi
    h = z * z
    low = torch.addcmul(torch.addcmul(hi * hi - h, hi, lo, value=2.0), lo, lo)
    return torch.exp(-h).mul_(1.0 - low)


def _log_ndtr_derivatives(t: torch.Tensor, order: int):
    """``log Phi(t)``, ``r(t) = phi(t) / Phi(t) = (log Phi)'(t)`` and, for ``order=2``,
    ``(log Phi)''(t) = -r (t + r)``, from one ``erfc``, one ``exp`` and two logs per element.

    With ``a = |t|`` and ``E = erfc(a / sqrt 2) = 2 Phi(-a)`` (either tail without
    cancellation): ``log Phi(t) = log(E / 2)`` below 0 and ``log1p(-E / 2)`` above;
    ``r = phi(a) / Phi(t) = sqrt(2 / pi) e^{-z^2} / (2 Phi(t))``, ``2 Phi(t) = E`` or
    ``2 - E``. ``e^{-z^2}`` and ``E`` take the same rounded ``z = a / sqrt 2``, so their
    ratio (Mills' ratio, ``r`` below 0) carries no error of ``z``'s rounding, and in
    float64 ``e^{-z^2}`` takes ``z^2`` split exactly (:func:`_exp_neg_square`): a few ulps
    in ``r`` where a rounded ``z^2`` costs ``z^2`` ulps, and ``t + r`` cancels to ``1/a``
    (``a^2`` times the ulps of ``r``). Below ``t = -a_0`` (:data:`_MILLS_FROM`) Mills'
    ratio ``m = (1 - Phi(a)) / phi(a)`` comes from its asymptotic series (Abramowitz &
    Stegun 26.2.12): ``log Phi(t) = -a^2/2 - log sqrt(2 pi) + log m``, ``r = 1 / m``,
    ``t + r = (1 - a m) / m``.
    """
    wide = t.dtype == torch.float64
    a0 = _MILLS_FROM if wide else _MILLS_FROM_NARROW
    a = t.abs()
    z = a * _SQRT_HALF
    E = torch.special.erfc(z)
    g = _exp_neg_square(z) if wide else torch.exp(-z * z)
    neg = t < 0
    log_cdf = torch.where(neg, torch.log(E * 0.5), torch.log1p(E * -0.5))
    r = g.mul_(math.sqrt(2.0 / math.pi)).div_(torch.where(neg, E, 2.0 - E))
    s = t + r if order == 2 else None
    # The series only where a sample lies below -a0 (read where that needs no device
    # sync and no torch.func transform forbids it; elsewhere evaluated for every sample).
    if not host_readable(t) or (t.numel() and float(t.min()) <= -a0):
        big = t <= -a0
        ab = torch.where(big, a, a0)
        q = _mills_asymptotic(ab)  # 1 - a m
        m = (1.0 - q) / ab
        log_cdf = torch.where(big, torch.log(m) - 0.5 * ab * ab - 0.5 * math.log(2.0 * math.pi), log_cdf)
        r = torch.where(big, 1.0 / m, r)
        if s is not None:
            s = torch.where(big, q / m, s)
    if s is None:
        return log_cdf, r
    return log_cdf, r, s.mul_(r).neg_()


class _ElementwiseFunction(torch.autograd.Function):
    """An elementwise ``f(eta)`` with a hand-written derivative ``f'(eta)``
    (:meth:`derivative`), for reverse mode, forward mode and ``vmap`` alike."""

    generate_vmap_rule = True

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @classmethod
    def backward(cls, ctx, grad):
        (eta,) = ctx.saved_tensors
        return grad * cls.derivative(eta)

    @classmethod
    def jvp(cls, ctx, tangent):
        (eta,) = ctx.saved_tensors
        return tangent * cls.derivative(eta)


class _NdtrRatio(_ElementwiseFunction):
    """``r(eta) = phi(eta) / Phi(eta) = d log Phi / d eta`` with ``r' = -r (eta + r)``."""

    @staticmethod
    def forward(eta):
        return _log_ndtr_derivatives(eta, 1)[1]

    @staticmethod
    def derivative(eta):
        return _log_ndtr_derivatives(eta, 2)[2]


class _LogNdtr(_ElementwiseFunction):
    """``log Phi(eta)`` (``torch.special.log_ndtr``) whose derivative is the stable
    ratio :class:`_NdtrRatio`: autograd of ``log_ndtr`` forms
    ``exp(-eta^2/2 - log Phi(eta))``, two numbers near ``-eta^2/2`` whose
    difference loses everything in float32 at ``eta = -1e4`` (-64,930 for
    -10,000). Works under :mod:`torch.func` (``grad`` of ``grad``, ``vmap``,
    forward mode: ``jvp``, ``jacfwd``, ``hessian``)."""

    @staticmethod
    def forward(eta):
        return torch.special.log_ndtr(eta)

    @staticmethod
    def derivative(eta):
        return _NdtrRatio.apply(eta)


@register
class Probit(Link):
    """``mu = Phi(eta)``, the standard normal CDF (the lecture notes, §11; Bishop PRML §4.3.5).

    The outputs of a probit model are probits, not logits. ``log mu`` and
    ``log(1 - mu) = log Phi(-eta)`` carry stable first and second derivatives
    (``d log Phi / d eta = phi / Phi``, the inverse Mills ratio, through ``erfc``
    and its asymptotic series), so Newton's curvature stays right at ``|eta| = 1e4``.
    """

    name = "probit"
    eta_interval = (-1.0, 1.0)
    symmetric = True

    def link(self, mu):
        return torch.special.ndtri(mu)

    def inverse(self, eta):
        return torch.special.ndtr(eta)

    def inverse_derivative(self, eta):
        return torch.exp(-0.5 * eta * eta) / _SQRT_2PI

    def log_inverse(self, eta):
        return _LogNdtr.apply(eta)

    def log1m_inverse(self, eta):
        # 1 - Phi(eta) = Phi(-eta): no cancellation in the upper tail.
        return _LogNdtr.apply(-eta)

    def log_inverse_derivatives(self, eta, order):
        # (log Phi)' = r = phi / Phi, (log Phi)'' = -r (eta + r).
        return _log_ndtr_derivatives(eta, order)


@register
class CLogLog(Link):
    """Complementary log-log: ``mu = 1 - exp(-exp(eta))``."""

    name = "cloglog"
    eta_interval = (-1.5, 0.5)

    def link(self, mu):
        return torch.log(-torch.log1p(-mu))

    def inverse(self, eta):
        return -torch.expm1(-torch.exp(eta))

    def inverse_derivative(self, eta):
        return torch.exp(eta - torch.exp(eta))

    def log_inverse(self, eta):
        # log(1 - e^{-x}) with x = e^eta (Maechler's log1mexp, both tails):
        # * x < e^-20: the series log x - x/2 + x^2/24 (exact to 1e-26), finite
        #   after e^{-x} rounds to 1 or x underflows;
        # * x <= log 2: log(-expm1(-x));  x > log 2: log1p(-e^{-x});
        # * eta > 7: log mu = -exp(-e^eta) < -1e-476 is 0 with zero derivatives,
        #   and clamping keeps e^eta finite (e^eta = inf made 0 * inf = NaN).
        # Each branch sees only inputs where it is finite, so no NaN gradient leaks
        # through torch.where.
        e = eta.clamp(max=7.0)
        x = torch.exp(e)
        small = e < -20.0
        upper = x > _LOG2
        one = torch.ones_like(x)
        near = torch.log(-torch.expm1(-torch.where(small | upper, one, x)))
        far = torch.log1p(-torch.exp(-torch.where(upper, x, one)))
        return torch.where(small, e - 0.5 * x + x * x / 24.0, torch.where(upper, far, near))

    def log1m_inverse(self, eta):
        return -torch.exp(eta)


@register
class Log(Link):
    """``mu = exp(eta)`` (canonical for Poisson; the lecture notes, §6)."""

    name = "log"
    eta_interval = (0.0, 1.0)

    def link(self, mu):
        return torch.log(mu)

    def inverse(self, eta):
        return torch.exp(eta)

    def inverse_derivative(self, eta):
        return torch.exp(eta)

    def log_inverse(self, eta):
        return eta

    def reciprocal_inverse(self, eta):
        # e^{-eta}, not 1 / e^eta: at eta = 1e4 the latter is 1/inf with a NaN
        # derivative, and in float32 at eta = -50 its derivative overflows mu^2.
        return torch.exp(-eta)

    def log1m_inverse(self, eta):
        # log(1 - e^eta) for the binomial log link (eta < 0): expm1 keeps
        # precision as eta -> 0-.
        return torch.log(-torch.expm1(eta))


@register
class Inverse(Link):
    """``mu = 1 / eta`` (the Gamma's canonical link in statsmodels' sign convention).

    Defined for eta > 0 when the mean must be positive.
    """

    name = "inverse"
    eta_interval = (0.5, 1.5)
    restricts_eta = True

    def link(self, mu):
        return 1.0 / mu

    def inverse(self, eta):
        return 1.0 / eta

    def inverse_derivative(self, eta):
        return -1.0 / (eta * eta)

    def log_inverse(self, eta):
        return -torch.log(eta)

    def reciprocal_inverse(self, eta):
        return eta

    def valid_eta(self, eta):
        return eta > 0


@register
class NegativeReciprocal(Link):
    """``mu = -1 / eta`` (the lecture notes, §6: exponential regression, theta = -lambda, y = -1/theta).

    Defined for eta < 0 so that the mean ``mu = 1/lambda`` is positive.
    """

    name = "negative_reciprocal"
    eta_interval = (-1.5, -0.5)
    restricts_eta = True

    def link(self, mu):
        return -1.0 / mu

    def inverse(self, eta):
        return -1.0 / eta

    def inverse_derivative(self, eta):
        return 1.0 / (eta * eta)

    def log_inverse(self, eta):
        return -torch.log(-eta)

    def reciprocal_inverse(self, eta):
        return -eta

    def valid_eta(self, eta):
        return eta < 0


#: At most this many classes: :func:`log_softmax` and :func:`softmax` on a CPU write the
#: max-shifted formula out (one reduction for the max, one for the sum, elementwise work
#: between), where torch's CPU kernel over a short last dimension took about three times
#: as long (float64, one thread: 1,797 x 10, 282 against 80 us; 100,000 x 10, 15.4
#: against 4.8 ms; 11,000 x 20, 1.9 against 0.7 ms); at 100 classes they are even, and
#: beyond torch's own is faster.
SHORT_SOFTMAX_MAX_CLASSES = 32


def _short_rows(eta: torch.Tensor) -> bool:
    """Whether :func:`log_softmax` / :func:`softmax` write the formula out for ``eta``:
    a short last dimension on a CPU, outside autograd (whose graph keeps torch's op)."""
    return (
        eta.shape[-1] <= SHORT_SOFTMAX_MAX_CLASSES
        and eta.device.type == "cpu"
        and not (eta.requires_grad and torch.is_grad_enabled())
    )


def log_softmax(eta: torch.Tensor) -> torch.Tensor:
    """``log softmax(eta)`` over the last dimension, ``z - log sum_k exp(z_k)`` with
    ``z = eta - max_k eta_k`` (so ``exp`` never overflows and the sum is at least 1):
    ``torch.log_softmax``'s arithmetic, written out for a short last dimension on a CPU
    (:data:`SHORT_SOFTMAX_MAX_CLASSES`)."""
    if not _short_rows(eta):
        return torch.log_softmax(eta, dim=-1)
    z = eta - eta.amax(-1, keepdim=True)
    return z.sub_(z.exp().sum(-1, keepdim=True).log_())


def softmax(eta: torch.Tensor) -> torch.Tensor:
    """``softmax(eta)`` over the last dimension, ``exp(z) / sum_k exp(z_k)`` with the
    max-shifted ``z`` of :func:`log_softmax` (same dispatch)."""
    if not _short_rows(eta):
        return torch.softmax(eta, dim=-1)
    z = (eta - eta.amax(-1, keepdim=True)).exp_()
    return z.div_(z.sum(-1, keepdim=True))


def softmax_nll(eta: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(-log softmax(eta)_y, softmax(eta))`` over the last dimension from one set of
    exponentials: with ``z = eta - max_k eta_k``, ``nll = log sum_k e^{z_k} - z_y`` and
    ``mu = e^z / sum_k e^{z_k}`` (written out as in :func:`log_softmax`; beyond a short
    last dimension torch's ``log_softmax`` and one ``exp`` of it, whose fewer sweeps win
    at K = 1,000: 50 against 80 ms a slab)."""
    if not _short_rows(eta):
        log_mu = torch.log_softmax(eta, dim=-1)
        return -log_mu.gather(-1, y.unsqueeze(-1)).squeeze(-1), log_mu.exp_()
    z = eta - eta.amax(-1, keepdim=True)
    z_y = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    mu = z.exp_()
    total = mu.sum(-1, keepdim=True)
    return total.log().squeeze(-1) - z_y, mu.div_(total)


@register
class Softmax(Link):
    """``mu_k = exp(eta_k) / sum_j exp(eta_j)`` over the last dimension (the lecture notes, §10).

    The canonical (multi-output) link of the categorical family. Its "link" maps
    probabilities to log-probabilities, defined up to an additive constant per row.
    """

    name = "softmax"
    multi_output = True

    def link(self, mu):
        return torch.log(mu)

    def inverse(self, eta):
        return softmax(eta)

    def inverse_derivative(self, eta):
        """Jacobian d mu / d eta: ``diag(mu) - mu mu^T`` per row, shape (..., K, K)."""
        mu = softmax(eta)
        return torch.diag_embed(mu) - mu.unsqueeze(-1) * mu.unsqueeze(-2)

    def log_inverse(self, eta):
        return log_softmax(eta)


@register
class Sqrt(Link):
    """``mu = eta^2``, ``eta = sqrt(mu)`` (R's ``poisson(link = "sqrt")``; statsmodels'
    ``Power(0.5)``): the variance-stabilizing link of the Poisson.

    As in statsmodels the inverse is ``eta^2`` on the whole real line (R's
    ``valideta`` also refuses ``eta <= 0``); ``eta = 0`` gives ``mu = 0``, outside the
    Poisson mean domain, so a fit stays on the side of 0 it starts on (the
    intercept-only start ``sqrt(ybar) > 0``). ``log mu = 2 log|eta|`` directly.
    """

    name = "sqrt"
    eta_interval = (1.0, 3.0)

    def link(self, mu):
        return torch.sqrt(mu)

    def inverse(self, eta):
        return eta * eta

    def inverse_derivative(self, eta):
        return 2 * eta

    def log_inverse(self, eta):
        return 2 * torch.log(torch.abs(eta))


@register
class Cauchit(Link):
    """``mu = 1/2 + arctan(eta) / pi``, the Cauchy CDF (R's ``binomial(link = "cauchit")``,
    statsmodels' ``Cauchy``): a binary link with heavy tails, ``1 - mu ~ 1 / (pi eta)``.

    Both tails keep full relative precision through ``atan2``:
    ``mu = atan2(1, -eta) / pi`` and ``1 - mu = atan2(1, eta) / pi`` (no ``1/2 - 1/2``
    cancellation), so ``log mu`` and ``log(1 - mu)`` are finite for every finite eta.
    ``d mu / d eta = 1 / (pi (1 + eta^2))``.
    """

    name = "cauchit"
    eta_interval = (-1.5, 1.5)
    symmetric = True

    def link(self, mu):
        return torch.tan(math.pi * (mu - 0.5))

    def inverse(self, eta):
        return torch.atan2(torch.ones_like(eta), -eta) / math.pi

    def inverse_derivative(self, eta):
        return 1.0 / (math.pi * (1.0 + eta * eta))

    def log_inverse(self, eta):
        return torch.log(torch.atan2(torch.ones_like(eta), -eta)) - math.log(math.pi)

    def log1m_inverse(self, eta):
        return torch.log(torch.atan2(torch.ones_like(eta), eta)) - math.log(math.pi)


def get_link(link: str | Link) -> Link:
    """Return a link instance from a name in :data:`LINKS` or an instance."""
    if isinstance(link, Link):
        return link
    if isinstance(link, str) and link in LINKS:
        return LINKS[link]()
    raise fail("link", f"one of {sorted(LINKS)}", repr(link))
