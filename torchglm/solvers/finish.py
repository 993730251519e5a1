"""The Newton-type finish of a first-order fit.

First-order solvers (gradient, coordinate, L-BFGS) have no exact curvature: their
own rule (``||g||_inf <= gtol``, the L-BFGS decrement, a stalled line search) only
ends their own phase; the fit then **finishes with exact Newton-type steps** from
that point (exact Hessian when ``d~ K (K + 1) / 2 <= NEWTON_MAX_COST``, Newton-CG
otherwise): one pass re-evaluates the point with exact curvature, and its decrement
either verifies the optimum at once or gives the first Newton step (separation is
watched). So ``converged=True`` always means the decrement test held.
"""

from __future__ import annotations

import math

from ..passes import LinearModel
from .layout import hessian_cost

__all__ = ["FINISH_MAX_STEPS", "NEWTON_MAX_COST", "NewtonFinish"]

#: Up to this many Hessian entries per sample (``d~ K (K + 1) / 2``) exact Newton steps
#: are the cheaper way to a verified optimum: ``auto`` picks Newton, and a first-order
#: fit finishes with the exact Hessian (Newton-CG above it). Measured on two cores
#: (bench/newton.py, docs/solvers.md): at d~ = 51, 200k rows, a Hessian pass costs 72 ms,
#: a gradient pass 21 ms, and float32 Newton + polish (0.287 s) beat L-BFGS with its
#: verifying Hessian pass (0.315 s); at d~ = 501 L-BFGS with a Newton-CG finish wins 3x.
NEWTON_MAX_COST = 128
#: Newton-type steps a first-order fit may take to finish after its own rule stopped.
FINISH_MAX_STEPS = 100


class NewtonFinish:
    """The finishing phase of a first-order fit.

    Attributes:
        active: the fit is finishing (its steps are Newton-type).
        start_iter: the accepted steps before the finish began.
        curvature: what the finish's passes accumulate: ``"full"`` (exact Hessian,
            up to :data:`NEWTON_MAX_COST`) or ``"hvp"`` (Newton-CG).
    """

    def __init__(self, model: LinearModel) -> None:
        self.active = False
        self.start_iter = 0
        self.curvature = "full" if hessian_cost(model) <= NEWTON_MAX_COST else "hvp"

    def begin(self, n_iter: int) -> None:
        """Finish with Newton-type steps from the ``n_iter``-th accepted step."""
        self.active = True
        self.start_iter = n_iter

    def steps(self, n_iter: int) -> int:
        """The Newton-type steps taken since the finish began."""
        return n_iter - self.start_iter

    def out_of_steps(self, n_iter: int) -> bool:
        """:data:`FINISH_MAX_STEPS` Newton-type steps taken without certification."""
        return self.steps(n_iter) >= FINISH_MAX_STEPS

    def stop_predicted(self, history: list[dict], tol: float) -> bool:
        """Whether the next accepted first-order step is predicted to meet the
        decrement rule: the last decrement times the larger of the last two ratios
        of successive decrements (one ratio after a sudden drop is optimistic: a
        wrong prefetch costs half a pass, a missed one a pass)."""
        hist = [h["newton_decrement"] ** 2 for h in history[-3:]]
        if len(hist) < 2 or not all(math.isfinite(v) and v > 0 for v in hist):
            return False
        ratio = max(b / a for a, b in zip(hist, hist[1:]))
        predicted = hist[-1] * min(ratio, 1.0)
        return predicted / 2 <= tol * max(1.0, abs(history[-1]["loss"]))
