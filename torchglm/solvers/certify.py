"""The decrement certificate of a Newton-type step: when ``converged=True`` may be said.

The Newton decrement ``lambda^2 = g^T H^{-1} g`` certifies ``E - E*`` (Boyd &
Vandenberghe, "Convex Optimization", 9.5 and (9.50): ``lambda^2 / 2`` estimates
``E - E*``, and ``lambda^2`` bounds it for a self-concordant ``E`` once
``lambda <= 0.68``), by ``lambda^2 <= tol max(1, |E|)``, only when

* the system was solved to its target (a Newton-CG solve that met its residual
  target; a Hessian positive (semi)definite in working precision) and the value is
  finite and non-negative (:class:`Solve`);
* the step just taken decreased ``E`` as its quadratic model predicted, within a
  factor 2 (:meth:`DecrementTest.agrees`): along a nearly flat, strongly curved
  direction ``lambda^2`` does not bound ``E - E*`` yet.

Once Newton's quadratic rate predicts convergence, the next pass sums only ``E`` and
``g`` and verifies with the previous Hessian ``H0`` (a *light* pass): after a step of
``H0``-length ``lambda0``, ``H >= (1 - lambda0)^2 H0`` (self-concordance; Boyd &
Vandenberghe 9.6), so ``g^T H^-1 g <= g^T H0^-1 g / (1 - lambda0)^2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .pass_sums import PassSums

__all__ = ["Solve", "DecrementTest"]


@dataclass
class Solve:
    """How the last Newton-type direction was solved: what its decrement may certify.

    Attributes:
        exact: the system was solved to its target (a CG solve that met its residual
            target; no indefinite Hessian, no gradient along singular directions).
        flat_gradient: the equilibrated gradient along directions dropped as singular
            (0: none, or below the resolution of ``E``).
        rcond: reciprocal condition of the last equilibrated Hessian (1 before any).
        cg: the direction came from CG (Hessian-vector products).
    """

    exact: bool = True
    flat_gradient: float = 0.0
    rcond: float = 1.0
    cg: bool = False


class DecrementTest:
    """The decrement test at an accepted point, and the verifying passes it asks for.

    Args:
        tol: the tolerance, relative to ``max(1, |E|)``.
        dtype: the working dtype.

    Attributes:
        model_agrees: the last Newton-type step's decrease matched its quadratic model.
        light: the next pass is a light verifying pass (``E`` and ``g`` only).
        light_hess: the Hessian that pass verifies with; ``light_lambda`` the
            decrement ``lambda0`` of the step to it.
        verify_full: the next pass confirms a Newton-CG certificate with the exact
            Hessian (truncated CG misses the flat directions of an ill-conditioned
            Hessian, e.g. nearly collinear columns).
    """

    def __init__(self, tol: float, dtype: torch.dtype) -> None:
        self.tol, self.dtype = tol, dtype
        self.model_agrees = True
        self.light = False
        self.light_hess: torch.Tensor | None = None
        self.light_lambda = 0.0
        self.verify_full = False

    def agrees(self, slope: float, step: float, f0: float, f1: float) -> bool:
        """Whether a Newton-type step ``step`` along a direction of slope ``slope`` took
        ``E`` from ``f0`` to ``f1`` as its quadratic model predicted,
        ``lambda^2 (t - t^2 / 2)``, within a factor 2 (or predicted a decrease below
        the rounding of ``E``)."""
        predicted = -slope * (step - step * step / 2)
        actual = f0 - f1
        rounding = 100 * torch.finfo(self.dtype).eps * max(1.0, abs(f1))
        return predicted <= rounding or 0.5 <= actual / predicted <= 2.0

    def bound(self, dec: float | None, stale: bool) -> float | None:
        """The bound on this point's ``lambda^2`` from ``dec``: itself, or after a light
        pass (``stale``: taken with the previous Hessian) ``dec / (1 - lambda0)^2``."""
        return dec / (1 - self.light_lambda) ** 2 if stale and dec is not None else dec

    def certifies(self, bound: float | None, scale: float) -> bool:
        """``0 <= lambda^2 <= tol max(1, |E|)`` (``scale``), finite, after a step whose
        decrease matched its model."""
        return (
            bound is not None
            and math.isfinite(bound)
            and 0 <= bound <= self.tol * scale
            and self.model_agrees
        )

    def schedule_light(self, s: PassSums, dec: float, scale: float, rcond: float) -> None:
        """Newton converges quadratically: once the decrement predicted after a full
        step, ``(lambda / (1 - lambda))^4``, is below the tolerance, the next pass sums
        only ``E`` and ``g`` (a Hessian pass costs ``d~ K (K+1) / 2`` of them) and
        verifies with this Hessian; a miss costs one more pass. Only for a
        well-conditioned Hessian: along a nearly flat direction the Hessian changes a
        lot relative to its small eigenvalue (the self-concordance constant grows
        with the condition number)."""
        lam = math.sqrt(max(dec, 0.0))
        if (
            lam <= 0.25
            and (lam / (1 - lam)) ** 4 <= self.tol * scale
            and rcond >= math.sqrt(torch.finfo(self.dtype).eps)
        ):
            self.light, self.light_hess, self.light_lambda = True, s.hess, lam
