"""The start rule of the pass-based solvers.

A fit starts from the model's parameters. From the all-zero start (the model's
initialization) of a single-output model with an intercept, the first pass reads
only the targets and weights (not the features), and the fit starts from the
intercept-only model ``b = g(ybar)`` instead (as R's ``glm`` and statsmodels do):
from 0, counts of 1e15 need steps of exp(35) that no line search can take. A start
outside the link's domain is restarted once from the intercept-only fit, and where
that fails too, once from the data (one IRLS step from ``mu0`` given by the
targets, :class:`DataStart`; McCullagh & Nelder §2.5).
"""

from __future__ import annotations

import torch

from ..passes import LinearModel, all_reduce_sum
from .pass_sums import PassSums

__all__ = ["StartRule", "DataStart", "starting_mu", "intercept_only"]

#: The message of a start with no finite loss, gradient or curvature (not a domain problem).
NO_USABLE_START = (
    "the starting point gives eta outside the link's domain, or a loss or derivatives "
    "that are not finite in this dtype (rescale the features)"
)


def intercept_only(model: LinearModel, s: PassSums, like: torch.Tensor) -> torch.Tensor:
    """``W = 0``, ``b = g(ybar)`` with the pass's weighted mean target (shaped like
    ``like``, the flat parameters)."""
    theta = torch.zeros_like(like)
    theta[-1] = model.family.link.link((s.y_sum / s.weight_sum).reshape(1))[0]
    return theta


class StartRule:
    """Where a fit starts, and where it restarts from a start outside the domain.

    Attributes:
        pending: the next pass is the start pass, which reads only the targets (a
            single-output model with an intercept, from the all-zero start).
        restarted: the intercept-only restart was taken.
        data: the data-based start whose pass runs next (``None``: none pending).
        data_tried: the data-based start was tried (it is tried once).
    """

    #: :meth:`restart`'s answers that start from somewhere else.
    INTERCEPT, DATA = "intercept-only", "data"

    def __init__(self, model: LinearModel, theta: torch.Tensor) -> None:
        self.model = model
        self.pending = model.has_intercept and not model.family.multi_output and not bool(theta.any())
        self.restarted = False
        self.data: DataStart | None = None
        self.data_tried = False

    def resume(self, theta: torch.Tensor) -> None:
        """A resumed fit's point replaces the start: the start pass only from zero."""
        self.pending = self.pending and not bool(theta.any())

    def intercept_start(self, s: PassSums, like: torch.Tensor) -> torch.Tensor | None:
        """The intercept-only fit ``b = g(ybar)`` (weighted mean target) as the start,
        or ``None``: with offsets, or where ``g(ybar)`` is not finite or not in the
        link's domain (e.g. a single class)."""
        if s.n_offset or not float(s.weight_sum) > 0:
            return None
        theta = intercept_only(self.model, s, like)
        b = theta[-1:]
        if not bool(torch.isfinite(b).all()) or not bool(self.model.family.valid_eta(b).all()):
            return None
        return theta

    def restart(self, s: PassSums) -> str:
        """The start (evaluated by ``s``) is outside the link's domain: restart from the
        intercept-only fit (:attr:`INTERCEPT`, once); where there is no intercept, or
        that start is outside the domain too, from the data (:attr:`DATA`, once,
        where the start has no likelihood: not for finite sums that overflowed, which
        no other start cures; :meth:`begin_data_start`); else the message of the
        failure."""
        model = self.model
        if model.family.multi_output:
            return NO_USABLE_START
        if not self.restarted and model.has_intercept:
            self.restarted = True
            return self.INTERCEPT
        if not self.data_tried and s.no_likelihood and float(s.weight_sum) > 0:
            return self.DATA  # a domain problem (not an overflow): start from the data
        if self.data_tried:
            return self.no_valid_start()
        return NO_USABLE_START

    def begin_data_start(self, s: PassSums, dtype: torch.dtype, device) -> None:
        """Start from the data, as R's ``glm`` and statsmodels do: the next pass sums one
        weighted least-squares problem of IRLS at ``mu0`` from the targets
        (:class:`DataStart`), whose solution is the start. Only where the given (zero)
        start and the intercept-only one are outside the link's domain: it costs a pass
        over the features."""
        self.data_tried = True
        ybar = s.y_sum / s.weight_sum
        self.data = DataStart(self.model, float(ybar), dtype, device)

    def no_valid_start(self) -> str:
        """The message of a fit that found no start in the link's domain."""
        model = self.model
        return (
            f"no starting point in the domain of the '{model.family.link.name}' link of the "
            f"'{model.family.name}' family: the start"
            + (", the intercept-only fit" if model.has_intercept else "")
            + " and the weighted least-squares start from the data (mu0 from y) give a mean "
            "outside the family's range (or a loss that is not finite) for some rows; give "
            "starting parameters (set the model's coefficients) whose means are all valid"
        )


