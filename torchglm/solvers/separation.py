"""The separation watch of the pass-based solvers.

Unpenalized fits of families whose targets can sit on the boundary of the mean
space (``Family.separable``: a probability 0 or 1, a count's mean 0) may have no
maximum-likelihood estimate: the likelihood keeps rising as the coefficients run
off along a separating direction (Albert & Anderson, "On the existence of maximum
likelihood estimates in logistic regression models", Biometrika 1984). For a
finite optimum Newton's steps shrink quadratically; along a separating direction
they keep their length and direction while samples' fitted means sit numerically
on the boundary. :class:`SeparationWatch` counts such steps; :func:`separation_report`
and :func:`boundary_report` say which coefficients diverge.
"""

from __future__ import annotations

import torch

from ..passes import LinearModel
from .layout import parameter_names
from .pass_sums import PassSums

__all__ = ["SeparationWatch", "separation_report", "boundary_report"]

#: Full Newton steps in a row that keep their length and direction, with samples on
#: the boundary, that make a separation.
SEPARATION_STEPS = 3


class SeparationWatch:
    """Full Newton steps that keep the same direction and do not shrink, with
    samples whose fitted mean is numerically on the boundary.

    Args:
        enabled: whether the fit is watched (unpenalized, ``Family.separable``).

    Attributes:
        prev_delta: the last Newton-type direction watched (``None`` before one).
        streak: such steps in a row so far.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.prev_delta: torch.Tensor | None = None
        self.streak = 0

    def reset(self) -> None:
        """Forget the steps watched (a new phase of Newton-type steps begins)."""
        self.prev_delta = None
        self.streak = 0

    def at_boundary(self, s: PassSums) -> bool:
        """Samples whose fitted mean is numerically on the boundary where their target
        sits: a finite optimum, or separation."""
        return self.enabled and s.n_saturated > 0

    def watch(self, s: PassSums, delta: torch.Tensor, step: float, history: list[dict]) -> str | None:
        """Watch the Newton-type direction ``delta`` from the point of ``s``, reached by a
        step ``step``. Returns the kind of separation (``"perfect"`` or
        ``"quasi-complete"``) once :data:`SEPARATION_STEPS` steps in a row kept their
        length (``||delta|| >= ||delta_prev|| / 2``) and direction (cosine >= 0.9),
        else ``None``. ``history``: the fit's record per accepted point (``loss``)."""
        prev, self.prev_delta = self.prev_delta, delta
        if s.n_saturated == 0 or prev is None or step < 1.0:
            self.streak = 0
            return None
        dn, pn = float(delta.norm()), float(prev.norm())
        cos = float(delta @ prev) / max(dn * pn, 1e-300)
        self.streak = self.streak + 1 if (dn >= 0.5 * pn and cos >= 0.9) else 0
        if self.streak < SEPARATION_STEPS:
            return None
        # Perfect separation drives the whole loss to 0 (geometrically, along Newton
        # steps); quasi-complete separation leaves the loss of the overlapping samples.
        losses = [h["loss"] for h in history[-2:]]
        return "perfect" if losses[-1] < 0.9 * losses[0] else "quasi-complete"


def separation_report(model: LinearModel, s: PassSums, delta: torch.Tensor, kind: str) -> tuple[str, dict]:
    """The message and the record (``FitResult.extra.separation``) of a separation
    along ``delta``, naming the coefficients that diverge (the entries of the unit
    direction at least a tenth of its largest, largest first)."""
    direction = delta / max(float(delta.norm()), 1e-300)
    names = parameter_names(model)
    big = (direction.abs() >= 0.1 * direction.abs().max()).nonzero().flatten().tolist()
    big.sort(key=lambda i: -abs(float(direction[i])))
    coefs = {names[i]: round(float(direction[i]), 4) for i in big}
    info = {
        "kind": kind,
        "n_saturated": s.n_saturated,
        "n_samples": s.n_samples,
        "direction": direction.detach().cpu(),
        "coefficients": coefs,
    }
    where = (
        "probabilities numerically 0 or 1"
        if model.family.is_classifier
        else "means numerically on the boundary where their targets lie (0 or 1 for a proportion, 0 for a count)"
    )
    msg = (
        f"{kind} separation: {s.n_saturated} of {s.n_samples} samples have fitted "
        f"{where} and the coefficients diverge along "
        f"{coefs}; the unpenalized maximum-likelihood estimate does not exist. "
        f"Fit with an L2 penalty (l2 > 0, e.g. l2=1e-4) for finite coefficients."
    )
    return msg, info


def boundary_report(model: LinearModel, s: PassSums) -> tuple[str, dict] | None:
    """Every target on the boundary of the mean space (the weighted mean ``ybar``
    is: all counts 0, all proportions 0 or all 1): the intercept takes every
    mean to the boundary whatever the penalty (the bias is never penalized; for
    the canonical links ``eta -> -+inf``) and the weights to 0, so no estimate
    exists (statsmodels refuses such data; scikit-learn warns and returns ``-inf``).
    Returns the message and the separation record naming the intercept, or ``None``
    where the targets' mean is inside the mean space (or no sample has weight)."""
    family = model.family
    if not family.separable or not float(s.weight_sum) > 0:
        return None
    ybar = (s.y_sum / s.weight_sum).reshape(1)
    if bool(family.interior_mean(ybar).all()):
        return None
    names = parameter_names(model)
    sign = -1.0 if float(ybar[0]) <= 0 else 1.0
    msg = (
        f"every target lies on the boundary of the mean's range (weighted mean {float(ybar[0]):g}): "
        f"the likelihood rises as the intercept {names[-1]} takes every mean to that boundary, "
        "which no linear predictor in the link's domain reaches, whatever the L2 penalty (the "
        "intercept is not penalized); the maximum-likelihood estimate does not exist"
    )
    info = {
        "kind": "boundary",
        "n_saturated": s.n_samples,
        "n_samples": s.n_samples,
        "coefficients": {names[-1]: sign},
    }
    return msg, info
