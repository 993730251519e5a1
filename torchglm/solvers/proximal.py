"""Proximal Newton for the elastic net: L1 (and L2) penalized GLMs.

The objective is

    F(theta) = f(theta) + l1 ||P theta||_1,
    f(theta) = sum_i s_i nll_i / sum_i s_i + (l2 / 2) ||P theta||^2

(:class:`~torchglm.penalty.ElasticNetPenalty`; ``P`` masks the weights, the bias is
not penalized). Each pass sums ``f``, its gradient ``g`` and its expected information
``H`` (the Hessian for canonical links; Fisher scoring's otherwise, positive
semidefinite for every family) at one point, as every Newton-type solver's pass does.
At an accepted point ``theta`` the step solves the quadratic model

    d = argmin_d  g^T d + d^T H d / 2 + l1 ||P (theta + d)||_1

by cyclic coordinate descent with soft-thresholding (Friedman, Hastie & Tibshirani
2010, §2.1: ``z_j <- S(z_j - v_j / H_jj, l1 / H_jj)`` with ``v = g + H d``), first
over all coordinates, then over the nonzero ones until they settle, then all again
(glum's active set). The step is then searched on the full objective (Lee, Sun &
Saunders, "Proximal Newton-type methods for minimizing composite functions", SIAM J.
Optim. 24 (2014), §2, and Tseng & Yun 2009): ``theta + t d`` is accepted when

    F(theta + t d) <= F(theta) + c t Delta,   Delta = g^T d + l1 (||P(theta + d)||_1 - ||P theta||_1) < 0,

else ``t`` is halved (the next pass evaluates the new trial). This is glum's solver
(its ``irls-cd``), written on the pass contract: one pass per trial, summed over
batches and all-reduced across processes (the subproblem is solved identically on
every process from the reduced ``g`` and ``H``).

**Stopping rule** (scale-invariant, a KKT certificate). At an accepted point, ``r`` is
the minimum-norm subgradient of ``F``
(:meth:`~torchglm.penalty.ElasticNetPenalty.kkt_residual`), zero exactly at the
optimum. The fit converges when

    kappa = r^T H^-1 r <= tol max(1, |F|)

(solved on the equilibrated system, :func:`~.linalg.newton_direction`; directions
``H`` drops as singular must carry no more than that either), the Newton decrement
of the smooth case (``l1 = 0``: ``r = g``), which estimates ``2 (F - F*)`` in
objective units: multiplying a column of ``X`` by ``c`` together with its penalty
weights (``l1 -> c l1``, ``l2 -> c^2 l2`` for all columns scaled alike) changes
neither where nor whether the fit stops. ``converged=True`` only then, or where a
trial's predicted decrease ``|t Delta|`` falls below the rounding of ``F`` with
``kappa`` itself at that rounding (``100 eps max(1, |F|)``: converged to working
precision).

**Separation.** With ``l1 > 0`` or ``l2 > 0`` every weight is bounded (the penalty
grows without bound along any direction of ``W``); only the unpenalized bias can
diverge, which happens exactly when every target lies on the boundary of the mean
space (all labels one class, all counts 0): that is refused at the start pass with a
:class:`~torchglm.SeparationWarning`, as by the other solvers. Unpenalized fits
(``l1 = l2 = 0``) of such families are refused here: ``newton`` watches them for
separation.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._validation import ConvergenceWarning, SeparationWarning, check_positive, fail
from .._validation import warn as _warn  # (_prox_finish has a `warn` flag)
from ..penalty import ElasticNetPenalty
from .layout import parameter_names, penalty_mask, set_flat_parameters
from .pass_sums import PassSums
from .linalg import jacobi_inverse, newton_direction
from .newton import IRLSFitter
from .registry import register_solver

__all__ = ["ProximalNewtonFitter"]


@register_solver
class ProximalNewtonFitter(IRLSFitter):
    """Proximal Newton with coordinate-descent subproblems for ``l1 ||W||_1`` on top
    of the model's objective (module docstring). With ``l1 = 0`` the proximal map is
    the identity and the step is Fisher scoring's: the fit is then
    :class:`~torchglm.solvers.newton.IRLSFitter`'s, with its stopping rule and
    separation watch.

    Args:
        model: a ``GeneralizedLinearModel`` (its ``l2`` is the elastic net's L2 part);
            fitted in place, its parameters are the start.
        l1: the L1 strength ``>= 0`` (the objective's ``l1 ||W||_1``).
        max_sweeps: coordinate-descent sweeps per subproblem.
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`; with ``l1 > 0``
            ``max_iter``, ``tol`` (the KKT tolerance: ``r^T H^-1 r <= tol max(1, |F|)``),
            ``dtype``, ``armijo`` and ``max_halvings`` apply.

    Raises:
        InputError: a negative or non-finite ``l1``.

    Example:
        >>> from torchglm.solvers import fit
        >>> x = torch.randn(300, 5, dtype=torch.float64)
        >>> y = (x[:, 0] - x[:, 1] + torch.randn(300, dtype=torch.float64) > 0).double()
        >>> model = LogisticRegression(5, dtype=torch.float64)
        >>> result = fit(model, x, y, solver="proximal", l1=0.05)
        >>> result.converged, int((model.coef == 0).sum()) > 0   # converged, exact zeros
        (True, True)
    """

    name = "proximal"

    def __init__(self, model, l1: float = 0.0, max_sweeps: int = 1000, **options):
        check_positive("l1", l1, allow_zero=True)
        if not math.isfinite(l1):
            raise fail("l1", "a finite non-negative number", l1)
        if not isinstance(max_sweeps, int) or max_sweeps < 1:
            raise fail("max_sweeps", "a positive integer", max_sweeps)
        self.l1 = float(l1)
        self.proximal = l1 > 0
        self.max_sweeps = max_sweeps
        super().__init__(model, **options)

    def begin(self) -> None:
        super().begin()
        self.penalty = ElasticNetPenalty(self.l1, self.model.l2)
        self.mask = penalty_mask(self.model, self.dtype, self.theta.device)
        self.base_F = math.inf
        self.kappa = math.inf

    def stop(self, message: str) -> None:
        """End the fit now (e.g. a Trainer's epoch limit): not converged, with a warning."""
        if not self.proximal:
            return super().stop(message)
        if not self.done:
            self._prox_finish(False, message, warn=True)
        return None

    # -- the pass -------------------------------------------------------------------
    def start_pass(self) -> None:
        if not self.proximal:
            return super().start_pass()
        self.sums = PassSums(
            self.model,
            self.theta,
            None if self.start.pending else "expected",
            targets_only=self.start.pending,
        )

    def accumulate(self, batch) -> None:
        if not self.proximal:
            return super().accumulate(batch)
        self.sums.add(batch)

    def end_pass(self) -> bool:
        if not self.proximal:
            return super().end_pass()
        s = self.sums.finish()
        self.n_passes += 1
        if self.start.pending:
            self.start.pending = False
            self._prox_start(s)
            return self.done
        F = float(s.loss + self.penalty.l1 * (self.theta * self.mask).abs().sum())
        usable = s.n_invalid == 0 and math.isfinite(F)
        if self.base is None:
            if not usable:
                self._prox_finish(
                    False,
                    "the starting point gives eta outside the link's domain or a loss that is not "
                    "finite (rescale the features, or give a start inside the domain)",
                    warn=True,
                )
                return True
            self._prox_accept(s, F, 0.0)
            return self.done
        if usable and F <= self.base_F + self.search.armijo * self.search.t * self.search.slope:
            self._prox_accept(s, F, self.search.t)
            return self.done
        self.search.n_rejected += 1
        rounding = 100 * torch.finfo(self.dtype).eps * max(1.0, abs(self.base_F))
        if usable and abs(self.search.t * self.search.slope) <= rounding:
            # No decrease can be verified any more in this dtype.
            if self.kappa <= rounding:
                self._prox_finish(
                    True, f"converged to working precision ({self.dtype}): KKT kappa {self.kappa:.3g}"
                )
            else:
                self._prox_finish(
                    False,
                    f"the line search stalled below the rounding of F with KKT kappa {self.kappa:.3g} "
                    "above it: not verified",
                    warn=True,
                )
            return True
        if self.search.exhausted:
            why = "eta left the link's domain" if s.n_invalid else "no sufficient decrease"
            self._prox_finish(
                False, f"line search failed after {self.search.max_halvings} halvings ({why})", warn=True
            )
            return True
        self.search.halve()
        self.theta = self.base_theta + self.search.t * self.delta
        return False

    # -- steps ------------------------------------------------------------------------
    def _prox_start(self, s: PassSums) -> None:
        """The intercept-only start ``b = g(ybar)``; targets all on the boundary of the
        mean space (a single class, all counts 0) have no finite intercept whatever the
        penalty (the bias is unpenalized): refused with a SeparationWarning."""
        family = self.model.family
        if not float(s.weight_sum) > 0 or s.n_offset:
            return
        ybar = (s.y_sum / s.weight_sum).reshape(1)
        if family.separable and not bool(family.interior_mean(ybar).all()):
            name = parameter_names(self.model)[-1]
            msg = (
                f"every target lies on the boundary of the mean's range (weighted mean {float(ybar[0]):g}): "
                f"the intercept {name} (not penalized) diverges whatever l1 and l2; the estimate does not exist"
            )
            self.result.extra.separation = {"kind": "boundary", "coefficients": {name: 1.0}}
            _warn(msg, SeparationWarning)
            self._prox_finish(False, msg)
            return
        b = family.link.link(ybar)
        if bool(torch.isfinite(b).all()) and bool(family.valid_eta(b).all()):
            self.theta = self.theta.clone()
            self.theta[-1] = b[0]
            self.result.extra.start = "intercept-only"

    def _prox_accept(self, s: PassSums, F: float, step: float) -> None:
        self.base, self.base_theta, self.base_F = s, self.theta, F
        r = self.penalty.kkt_residual(s.grad, self.theta, self.mask)
        self.kappa = self._certificate(r, s.hess)
        r_norm = float(r.abs().max())
        self.result.history.append(
            {
                "iteration": self.result.n_iter,
                "loss": F,
                "grad_norm": r_norm,
                "newton_decrement": self.kappa,
                "step_size": step,
            }
        )
        target = self.tol * max(1.0, abs(F))
        if self.kappa <= target:
            self._prox_finish(
                True,
                f"KKT conditions hold: r^T H^-1 r = {self.kappa:.3g} <= tol max(1, |F|) = {target:.3g} "
                f"(minimum-norm subgradient {r_norm:.3g})",
            )
            return
        if self.result.n_iter >= self.max_iter:
            self._prox_finish(
                False, f"max_iter={self.max_iter} reached (KKT kappa {self.kappa:.3g})", warn=True
            )
            return
        self.result.n_iter += 1
        # The subproblem is solved to a fraction of the Jacobi-scaled KKT measure
        # sum_j r_j^2 / H_jj (finite where kappa is not): inexact far from the optimum,
        # exact near it (Lee, Sun & Saunders 2014, §3.1's adaptive stopping).
        jacobi = float((r * r * jacobi_inverse(s.hess.diagonal())).sum())
        z = self._subproblem(s.grad, s.hess, self.theta, inner_tol=1e-8 * jacobi)
        self.delta = z - self.theta
        l1 = self.penalty.l1
        # the search's slope: the predicted change of F along delta (smooth part and L1)
        predicted = float(
            s.grad @ self.delta + l1 * ((z * self.mask).abs().sum() - (self.theta * self.mask).abs().sum())
        )
        self.search.start(predicted, 1.0)
        self.theta = self.theta + self.delta

    def _certificate(self, r: torch.Tensor, H: torch.Tensor) -> float:
        """``kappa = r^T H^-1 r`` (module docstring), with two cases ``H`` cannot see.

        Directions ``H`` drops as singular count with the least decrease of the quadratic
        model along them (``hidden`` of :func:`~.linalg.newton_direction`). The softmax's
        shift directions (one vector added to every class row of a column: the bias
        always, a weight column when ``l2 = 0``) are exact null directions of the smooth
        part: along the shift ``c`` of weight column ``j``, ``F`` changes by
        ``l1 sum_k (|W_kj + c| - |W_kj|)`` alone, minimal at ``c = 0`` exactly when 0 is a
        median of the column, ``|#{W_kj > 0} - #{W_kj < 0}| <= #{W_kj = 0}`` (a discrete,
        scale-free test); where it holds, those components of ``r`` carry no decrease and
        are taken out, where it fails there is no certificate yet."""
        if self.model.family.multi_output:
            m, d = self.model.n_outputs, self.model.n_features
            r = r.clone()
            if self.model.l2 == 0:
                W = self.theta[: m * d].view(m, d)
                pos, neg = (W > 0).sum(0), (W < 0).sum(0)
                if bool(((pos - neg).abs() > m - pos - neg).any()):
                    return math.inf
                R = r[: m * d].view(m, d)
                r[: m * d] = (R - R.mean(0)).reshape(-1)
            if self.model.has_intercept:
                r[m * d :] = r[m * d :] - r[m * d :].mean()
        solve, _, _, _, hidden, n_neg = newton_direction(H, r)
        return float(-(r @ solve)) + hidden if n_neg == 0 else math.inf

    def _subproblem(
        self, g: torch.Tensor, H: torch.Tensor, theta: torch.Tensor, inner_tol: float
    ) -> torch.Tensor:
        """``argmin_z g^T (z - theta) + (z - theta)^T H (z - theta) / 2 + l1 ||P z||_1`` by
        cyclic coordinate descent (module docstring), to ``max_j H_jj dz_j^2 <= inner_tol``
        over a full sweep (objective units, scale-invariant), in float64 on the host: the
        ``p x p`` system is small next to the passes."""
        Hn = H.detach().to("cpu", torch.float64).numpy()
        v = g.detach().to("cpu", torch.float64).numpy().copy()  # g + H (z - theta)
        z = theta.detach().to("cpu", torch.float64).numpy().copy()
        pen = self.mask.detach().cpu().numpy() > 0
        diag = np.diagonal(Hn).copy()
        l1 = self.penalty.l1
        floor = max(inner_tol, 1e-30)

        def sweep(coords) -> float:
            largest = 0.0
            for j in coords:
                a = diag[j]
                if a <= 0:
                    # An all-zero column without L2: no curvature and no gradient; its
                    # penalized coefficient belongs at 0.
                    new = 0.0 if pen[j] else z[j]
                else:
                    u = z[j] - v[j] / a
                    new = math.copysign(max(abs(u) - l1 / a, 0.0), u) if pen[j] else u
                change = new - z[j]
                if change != 0.0:
                    v[:] += change * Hn[:, j]
                    z[j] = new
                    largest = max(largest, max(a, 0.0) * change * change)
            return largest

        every = range(z.size)
        for _ in range(self.max_sweeps):
            if sweep(every) <= floor:
                break
            active = [j for j in every if z[j] != 0.0 or not pen[j]]
            for _ in range(self.max_sweeps):
                if sweep(active) <= floor:
                    break
        return torch.from_numpy(z).to(theta.device, theta.dtype)

    def _prox_finish(self, converged: bool, message: str, warn: bool = False) -> None:
        self.done = True
        r = self.result
        r.converged, r.message = converged, message
        if self.base is not None:
            set_flat_parameters(self.model, self.base_theta)
            self._unwritten = False
            r.extra.update(loss=self.base_F, grad=self.base.grad.detach(), hessian=self.base.hess.detach())
            r.extra.other["kkt_residual"] = self.penalty.kkt_residual(
                self.base.grad, self.base_theta, self.mask
            )
        r.extra.update(passes=self.n_passes, dtype=str(self.dtype))
        r.extra.other["l1"] = self.penalty.l1
        if warn:
            _warn(f"{self.name}: {message}", ConvergenceWarning)