def starting_mu(family, y: torch.Tensor, weight: torch.Tensor | None, ybar: float) -> torch.Tensor:
    """The first mean of IRLS, from the targets (R's ``family()$initialize``,
    statsmodels' ``Family.starting_mu``): ``(w y + 1/2) / (w + 1)`` for a proportion of
    ``w`` trials (inside ``(0, 1)``), ``(y + ybar) / 2`` otherwise (inside the range of a
    count or positive target where ``ybar`` is)."""
    if family.name in ("bernoulli", "binomial"):
        w = torch.ones_like(y) if weight is None or family.name == "bernoulli" else weight
        return (w * y + 0.5) / (w + 1)
    return (y + ybar) / 2


class DataStart:
    """One IRLS step from the data (McCullagh & Nelder §2.5; R's ``glm.fit``): with
    ``mu0`` from :func:`starting_mu`, ``eta0 = g(mu0)``, the working response
    ``z = eta0 + (y - mu0) g'(mu0)`` and weights ``w = s (dmu/deta)^2 / V(mu0)``, the
    start solves ``(X~^T W X~) theta = X~^T W (z - o)`` (one pass summing both; the
    columns equilibrated, minimum-norm on a singular system). Rows whose ``mu0`` has
    no finite ``eta0`` get weight 0."""

    def __init__(self, model, ybar: float, dtype: torch.dtype, device) -> None:
        self.model, self.ybar, self.dtype = model, ybar, dtype
        q = model.n_features + model.has_intercept
        self.H = torch.zeros(q, q, dtype=dtype, device=device)
        self.r = torch.zeros(q, dtype=dtype, device=device)

    def add(self, batch) -> None:
        family, link = self.model.family, self.model.family.link
        x = batch.x.to(self.dtype)
        if x.layout != torch.strided:
            x = x.to_dense()
        x = x.to(self.H.device)
        y = batch.y.to(self.dtype).to(self.H.device)
        s = None if batch.weight is None else batch.weight.to(self.dtype).to(self.H.device)
        mu0 = starting_mu(family, y, s, self.ybar)
        eta0 = link.link(mu0)
        d = link.inverse_derivative(eta0)  # dmu/deta
        w = d * d / family.variance(mu0)
        if s is not None:
            w = w * s
        z = eta0 + (y - mu0) / d
        if batch.offset is not None:
            z = z - batch.offset.to(self.dtype).to(self.H.device)
        ok = torch.isfinite(z) & torch.isfinite(w) & (w > 0)
        w, z = torch.where(ok, w, torch.zeros_like(w)), torch.where(ok, z, torch.zeros_like(z))
        if self.model.has_intercept:
            x = torch.cat([x, torch.ones_like(y).unsqueeze(-1)], 1)
        wx = x * w.unsqueeze(-1)
        self.H += x.T @ wx
        self.r += wx.T @ z

    def solve(self) -> torch.Tensor | None:
        """The start ``theta`` (flat ``[W, b]``), ``None`` where it is not finite."""
        all_reduce_sum(self.H, self.r)
        c = self.H.diagonal().clamp_min(0).sqrt()
        c = torch.where(c > 0, c, torch.ones_like(c))
        theta = torch.linalg.pinv(self.H / torch.outer(c, c), hermitian=True) @ (self.r / c) / c
        return theta if bool(torch.isfinite(theta).all()) else None
