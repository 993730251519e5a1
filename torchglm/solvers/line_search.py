"""The backtracking line search of the pass-based solvers (Nocedal & Wright §3.1).

Along a direction ``delta`` from the accepted point ``theta`` with slope
``g^T delta < 0``, one pass evaluates the trial ``theta + t delta``. It is accepted
when ``E(theta + t delta) <= E(theta) + c t g^T delta`` (Armijo, ``c = 1e-4``) and
eta stayed inside the link's domain with a finite loss, or, where ``E`` changes by
less than its rounding error, when the gradient shrank; otherwise the next pass
tries ``t / 2`` from the same ``theta``. A rejected pass never moves the model, so a
step that overflows never yields NaN. The search *stalls* once the predicted
decrease ``-t g^T delta`` is below the rounding of ``E``: no step can be verified
any more in this dtype (the solver decides what that means).
"""

from __future__ import annotations

import torch

from .pass_sums import PassSums

__all__ = ["LineSearch"]

#: First-order trials halved this often before a predicted decrease below rounding
#: counts as a stall (a Newton-type step stalls at once: its full step predicts it).
FIRST_ORDER_STALL = 5


class LineSearch:
    """The step ``t`` along the current direction and the trials rejected so far.

    Args:
        armijo: sufficient-decrease constant ``c``.
        max_halvings: consecutive rejected trials before the search gives up.

    Attributes:
        t: the current trial step.
        slope: ``g^T delta`` at the accepted point.
        n_rejected: trials rejected along this direction.
    """

    def __init__(self, armijo: float, max_halvings: int) -> None:
        self.armijo, self.max_halvings = armijo, max_halvings
        self.t = 1.0
        self.slope = 0.0
        self.n_rejected = 0

    def start(self, slope: float, t: float) -> None:
        """Search a new direction of slope ``slope`` from the first trial step ``t``."""
        self.slope = slope
        self.n_rejected = 0
        self.t = t

    def accepts(self, s: PassSums, base: PassSums, ok: bool, fixed_step: bool, dtype: torch.dtype) -> bool:
        """Whether the trial ``s`` is accepted against the accepted point ``base``
        (``ok``: inside the domain with a finite loss; ``fixed_step``: every such trial)."""
        if not ok:
            return False
        loss, f0 = s.loss_value, base.loss_value
        if fixed_step or loss <= f0 + self.armijo * self.t * self.slope:
            return True
        # E changes below its rounding: accept when the gradient shrank instead.
        return loss <= f0 + 8 * torch.finfo(dtype).eps * max(1.0, abs(f0)) and float(s.grad.norm()) < float(
            base.grad.norm()
        )

    def reject(self, s: PassSums, f0: float, dtype: torch.dtype, newton_decrement: bool) -> bool:
        """Count the rejected trial ``s``; return whether the search stalled: the trial
        was in the domain and its predicted decrease ``-t g^T delta`` is below the
        rounding of ``E(theta) = f0``, at once for a Newton-type direction with a
        decrement (``newton_decrement``), else after :data:`FIRST_ORDER_STALL` trials."""
        self.n_rejected += 1
        rounding = 10 * torch.finfo(dtype).eps * max(1.0, abs(f0))
        return (
            s.n_invalid == 0
            and -self.t * self.slope <= rounding
            and (newton_decrement or self.n_rejected >= FIRST_ORDER_STALL)
        )

    @property
    def exhausted(self) -> bool:
        """More than ``max_halvings`` trials rejected in a row."""
        return self.n_rejected > self.max_halvings

    def halve(self) -> None:
        """The next trial: half the step."""
        self.t *= 0.5
