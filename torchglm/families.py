"""Exponential-family response distributions ``p(y | eta)``.

The lecture notes on probabilistic classification, §6 (McCullagh & Nelder §2.2), write every family as
``p(y|x) = g(x) f(y) exp(theta(x) u(y))`` and obtains a GLM by predicting
``mu = E[y|x]`` through ``mu = g^{-1}(eta)``, ``eta = w^T x + w0``. With the
canonical link the natural parameter is ``theta = eta`` (Bishop PRML §4.3.6,
McCullagh & Nelder §2.2.4): identity for the normal, logit for the Bernoulli, softmax for
the categorical, log for the Poisson and ``theta = -lambda = -1/mu`` for the
exponential.

A family gives

* ``nll(eta, y)``: the per-sample negative log-likelihood at dispersion
  ``phi = 1`` on the eta scale, with its normalizing constants (``lgamma(y+1)``
  for the Poisson, ``log(2 pi)/2`` for the Gaussian), so that summed it is the
  exact log-likelihood of the families without a dispersion parameter. The
  mean-NLL objective of every solver uses it; ``phi`` never changes the
  maximizer ``beta`` of a GLM, so Gaussian and Gamma fit at ``phi = 1`` and
  ``phi`` is estimated afterwards (:meth:`Family.dispersion`), as in
  statsmodels' IRLS (McCullagh & Nelder 1989, Sec. 2.5).
* ``log_likelihood(eta, y, weight, scale)``: the total log-likelihood at a
  dispersion ``scale`` (and, for the binomial, with the binomial coefficients).
* ``variance(mu)`` (``Var[y] = phi V(mu)``), ``unit_deviance(y, mu)``,
  ``saturated_nll(y)``, ``pearson_chi2`` and the dispersion estimate.
* ``check_target`` (the support of ``y``), ``valid_eta`` (where ``mu`` lies in
  the family's mean domain: outside it ``nll`` is ``+inf``, never NaN, so a line
  search rejects the step), the canonical link and the allowed links.

Each family is one class, registered in :data:`FAMILIES` by its ``@register``
line; an invalid (family, link) pairing is an error that lists the valid links.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validation import check_finite, fail, host_readable
from .links import Link, get_link, softmax_nll

__all__ = [
    "Family",
    "Gaussian",
    "Bernoulli",
    "Binomial",
    "Categorical",
    "Poisson",
    "Gamma",
    "Exponential",
    "FAMILIES",
    "get_family",
]

_LOG_2PI = math.log(2.0 * math.pi)

#: Registry of family names to classes, filled by :func:`register` where each class is defined.
FAMILIES: dict[str, type[Family]] = {}


def register(cls: type[Family]) -> type[Family]:
    """Class decorator: add a family class to :data:`FAMILIES` under its ``name``."""
    if not cls.name or cls.name in FAMILIES:
        raise ValueError(f"family class {cls.__qualname__}: name {cls.name!r} is empty or taken")
    FAMILIES[cls.name] = cls
    return cls


class Family:
    """Base class of response families.

    Args:
        link: a link name from :data:`torchglm.links.LINKS` or a ``Link``;
            ``None`` takes the family's canonical link.

    Raises:
        InputError: if the link is not among ``allowed_links``.
    """

    name: str = ""
    canonical_link: str = ""
    allowed_links: tuple[str, ...] = ()
    #: classifiers predict labels; regression families predict the mean.
    is_classifier: bool = False
    #: True when eta has one column per class.
    multi_output: bool = False
    #: True when ``Var[y] = phi V(mu)`` has a free dispersion ``phi`` (Gaussian, Gamma);
    #: False when ``phi = 1`` (Bernoulli, binomial, Poisson, exponential).
    has_dispersion: bool = False
    #: True when a sample weight is a number of trials (binomial) rather than a
    #: frequency (a weight of 2 = the row twice). It changes the count of
    #: observations used by BIC and the residual degrees of freedom.
    weight_is_trials: bool = False
    #: True when the family defines the saturated model (:meth:`saturated_nll`,
    #: ``mu_i = y_i``): the unit deviance is then ``2 (nll - saturated_nll)``.
    has_saturated_model: bool = False
    #: True when the mean space has a boundary that targets can sit on (a probability
    #: 0 or 1, a count's mean 0): the likelihood of such a sample keeps rising as
    #: ``mu`` goes to that boundary, i.e. as ``eta -> +-inf``, so the unpenalized MLE
    #: need not exist. Whenever a direction moves every boundary sample's ``mu``
    #: towards its ``y`` and leaves the others' unchanged, it is separation (complete,
    #: or quasi-complete; Albert & Anderson, Biometrika 1984; for counts, all zero
    #: within a level of a dummy). The solvers watch these families for it
    #: (:class:`torchglm.solvers.separation.SeparationWatch`). A Gamma or
    #: Gaussian target never sits on its mean's boundary (``y > 0``, ``y`` real).
    separable: bool = False
    #: links whose inverse always lands in the mean domain: ``nll`` skips the
    #: domain mask for them (the hot path of the canonical fits).
    _closed_links: tuple[str, ...] = ()
    #: Representative eta intervals for links whose own ``Link.eta_interval`` does not
    #: suit this family's mean domain (e.g. the log link's means must stay below 1
    #: for a probability); see :attr:`eta_interval`.
    link_eta_intervals: dict[str, tuple[float, float]] = {}

    def __init__(self, link: str | Link | None = None):
        self.link = get_link(self.canonical_link if link is None else link)
        if self.link.name not in self.allowed_links:
            raise fail(
                f"link for family '{self.name}'",
                f"one of {list(self.allowed_links)}",
                repr(self.link.name),
            )
        self._masked = self.link.name not in self._closed_links

    @property
    def is_canonical(self) -> bool:
        return self.link.name == self.canonical_link

    @property
    def eta_interval(self) -> tuple[float, float] | None:
        """A representative interval ``(lo, hi)`` of eta whose means lie inside this
        family's mean domain, away from its boundary: the family's own entry in
        :attr:`link_eta_intervals`, else the link's ``eta_interval``. Simulated data
        (:func:`torchglm.data.simulate.simulate_glm`) and the tests' eta grids use it."""
        return self.link_eta_intervals.get(self.link.name, self.link.eta_interval)

    def mle_dispersion(self, pearson: float, nobs: float) -> float | None:
        """The maximum-likelihood dispersion from the Pearson sum, where it has that
        closed form (``RSS / n`` for the Gaussian, every link); ``None`` otherwise."""
        return None

    @property
    def least_squares(self) -> bool:
        """True when the NLL is least squares in the mean of a linear predictor
        (Gaussian, identity link): the fit is solved directly by QR
        (:mod:`torchglm.solvers.least_squares`), and the log-likelihood's dispersion
        can be concentrated out, ``phi^ = RSS / n`` (statsmodels' ``llf`` convention)."""
        return False

    def n_outputs(self, n_classes: int | None = None) -> int:
        """Number of columns of eta."""
        return 1

    def mean(self, eta: torch.Tensor) -> torch.Tensor:
        """``mu = g^{-1}(eta)``."""
        return self.link.inverse(eta)

    # -- likelihood ---------------------------------------------------------
    def nll(self, eta: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample negative log-likelihood ``-log p(y_i | eta_i)`` at ``phi = 1``.

        Args:
            eta: linear predictor, shape (n,) ((n, K) for the categorical family).
            y: targets as returned by :meth:`check_target`, shape (n,).

        Returns:
            Shape (n,); ``+inf`` where ``eta`` puts the mean outside the family's
            domain (e.g. ``mu <= 0`` for a Poisson with the identity link).
        """
        value = self._nll(eta, y)
        if self._masked:
            value = torch.where(self.valid_eta(eta), value, torch.full_like(value, math.inf))
        return value

    def _nll(self, eta: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def nll_y_term(self, y: torch.Tensor) -> torch.Tensor | None:
        """The terms of the per-sample NLL's closed forms that depend on the target alone
        (a normalizing constant, such as a Poisson's ``lgamma(y + 1)``; the Bernoulli's
        float targets and ``1 - y``) where this family's :meth:`nll_derivatives` takes
        them back as ``y_term`` (a tensor or a tuple of tensors): a fit evaluates them once
        per batch and passes them every pass after
        (:class:`~torchglm.solvers.pass_sums.PassSums`). ``None``: no such terms (the
        default).

        Args:
            y: targets as :meth:`check_target` returns them, in eta's dtype.
        """
        return None

    def nll_derivatives(self, eta: torch.Tensor, y: torch.Tensor, order: int):
        """Closed-form ``(nll, d1)`` (``order=1``) or ``(nll, d1, d2)`` (``order=2``),
        the per-sample NLL and its observed derivatives with respect to eta, or
        ``None`` where the family and link have none: then
        :func:`torchglm.solvers.eta_derivatives.eta_derivatives` differentiates
        :meth:`nll` with :mod:`torch.func`. Closed forms cost one elementwise pass.

        A canonical link (``eta = theta``) gives ``dl/deta = mu - y`` and
        ``d2l/deta2 = V(mu) = dmu/deta`` (McCullagh & Nelder §2.2.2; Bishop PRML §4.3.6);
        used where the link needs no domain mask."""
        if self.multi_output or self._masked or not self.is_canonical:
            return None
        y = y.to(eta.dtype)
        nll, d1 = self.nll(eta, y), self.mean(eta) - y
        return (nll, d1) if order == 1 else (nll, d1, self.link.inverse_derivative(eta))

    def nll_gradient_and_mean(self, eta: torch.Tensor, y: torch.Tensor):
        """Closed-form ``(nll, d1, mu)`` from one evaluation: the per-sample NLL, its
        derivative with respect to eta and the mean (a Hessian-vector product's
        curvature of the canonical softmax, ``diag(mu) - mu mu^T``), or ``None``
        where the family has none (the caller then evaluates :meth:`mean` itself)."""
        return None

    def valid_eta(self, eta: torch.Tensor) -> torch.Tensor:
        """Boolean mask of the eta values whose mean lies in the family's domain."""
        return self._valid_mean(self.mean(eta))

    def strictly_separated(self, eta_dir: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
        """Per sample, whether its NLL falls strictly along a direction of the coefficients
        whose linear predictor (bias included, offset not) is ``eta_dir``: shape (n,), or
        ``None`` where the family proves no separation this way.

        When it holds for every sample of positive weight, ``E(theta + t d)`` falls
        strictly in ``t`` from every ``theta``, so no minimizer exists: complete
        separation (Albert & Anderson, Biometrika 1984), proven by ``d`` itself.
        """
        return None

    def interior_mean(self, mu: torch.Tensor) -> torch.Tensor:
        """Whether ``mu`` lies inside the open mean space (a probability in ``(0, 1)``,
        a count's mean ``> 0``). The intercept-only MLE is ``mu = ybar``: where the
        weighted mean target is on the boundary, every target is (all counts 0, all
        proportions 0 or all 1), and no finite estimate exists for any model with an
        intercept (McCullagh & Nelder §4.4.1: ``ybar`` is the intercept-only fit)."""
        return self._valid_mean(mu)

    def _valid_mean(self, mu: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(mu)

    def log_likelihood(
        self,
        eta: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        scale: float | torch.Tensor = 1.0,
    ) -> torch.Tensor:
        """Total log-likelihood ``sum_i s_i log p(y_i | eta_i, phi)`` (a 0-d tensor).

        Args:
            eta: linear predictor, shape (n,).
            y: checked targets, shape (n,).
            weight: frequency weights (trials, for the binomial), shape (n,).
            scale: the dispersion ``phi``; only families with a dispersion use it.
        """
        nll = self.nll(eta, y)
        return -(nll.sum() if weight is None else (weight * nll).sum())

    def saturated_nll(self, y: torch.Tensor) -> torch.Tensor:
        """Per-sample NLL of the saturated model (``mu_i = y_i``) at ``phi = 1``."""
        raise NotImplementedError(f"family '{self.name}' defines no saturated model")

    def unit_deviance(self, y: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
        """Per-sample deviance ``d(y, mu) = 2 phi (log p(y|y) - log p(y|mu))``, shape (n,).

        The deviance of a fit is ``sum_i s_i d(y_i, mu_i)``.
        """
        raise NotImplementedError(f"family '{self.name}' defines no deviance")

    def variance(self, mu: torch.Tensor) -> torch.Tensor:
        """Variance function ``V(mu)``: ``Var[y] = phi V(mu)``."""
        raise NotImplementedError(f"family '{self.name}' defines no variance function")

    def pearson_chi2(
        self, y: torch.Tensor, mu: torch.Tensor, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Pearson's statistic ``X^2 = sum_i s_i (y_i - mu_i)^2 / V(mu_i)``."""
        r = (y - mu) ** 2 / self.variance(mu)
        return r.sum() if weight is None else (weight * r).sum()

    def dispersion(
        self,
        y: torch.Tensor,
        mu: torch.Tensor,
        weight: torch.Tensor | None,
        df_resid: float,
    ) -> torch.Tensor:
        """Dispersion estimate ``phi = X^2 / (n - p)`` (statsmodels' default); 1 for
        families without a dispersion parameter."""
        if not self.has_dispersion:
            return torch.ones((), dtype=mu.dtype, device=mu.device)
        return self.pearson_chi2(y, mu, weight) / df_resid

    # -- targets and prediction -----------------------------------------------
    def check_target(self, y: torch.Tensor, n_classes: int | None = None) -> torch.Tensor:
        """Validate targets; return them in the dtype ``nll`` expects.

        Raises:
            InputError: if ``y`` is not 1-D or leaves the family's support.
        """
        raise NotImplementedError

    def predict(self, eta: torch.Tensor) -> torch.Tensor:
        """Point prediction: the label for classifiers, the mean otherwise."""
        return self.mean(eta)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(link={self.link.name!r})"


def _check_labels(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    if y.dim() != 1:
        raise fail("y", "a 1-D tensor of class labels", f"shape {tuple(y.shape)}")
    if y.is_floating_point():
        check_finite("y", y)
        if not bool((y == torch.round(y)).all()):
            raise fail("y", "integer class labels", "non-integer values")
    yl = y.long()
    if yl.numel() and (int(yl.min()) < 0 or int(yl.max()) >= n_classes):
        bad = yl[(yl < 0) | (yl >= n_classes)]
        raise fail("y", f"labels in {{0, ..., {n_classes - 1}}}", f"label {int(bad[0])}")
    return yl


def _check_real(y: torch.Tensor, support: str, ok=None) -> torch.Tensor:
    """A 1-D finite real target, optionally restricted by the mask ``ok(y)``."""
    if not isinstance(y, torch.Tensor):
        raise fail("y", "a torch.Tensor", type(y).__name__)
    if y.dim() != 1:
        raise fail("y", "a 1-D tensor of targets", f"shape {tuple(y.shape)}")
    if not y.is_floating_point():
        y = y.to(torch.get_default_dtype())
    check_finite("y", y)
    if ok is not None:
        bad = ~ok(y)
        if bool(bad.any()):
            first = int(bad.nonzero()[0, 0])
            raise fail(
                "y", support, f"{int(bad.sum())} values outside it, first y[{first}] = {float(y[first])}"
            )
    return y


@register
class Gaussian(Family):
    """``y in R``, ``p(y|x) = N(y; mu, phi)`` (linear regression, the lecture notes, §6).

    Canonical link: identity (``theta = mu / sigma^2``); also log and inverse
    (``mu = 1 / eta``, any real mean: only ``eta = 0`` is outside), as R's
    ``gaussian()`` and statsmodels allow. ``V(mu) = 1``,
    ``d(y, mu) = (y - mu)^2``, and the NLL at ``phi = 1`` is
    ``(y - mu)^2 / 2 + log(2 pi) / 2``, so the mean-NLL fit is least squares.
    """

    name = "gaussian"
    canonical_link = "identity"
    allowed_links = ("identity", "log", "inverse")
    has_dispersion = True
    _closed_links = ("identity", "log")
    has_saturated_model = True

    def mle_dispersion(self, pearson, nobs):
        return pearson / nobs  # V(mu) = 1: the Pearson sum is the RSS

    def _nll(self, eta, y):
        r = y - self.mean(eta)
        return 0.5 * r * r + 0.5 * _LOG_2PI

    def log_likelihood(self, eta, y, weight=None, scale=1.0):
        scale = torch.as_tensor(scale, dtype=eta.dtype, device=eta.device)
        r = y - self.mean(eta)
        ll = -0.5 * r * r / scale - 0.5 * (_LOG_2PI + torch.log(scale))
        return ll.sum() if weight is None else (weight * ll).sum()

    @property
    def least_squares(self) -> bool:
        return self.is_canonical  # the identity link

    def saturated_nll(self, y):
        return torch.full_like(y, 0.5 * _LOG_2PI)

    def unit_deviance(self, y, mu):
        return (y - mu) ** 2

    def variance(self, mu):
        return torch.ones_like(mu)

    def check_target(self, y, n_classes=None):
        return _check_real(y, "real targets")


class _Binary(Family):
    """Shared likelihood of the Bernoulli and binomial families (per trial).

    ``nll = -(y log mu + (1 - y) log(1 - mu))`` on the eta scale from the link's
    ``log_inverse``/``log1m_inverse`` (``binary_cross_entropy_with_logits`` for
    the logit, ``log_ndtr`` for the probit). ``V(mu) = mu (1 - mu)``.
    """

    _closed_links = ("logit", "probit", "cloglog", "cauchit")
    #: mu = e^eta is a probability only below eta = 0.
    link_eta_intervals = {"log": (-2.0, -1.0)}
    has_saturated_model = True
    separable = True  # y = 0 or 1 (a proportion of 0 or 1) is mu's boundary

    def _nll(self, eta, y):
        y = y.to(eta.dtype)
        if self.link.eta_is_log_odds:
            return F.binary_cross_entropy_with_logits(eta, y, reduction="none")
        # 0 * log 0 = 0 (as in xlogy): a term whose factor is 0 is dropped, and its
        # log is evaluated at eta = 0 so that neither the value nor the gradient
        # sees 0 * inf (cloglog with y = 1 at eta > 709: log(1 - mu) = -e^eta = -inf).
        zero = torch.zeros_like(eta)
        has1, has0 = y > 0, y < 1
        t1 = torch.where(has1, y * self.link.log_inverse(torch.where(has1, eta, zero)), zero)
        t0 = torch.where(has0, (1 - y) * self.link.log1m_inverse(torch.where(has0, eta, zero)), zero)
        return -(t1 + t0)

    def nll_y_term(self, y):
        # The targets in eta's dtype and the factor the closed forms below take from them:
        # 1 - y (logit), the sign q = 2y - 1 (a symmetric link's one tail). A fit keeps
        # them: an integer target's cast and the factor were two of a small pass's ~100
        # operations.
        if self.is_canonical:
            return y, 1 - y
        if self.is_classifier and self.link.symmetric:
            return y, y * 2.0 - 1.0
        return None

    def nll_derivatives(self, eta, y, order, y_term=None):
        # l = -(y log mu + (1 - y) log(1 - mu)) from the link's log mu, log(1 - mu);
        # ``y_term``: :meth:`nll_y_term`'s targets and factor, when the caller kept them.
        y, factor = (y.to(eta.dtype), None) if y_term is None else y_term
        if self.is_canonical:
            # Logit: dl/deta = mu - y = (1 - y) mu - y (1 - mu), d2l/deta2 = mu (1 - mu),
            # all from the logs (mu - 1 would round to 0 once mu is within eps of 1).
            # (Fused multiply-adds: exact for 0/1 targets, whose products are 0 or a0, b0.)
            ny = 1 - y if factor is None else factor
            a0, b0 = self.link.log_inverse(eta), self.link.log1m_inverse(eta)
            nll = torch.addcmul(y * a0, ny, b0).neg_()
            d1 = torch.addcmul(ny * a0.exp(), y, b0.exp(), value=-1)
            return (nll, d1) if order == 1 else (nll, d1, (a0 + b0).exp())
        if self.is_classifier and self.link.symmetric:
            # y in {0, 1} and F(-t) = 1 - F(t): l = -log F(q eta) with q = 2y - 1, so
            # dl/deta = -q (log F)'(q eta), d2l/deta2 = -(log F)''(q eta): one tail per
            # sample (a probit's erfc, exp and logs once, not for both tails).
            q = y * 2.0 - 1.0 if factor is None else factor
            parts = self.link.log_inverse_derivatives(q * eta, order)
            if parts is not None:
                out = (parts[0].neg(), torch.mul(parts[1], q).neg_())
                return out if order == 1 else (*out, parts[2].neg())
        # Other links: their closed-form derivatives of log mu and log(1 - mu), where
        # finite for every eta (probit).
        parts = self.link.log_mean_derivatives(eta, order)
        if parts is None:
            return None
        out = [-(y * a + (1 - y) * b) for a, b in zip(parts[::2], parts[1::2])]
        return tuple(out)

    def _valid_mean(self, mu):
        # mu = 0 only by underflow (e^eta at eta = -1e4 for the log link): the NLL
        # -y eta stays finite there, so it is inside the domain.
        return (mu >= 0) & (mu < 1)

    def interior_mean(self, mu):
        return (mu > 0) & (mu < 1)

    def strictly_separated(self, eta_dir, y):
        # mu = F(eta) with F an increasing map of the whole line onto (0, 1) (the closed
        # links): -log F(eta) falls as eta rises for y = 1, -log(1 - F(eta)) as it falls
        # for y = 0; a proportion strictly between 0 and 1 has a finite best eta.
        if self.link.name not in self._closed_links:
            return None
        return torch.where(y == 1, eta_dir > 0, (y == 0) & (eta_dir < 0))

    def saturated_nll(self, y):
        return -(torch.xlogy(y, y) + torch.xlogy(1 - y, 1 - y))

    def unit_deviance(self, y, mu):
        # xlogy(y, y) - xlogy(y, mu), not xlogy(y, y / mu): 0/0 at y = mu = 0 (or 1)
        # would give NaN where the deviance is 0.
        return 2 * (
            torch.xlogy(y, y) - torch.xlogy(y, mu) + torch.xlogy(1 - y, 1 - y) - torch.xlogy(1 - y, 1 - mu)
        )

    def variance(self, mu):
        return mu * (1 - mu)


@register
class Bernoulli(_Binary):
    """``y in {0, 1}``, ``p(y|x) = mu^y (1 - mu)^{1-y}`` (the lecture notes, §6 and §11).

    Canonical link: logit (``theta = log(pi / (1 - pi))``); also probit,
    cloglog, cauchit and log (``eta < 0``), R's ``binomial()`` links.
    """

    name = "bernoulli"
    canonical_link = "logit"
    allowed_links = ("logit", "probit", "cloglog", "log", "cauchit")
    is_classifier = True

    def check_target(self, y, n_classes=None):
        return _check_labels(y, 2)

    def predict(self, eta):
        # mu > 1/2  <=>  eta > g(1/2), and g(1/2) = 0 for every symmetric link;
        # comparing mu keeps cloglog (g(1/2) != 0) right too.
        return (self.mean(eta) > 0.5).long()


@register
class Binomial(_Binary):
    """Proportions of successes out of ``n_i`` trials: ``n_i y_i ~ Bin(n_i, mu_i)``.

    Targets are the proportions ``y_i = k_i / n_i`` in [0, 1] and the sample
    weights are the numbers of trials ``n_i`` (:meth:`from_counts` converts
    ``(successes, trials)``). The weighted NLL ``sum_i n_i nll(eta_i, y_i)`` is
    then the binomial NLL up to the binomial coefficients, which do not depend on
    the coefficients; :meth:`log_likelihood` adds them back
    (``log C(n_i, k_i)``), so log-likelihood and AIC match statsmodels'
    ``GLM(np.column_stack([k, n - k]), X, family=Binomial())``. Without weights
    every row is one trial (a Bernoulli with fractional targets allowed). A
    weight here counts trials, not duplicated rows: BIC and ``df_resid`` count
    rows.

    Canonical link: logit; also probit, cloglog, cauchit and log (the log link keeps
    ``mu = e^eta < 1`` only for ``eta < 0``: outside, the NLL is ``+inf``).
    """

    name = "binomial"
    canonical_link = "logit"
    allowed_links = ("logit", "probit", "cloglog", "log", "cauchit")
    weight_is_trials = True

    @staticmethod
    def from_counts(successes: torch.Tensor, trials: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(successes, trials) -> (y, weight) = (successes / trials, trials)``.

        Raises:
            InputError: if a count is negative, exceeds its trials, or trials is 0.
        """
        successes = torch.as_tensor(successes, dtype=torch.get_default_dtype())
        trials = torch.as_tensor(trials, dtype=successes.dtype)
        if bool((trials <= 0).any()):
            raise fail("trials", "positive numbers of trials", f"min {float(trials.min())}")
        if bool(((successes < 0) | (successes > trials)).any()):
            raise fail("successes", "counts in [0, trials]", "a count outside it")
        return successes / trials, trials

    def log_likelihood(self, eta, y, weight=None, scale=1.0):
        if weight is None:
            return super().log_likelihood(eta, y)
        k = y * weight
        log_binom = torch.lgamma(weight + 1) - torch.lgamma(k + 1) - torch.lgamma(weight - k + 1)
        return log_binom.sum() - (weight * self.nll(eta, y)).sum()

    def check_target(self, y, n_classes=None):
        return _check_real(y, "proportions in [0, 1]", lambda t: (t >= 0) & (t <= 1))


@register
class Categorical(Family):
    """``y in {0..K-1}``, ``p(C_k|x) = softmax(eta)_k`` (the lecture notes, §6 and §10).

    ``nll = -log softmax(eta)_y`` via ``cross_entropy`` (a ``log_softmax``); the
    saturated model puts probability 1 on the observed class, so the unit
    deviance is ``-2 log mu_y``.
    """

    name = "categorical"
    canonical_link = "softmax"
    allowed_links = ("softmax",)
    is_classifier = True
    multi_output = True
    _closed_links = ("softmax",)
    has_saturated_model = True
    separable = True  # mu_y -> 1 (every other class's probability -> 0)

    def n_outputs(self, n_classes=None):
        if n_classes is None or n_classes < 2:
            raise fail("n_classes", "an integer >= 2 for the categorical family", n_classes)
        return n_classes

    def _nll(self, eta, y):
        return F.cross_entropy(eta, y, reduction="none")

    def nll_derivatives(self, eta, y, order):
        # Canonical softmax: dl/deta = mu - onehot(y), d2l/deta2 = diag(mu) - mu mu^T.
        if not self.is_canonical:
            return None
        # One set of exponentials for the NLL and mu (:func:`~.links.softmax_nll`); mu
        # is then updated in place to mu - onehot(y) (an n x K pass's fewer copies).
        nll, mu = softmax_nll(eta, y)
        d2 = None if order == 1 else torch.diag_embed(mu) - mu.unsqueeze(-1) * mu.unsqueeze(-2)
        d1 = mu.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(nll, -1.0).unsqueeze(-1))
        return (nll, d1) if order == 1 else (nll, d1, d2)

    def nll_gradient_and_mean(self, eta, y):
        # mu kept beside mu - onehot(y): a copy of n x K is far cheaper than a second
        # softmax (and mu is exact, not recovered as (mu_y - 1) + 1).
        if not self.is_canonical:
            return None
        nll, mu = softmax_nll(eta, y)
        d1 = mu.scatter_add(-1, y.unsqueeze(-1), torch.full_like(nll, -1.0).unsqueeze(-1))
        return nll, d1, mu

    def strictly_separated(self, eta_dir, y):
        # -log softmax(eta)_y falls along d where d's eta of the observed class exceeds
        # every other class's (each term log(1 + sum_k e^{eta_k - eta_y}) shrinks).
        yi = y.long().unsqueeze(-1)
        own = eta_dir.gather(-1, yi).squeeze(-1)
        others = eta_dir.scatter(-1, yi, float("-inf")).amax(-1)
        return own > others

    def saturated_nll(self, y):
        return torch.zeros(y.shape, dtype=torch.get_default_dtype(), device=y.device)

    def unit_deviance(self, y, mu):
        return -2 * torch.log(mu.gather(-1, y.long().unsqueeze(-1)).squeeze(-1))

    def check_target(self, y, n_classes=None):
        return _check_labels(y, n_classes)

    def predict(self, eta):
        return eta.argmax(dim=-1)


@register
class Poisson(Family):
    """Counts ``y in {0, 1, ...}``, ``p(y|x) = lambda^y e^{-lambda} / y!`` (the lecture notes, §6).

    Canonical link: log (``theta = log lambda``); also identity (``mu = eta``,
    which needs ``eta > 0``; outside, the NLL is ``+inf``) and sqrt (``mu = eta^2``,
    ``eta != 0``). ``V(mu) = mu``,
    ``nll = mu - y log mu + lgamma(y + 1)``,
    ``d(y, mu) = 2 (y log(y / mu) - (y - mu))``. Non-integer non-negative
    targets (rates) are accepted, as in scikit-learn and statsmodels: the NLL is
    then the continuous extension through ``lgamma``. Exposure enters as
    ``offset = log(exposure)`` with the log link.
    """

    name = "poisson"
    canonical_link = "log"
    allowed_links = ("log", "identity", "sqrt")
    _closed_links = ("log",)
    #: Counts' means well above 0, so that the fitted identity-link means stay positive.
    link_eta_intervals = {"identity": (1.5, 4.5)}
    has_saturated_model = True
    separable = True  # y = 0 is mu's boundary: nll = mu there, infimum 0 at mu -> 0

    def _nll(self, eta, y):
        return self.mean(eta) - y * self.link.log_inverse(eta) + torch.lgamma(y + 1)

    def nll_y_term(self, y):
        # lgamma(y + 1), a per-sample constant: 15-20% of a float32 pass (500,000 x 30).
        return _log_factorial(y) if self.is_canonical else None

    def nll_derivatives(self, eta, y, order, y_term=None):
        # Log link: mu = e^eta once for the NLL, dl/deta = mu - y and d2l/deta2 = mu
        # (the generic canonical form evaluates e^eta three times); ``y_term``:
        # :meth:`nll_y_term`'s lgamma(y + 1), when the caller kept it.
        if not self.is_canonical:
            return super().nll_derivatives(eta, y, order)
        y = y.to(eta.dtype)
        mu = torch.exp(eta)
        nll = mu - y * eta + (torch.lgamma(y + 1) if y_term is None else y_term)
        return (nll, mu - y) if order == 1 else (nll, mu - y, mu)

    def _valid_mean(self, mu):
        return mu > 0

    def saturated_nll(self, y):
        return y - torch.xlogy(y, y) + torch.lgamma(y + 1)

    def unit_deviance(self, y, mu):
        return 2 * (torch.xlogy(y, y) - torch.xlogy(y, mu) - (y - mu))

    def variance(self, mu):
        return mu

    def check_target(self, y, n_classes=None):
        return _check_real(y, "non-negative counts", lambda t: t >= 0)


@register
class Gamma(Family):
    """Positive ``y``, ``p(y|x) = Gamma(shape nu = 1/phi, mean mu)``.

    ``log p = nu log(nu y / mu) - nu y / mu - log y - lgamma(nu)``, ``V(mu) = mu^2``,
    ``d(y, mu) = 2 ((y - mu) / mu - log(y / mu))``. Canonical link: inverse in
    statsmodels' convention ``mu = 1 / eta`` (``eta > 0``); also log and
    identity. At ``phi = 1`` the NLL is ``log mu + y / mu``, the exponential's.
    """

    name = "gamma"
    canonical_link = "inverse"
    allowed_links = ("inverse", "log", "identity")
    has_dispersion = True
    _closed_links = ("log",)
    #: Means away from 0, where V(mu) = mu^2 vanishes.
    link_eta_intervals = {"identity": (1.0, 3.0)}
    has_saturated_model = True

    def _nll(self, eta, y):
        return self.link.log_inverse(eta) + y * self.link.reciprocal_inverse(eta)

    def _valid_mean(self, mu):
        return (mu > 0) & torch.isfinite(mu)

    def log_likelihood(self, eta, y, weight=None, scale=1.0):
        nu = 1.0 / torch.as_tensor(scale, dtype=eta.dtype, device=eta.device)
        y_mu = y * self.link.reciprocal_inverse(eta)
        ll = nu * torch.log(nu * y_mu) - nu * y_mu - torch.log(y) - torch.lgamma(nu)
        if self._masked:
            ll = torch.where(self.valid_eta(eta), ll, torch.full_like(ll, -math.inf))
        return ll.sum() if weight is None else (weight * ll).sum()

    def saturated_nll(self, y):
        return torch.log(y) + 1

    def unit_deviance(self, y, mu):
        return 2 * ((y - mu) / mu - torch.log(y / mu))

    def variance(self, mu):
        return mu * mu

    def check_target(self, y, n_classes=None):
        return _check_real(y, "positive targets", lambda t: t > 0)


@register
class Exponential(Gamma):
    """Positive ``y``, ``p(y|x) = lambda e^{-lambda y}``, mean ``mu = 1 / lambda`` (the lecture notes, §6).

    The Gamma with shape 1 (``phi = 1`` fixed). Canonical link: the notes'
    ``theta = -lambda``, i.e. ``mu = -1 / eta`` (``negative_reciprocal``,
    ``eta < 0``); also the inverse link ``mu = 1 / eta`` (statsmodels' Gamma
    convention: the same model with ``eta -> -eta``), log and identity (``eta > 0``),
    the links R's ``Gamma()`` allows.
    ``nll = log mu + y / mu = -log lambda + lambda y``.
    """

    name = "exponential"
    canonical_link = "negative_reciprocal"
    allowed_links = ("negative_reciprocal", "inverse", "log", "identity")
    has_dispersion = False

    def log_likelihood(self, eta, y, weight=None, scale=1.0):
        return Family.log_likelihood(self, eta, y, weight)


def get_family(family: str | Family, link: str | Link | None = None) -> Family:
    """Return a family instance from a name in :data:`FAMILIES` or an instance."""
    if isinstance(family, Family):
        if link is not None and get_link(link) != family.link:
            raise fail("link", f"the family's own link {family.link.name!r}", repr(link))
        return family
    if isinstance(family, str) and family in FAMILIES:
        return FAMILIES[family](link)
    raise fail("family", f"one of {sorted(FAMILIES)}", repr(family))


#: Counts up to this many take :func:`_log_factorial` from a table.
_LOG_FACTORIAL_TABLE_MAX = 1 << 16


def _log_factorial(y: torch.Tensor) -> torch.Tensor:
    """``lgamma(y + 1)``, elementwise. Counts (integer values in ``[0, 2^16]``) read it
    from a table of ``lgamma(k + 1)`` in ``y``'s dtype, the same numbers: torch's
    ``lgamma`` is scalar code (17.5 ns an element in float64), and a float64 polish
    takes the term of each batch anew for its one or two passes (8.8 of its 28 ms on
    500,000 counts, one thread). Other values (rates), or a tensor whose values cannot
    be read at no cost (:func:`~torchglm._validation.host_readable`), take ``lgamma``."""
    if y.numel() == 0 or not y.is_floating_point() or not host_readable(y):
        return torch.lgamma(y + 1)
    lo, hi = torch.aminmax(y)
    if not 0 <= float(lo) <= float(hi) <= _LOG_FACTORIAL_TABLE_MAX:
        return torch.lgamma(y + 1)
    k = y.int()  # truncated; y - k >= 0, so its sum is 0 only for integers
    if float(y.sub(k).sum()) != 0:
        return torch.lgamma(y + 1)
    return torch.lgamma(torch.arange(1, int(hi) + 2, dtype=y.dtype)).index_select(0, k)
