"""Newton's early steps from the Hessian of a row subsample (a sketched Hessian).

Far from the optimum a Newton step needs its Hessian only roughly: with ``A`` the
Hessian summed over every ``r``-th row (scaled by ``r``) and ``||A^-1 H - I|| <= eps``,
the step ``-A^-1 g`` reduces the decrement by about ``eps lambda`` beside Newton's
quadratic ``lambda^2`` (Pilanci & Wainwright, "Newton sketch", SIAM J. Optim. 27,
2017; Roosta-Khorasani & Mahoney, "Sub-sampled Newton methods", Math. Program. 174,
2019), while its matrix product ``X~_r^T [h X~_r]`` costs ``1 / r`` of the exact
one's, which is most of a dense pass (``n d~^2`` flops against ``n d~`` for the
gradient). The gradient, the loss and the line search stay exact.

So a pass sums the sketched Hessian while the last decrement ``lambda^2`` exceeds
:data:`SKETCH_UNTIL` (or is unknown: the first point), and the exact one from
there on: Newton's quadratic phase, and every pass whose decrement may certify.
A sketched Hessian never certifies: its step's decrement is no ``g^T H^-1 g``, it
never feeds a light verifying pass (:mod:`.certify`) nor a later stage, and a
line search that stalls along its direction re-evaluates the point with the exact
Hessian. Only plain Newton-type steps of a fit with more than
``SKETCH_MIN_STRIDE`` times :data:`SKETCH_ROWS_PER_PARAM` rows per parameter are
sketched (not the finish of a first-order fit, nor a fit watched for separation,
whose Newton steps' lengths are the evidence).
"""

from __future__ import annotations

__all__ = ["SKETCH_ROWS_PER_PARAM", "SKETCH_MIN_STRIDE", "SKETCH_UNTIL", "HessianSketch"]

#: Rows of the subsample per parameter (``eps`` is about ``sqrt(p / rows)``, a few
#: per cent here).
SKETCH_ROWS_PER_PARAM = 100
#: Below this stride (a subsample of more than a quarter of the rows) the exact
#: Hessian costs little more: no sketch.
SKETCH_MIN_STRIDE = 4
#: The sketch serves while the decrement ``lambda^2`` is above this (Newton's
#: quadratic phase of a self-concordant ``E`` starts near ``lambda = 0.25``; one exact
#: step from ``lambda^2 = 1e-3`` reaches ``lambda^2`` of about ``1e-6`` or less).
SKETCH_UNTIL = 1e-2


class HessianSketch:
    """When the next pass sums a sketched Hessian, and over every how many rows.

    Args:
        enabled: whether this fit may sketch (a Newton-type solver's own steps, no
            separation watch).

    Attributes:
        n_samples: the rows of the last pass (``None`` before one was seen).
        exact_next: the next pass sums the exact Hessian whatever the decrement (a
            sketched direction whose line search stalled).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.n_samples: int | None = None
        self.exact_next = False

    def stride(self, n_params: int, decrement: float | None) -> int:
        """The row stride of the next pass's Hessian: ``1`` (exact) or the ``r`` of
        every ``r``-th row, while ``decrement`` is unknown or above
        :data:`SKETCH_UNTIL`."""
        if not self.enabled or self.exact_next or self.n_samples is None:
            return 1
        if decrement is not None and not decrement > SKETCH_UNTIL:
            return 1
        r = self.n_samples // (SKETCH_ROWS_PER_PARAM * max(n_params, 1))
        return r if r >= SKETCH_MIN_STRIDE else 1
