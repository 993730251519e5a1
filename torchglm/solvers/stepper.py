"""The step / line-search / convergence code shared by every iterative solver.

One pass evaluates the objective ``E``, its gradient ``g`` and the curvature a
solver needs at a trial point ``theta + t delta``. At the end of the pass:

1. **Line search** (backtracking, Armijo): the trial is accepted when
   ``E(theta + t delta) <= E(theta) + c t g^T delta`` (``c = 1e-4``) and eta
   stayed inside the link's domain with a finite loss; otherwise it is rejected
   and the next pass tries ``t / 2`` from the same ``theta``. A rejected pass
   never moves the model, so a step that overflows never yields NaN.
2. **Convergence** at the accepted point, by scale-invariant rules only
   (multiplying a column of ``X`` by ``c`` divides its coefficient by ``c`` and
   changes neither whether nor where a fit stops): the Newton decrement
   ``lambda^2 = g^T H^{-1} g`` with ``lambda^2 <= tol max(1, |E|)``
   (``lambda^2 / 2`` estimates ``E - E*`` and ``lambda^2`` bounds it for a
   self-concordant ``E`` once ``lambda <= 0.68``; Boyd & Vandenberghe, "Convex
   Optimization", 9.5 and (9.50): the factor 2 covers the quadratic model's error
   along nearly flat directions), computed on the equilibrated system, and only
   after a Newton-type step whose decrease of ``E`` matched its quadratic model
   (within a factor 2). Newton-CG's decrement counts only from a CG solve that met
   its residual target, and is confirmed with the exact Hessian where that costs
   little (truncated CG can miss a nearly flat direction), elsewhere replaced by an
   upper bound (:class:`~.certify.ResidualBound`: ``-g^T x`` leaves out ``r^T H^-1 r``)
   or, where none is available, refused; a Hessian singular to working
   precision with a gradient above rounding along its null directions ends the fit
   unconverged (the optimum is not determined in the dtype). Once Newton's
   quadratic rate predicts convergence, the next pass sums only ``E`` and ``g`` and
   verifies with the previous Hessian (a "light" pass; ``g^T H^-1 g`` bounded through
   ``(1 - lambda_0)^2 H_0 <= H``). Not a small
   gradient, which a nearly flat direction can show far from the optimum, and not
   the change of the coefficients, which is small both at the optimum and when
   progress stalls. First-order solvers (gradient, coordinate, L-BFGS) have no
   exact curvature: their own rule (``||g||_inf <= gtol``, the L-BFGS decrement,
   a stalled line search) only ends their own phase; the fit then **finishes
   with exact Newton-type steps** from that point (exact Hessian when
   ``d~ K (K + 1) / 2 <= NEWTON_MAX_COST``, Newton-CG otherwise): one pass
   re-evaluates the point with exact curvature, and its decrement either verifies
   the optimum at once or gives the first Newton step; separation is watched.
   So ``converged=True`` always means the decrement test held. Where ``E``
   changes by less than its rounding error, a trial that lowers ``||g||`` is
   accepted instead; a rejected Newton-type trial whose predicted decrease
   ``-t g^T delta`` is below that rounding ends the fit as converged "to
   working precision" (no step can be verified any more in this dtype), provided
   the full step's ``lambda^2`` is itself at the resolution of E (``100 eps |E|``):
   otherwise the quadratic model fails there and the fit ends unconverged. A
   decrement certifies only when it is finite, non-negative and from a positive
   (semi)definite system (an indefinite Hessian's modified step certifies nothing).
3. **Direction** (the solver's own rule: Newton, Fisher scoring, CG, L-BFGS,
   gradient, one coordinate) from the accepted point, and the first trial step.

``max_iter`` accepted steps without convergence end the fit with a
:class:`~torchglm.ConvergenceWarning` and ``converged=False``. Unpenalized
fits of families whose targets can sit on the boundary of the mean space
(``Family.separable``) are watched for separation (see
:class:`~.separation.SeparationWatch`); a first-order phase ends as soon as a sample
reaches that boundary, so that the Newton-type finish decides.

:class:`StepFitter` runs these as named phases, each with its state in a part of its
own: the **start** (:mod:`.start`: the start pass, the intercept-only and data
starts), the **step** (the solver's direction, Newton-type steps minimum-norm along
the softmax shift directions of :mod:`.shift`), the **line search**
(:mod:`.line_search`), the **certificate** (:mod:`.certify`: the decrement test, the
light and verifying passes), the **sketch** of the early Newton steps' Hessian on a
row subsample (:mod:`.sketch`: never a certificate), the **finish** of a first-order fit (:mod:`.finish`) and
the **separation watch** (:mod:`.separation`).
"""

from __future__ import annotations

import math

import torch

from .._validation import (
    ConvergenceWarning,
    NumericalWarning,
    SeparationWarning,
    check_class_weights,
    check_positive,
    fail,
)
from .._validation import warn as _warn  # (_end has a `warn` flag)
from ..passes import FitResult, Fitter, LinearModel
from .certify import TIGHTEN_MAX, CGCertificate, DecrementTest, ResidualBound, Solve
from .finish import FINISH_MAX_STEPS, NewtonFinish
from .layout import flat_parameters, set_flat_parameters
from .line_search import LineSearch
from .linalg import cg_solve, jacobi_preconditioner, newton_direction
from .pass_sums import PassSums
from .products import HESSIAN_PRECISIONS
from .separation import SeparationWatch, boundary_report, separation_report
from .shift import SoftmaxShift
from .sketch import HessianSketch
from .sparse_rows import SparseRows
from .start import StartRule, intercept_only

__all__ = ["StepFitter"]


class StepFitter(Fitter):
    """Base of the pass-based iterative solvers (see the module docstring).

    Subclasses set ``name``, ``curvature`` (what a pass accumulates: ``None``,
    ``"full"``, ``"expected"``, ``"diag"``, ``"hvp"``), ``exact`` (whether their
    direction comes with an exact Newton decrement) and implement
    :meth:`direction`.

    Args:
        model: a ``GeneralizedLinearModel``; fitted in place (its parameters are
            the starting point and hold the best accepted point after every pass).
        max_iter: maximum number of accepted steps.
        tol: Newton-decrement tolerance, relative to ``max(1, |E|)``.
        gtol: first-order solvers end their own phase at ``||g||_inf <= gtol``
            and then finish with Newton-type steps (module docstring); Newton-type
            solvers stop on the decrement only.
        dtype: computation dtype (batches are cast per pass when they differ).
        armijo: sufficient-decrease constant ``c``.
        max_halvings: consecutive rejected trials before the line search gives up.
        detect_separation: watch unpenalized fits of ``Family.separable`` families for
            separation (on the Newton-type steps: every solver's, first-order ones
            while finishing).
        saturation: per-sample loss below which a fitted probability counts as
            numerically 0 or 1.
        handoff: a stage that another (higher-precision) stage continues: on
            convergence the model is left one Newton-type step further, at
            ``theta + delta`` with the direction the final decrement came from
            (verified by the next stage, not here). :func:`~torchglm.solvers.fit`
            sets it on a float32 stage followed by the float64 polish, whose first
            pass then usually confirms: a converged stage's step is worth a factor
            ``lambda^2`` in the objective's error, and without it the polish needs a
            step and a second pass for ``lambda^2`` just above its tolerance. A Newton
            or IRLS stage whose polish steps with its last Hessian ends as soon as
            the quadratic rate predicts the polish's tolerance at that step,
            unconverged (:meth:`_polish_verifies`: the polish's first pass is then the
            verifying pass).
        hessian_precision: the precision of the Hessian's matrix products
            (:data:`~torchglm.solvers.products.HESSIAN_PRECISIONS`): ``"highest"``
            (the working dtype), or for a ``handoff`` stage only, ``"tf32"`` (TF32
            tensor cores on a CUDA device; on other devices the working dtype) or
            ``"bf16"`` (bfloat16 products, added up in the working dtype). The
            steps then solve with a Hessian good to about 1e-3 (TF32) or 4e-3
            (bf16) relative, which slows Newton's final rate, not its line search;
            the loss, gradient and every stopping decision stay in the working
            dtype, and the stage that continues decides convergence with its own
            exact Hessians. The stage's numerical safeguards (an indefinite or
            singular rounded Hessian) are counted in ``extra.numerical_warnings``
            without a warning.
        finish_first: a first-order solver begins with its Newton-type finish (its
            first pass sums the finish's curvature, and its decrement either
            certifies the start or gives the first Newton-type step).
            :func:`~torchglm.solvers.fit` sets it on the float64 polish of a
            first-order stage in float32, whose own first-order phase already
            ended (a fresh first-order phase would rebuild its memory from a
            gradient step). Newton-type solvers ignore it.
    """

    name = ""
    curvature: str | None = None
    default_max_iter = 100
    #: whether :meth:`direction` is a Newton-type step with an exact decrement
    #: (otherwise the fit finishes with Newton-type steps; module docstring).
    exact = False
    #: ``False``: accept every trial that stays in the link's domain (a fixed step).
    line_search = True
    #: The tolerance of the stage that continues a ``handoff`` stage and verifies its
    #: light pass for it (:meth:`_polish_verifies`); ``None``: none does.
    polish_tol: float | None = None

    def __init__(
        self,
        model: LinearModel,
        max_iter: int | None = None,
        tol: float = 1e-12,
        gtol: float = 1e-10,
        dtype: torch.dtype | None = None,
        armijo: float = 1e-4,
        max_halvings: int = 40,
        detect_separation: bool = True,
        saturation: float = 1e-10,
        handoff: bool = False,
        hessian_precision: str = "highest",
        finish_first: bool = False,
    ):
        max_iter = self.default_max_iter if max_iter is None else max_iter
        if not isinstance(max_iter, int) or max_iter < 0:
            raise fail("max_iter", "a non-negative integer", max_iter)
        check_positive("tol", tol, allow_zero=True)
        check_positive("gtol", gtol, allow_zero=True)
        check_positive("armijo", armijo)
        if hessian_precision not in HESSIAN_PRECISIONS:
            raise fail("hessian_precision", f"one of {list(HESSIAN_PRECISIONS)}", repr(hessian_precision))
        if hessian_precision != "highest" and not handoff:
            raise fail(
                "hessian_precision",
                "'highest' for a fit that decides its own convergence (a lower precision "
                "serves a stage another stage verifies: fit(..., dtype=torch.float32) with its float64 polish)",
                repr(hessian_precision),
            )
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise fail("dtype", "a floating-point torch.dtype", dtype)
        self.max_iter, self.tol, self.gtol = max_iter, tol, gtol
        # A handoff stage's first-order phase stops at the stage's resolution: its E
        # rounds at eps(dtype), so a tighter quasi-Newton decrement only adds steps its
        # line search cannot verify; its Newton-type finish, whose steps need no
        # resolution of E to converge, then goes on to ``tol``.
        self.first_order_tol = max(tol, 10 * torch.finfo(dtype).eps) if handoff and dtype else tol
        self.requested_dtype, self.armijo, self.max_halvings = dtype, armijo, max_halvings
        self.detect_separation = detect_separation
        self.saturation = saturation
        self.handoff = handoff
        self.hessian_precision = hessian_precision
        self.finish_first = finish_first
        self.restart_from(model)

    def begin(self) -> None:
        """The fit's state from the model as it is now (:meth:`.Fitter.restart_from`):
        the working dtype, the start point on the parameters' device, and each phase's
        own state, fresh."""
        model = self.model
        self.dtype = self.compute_dtype(model, self.requested_dtype)
        # Sparse batches' transposed CSR, kept across passes (sparse_rows.SparseRows).
        self.sparse_cache: dict = {}
        # The family's per-sample target terms, kept across passes (PassSums.y_term).
        self.target_cache: dict = {}
        self.theta = flat_parameters(model, self.dtype).to(model.param_device)
        self.result = FitResult(solver=self.name)
        self.n_passes = 0
        #: the accepted point: its sums, its parameters, the direction from it and
        #: that direction's decrement (``None``: no curvature model).
        self.base: PassSums | None = None
        self.base_theta: torch.Tensor | None = None
        #: the model does not hold the accepted point yet (:meth:`write_accepted`).
        self._unwritten = False
        self.delta: torch.Tensor | None = None
        self.decrement: float | None = None
        #: numerical notes (text -> count), reported in ``extra.numerical_warnings``.
        self.notes: dict[str, int] = {}
        #: the next pass evaluates the accepted point again (not a trial step).
        self.reevaluate = False
        # The phases' own state (module docstring).
        self.start = StartRule(model, self.theta)
        self.search = LineSearch(self.armijo, self.max_halvings)
        self.solve = Solve()
        self.check = DecrementTest(self.tol, self.dtype)
        self.finish = NewtonFinish(model)
        if self.finish_first and not self.exact:
            self.finish.begin(0)
            self.result.extra.first_order_stop = "the previous stage's first-order phase ended"
        # Every family whose targets can sit on the boundary of the mean space
        # (``Family.separable``: a probability 0 or 1, a count's mean 0).
        self.separation = SeparationWatch(self.detect_separation and model.l2 == 0 and model.family.separable)
        self.shift = SoftmaxShift.of(model, self.dtype, self.theta.device)
        # Newton's own early steps from a subsample's Hessian (:mod:`.sketch`); not where
        # the separation watch reads the steps' lengths.
        self.sketch = HessianSketch(
            self.exact and self.curvature in ("full", "expected") and not self.separation.enabled
        )

    @classmethod
    def stage_options(
        cls, dtype: torch.dtype, last: bool, previous: FitResult | None, tol: float, hessian_precision: str
    ) -> dict:
        """A stage before the last is a ``handoff`` stage (the polish verifies its last
        step) with the asked ``hessian_precision``. The last stage after another of a
        first-order solver begins with its Newton-type finish (``finish_first``). See
        :meth:`.Fitter.stage_options`."""
        if last:
            return {"finish_first": True} if previous is not None and not cls.exact else {}
        return {"handoff": True, "hessian_precision": hessian_precision}

    # -- resuming (a Trainer's checkpoint) -------------------------------------------
    def state_dict(self) -> dict:
        """What a fitter rebuilt from a checkpoint needs to follow the same iterates:
        the accepted point in the fitter's dtype (the model holds it rounded to its
        own, e.g. float32, so a fit resumed from the model's parameters alone would
        leave the path in the last bits)."""
        theta = self.theta if self.base_theta is None else self.base_theta
        return {"theta": theta.detach().cpu()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` into a fitter made at the same accepted point: its
        first pass re-evaluates that point exactly."""
        if state.get("theta") is not None and state["theta"].shape == self.theta.shape:
            self.theta = state["theta"].to(self.theta.device, self.dtype)
            self.start.resume(self.theta)

    # -- the pass hooks -------------------------------------------------------
    def pass_curvature(self) -> str | None:
        """What the next pass accumulates."""
        if self.start.pending or self.check.light:
            return None
        if self.check.verify_full:
            return "full"
        if self.finish.active:
            return self.finish.curvature
        if not self.exact and self.finish.curvature == "hvp" and self._first_order_stop_predicted():
            # The first-order phase is about to stop: sum the finish's curvature on
            # its next pass (a diagonal and kept per-sample curvature, about half a
            # pass more), so the finish needs no separate pass to re-evaluate the point.
            return "hvp"
        return self.curvature

    def pass_diagonal(self) -> bool:
        """Whether a ``"hvp"`` pass sums ``diag(H)`` (Jacobi's preconditioner of the
        Newton-CG solves); a solver with a preconditioner of its own may skip it."""
        return True

    def _first_order_stop_predicted(self) -> bool:
        """Whether the next accepted first-order step is predicted to meet the decrement
        rule (:meth:`~.finish.NewtonFinish.stop_predicted`)."""
        return self.finish.stop_predicted(self.result.history, self.first_order_tol)

    def start_pass(self) -> None:
        for cache in (self.sparse_cache, self.target_cache):
            if cache:
                SparseRows.evict_unseen(cache)
        if self.start.data is not None:
            return  # this pass sums the data start's weighted least squares
        curvature = self.pass_curvature()
        self.sums = PassSums(
            self.model,
            self.theta,
            curvature,
            self.saturation if self.separation.enabled else 0.0,
            y_sum=self.base is None,
            targets_only=self.start.pending,
            sparse_cache=self.sparse_cache,
            target_cache=self.target_cache,
            hessian_precision=self.hessian_precision,
            hessian_stride=self._hessian_stride(curvature),
            diagonal=self.pass_diagonal(),
        )

    def _hessian_stride(self, curvature: str | None) -> int:
        """The next pass's Hessian row stride (:class:`~.sketch.HessianSketch`): the
        solver's own Newton-type steps only (not a verifying pass, not the finish)."""
        if curvature != self.curvature or self.check.verify_full or self.finish.active:
            return 1
        return self.sketch.stride(self.theta.numel(), self.decrement)

    def accumulate(self, batch) -> None:
        if self.start.data is not None:
            self.start.data.add(batch)
        else:
            self.sums.add(batch)

    def end_pass(self) -> bool:
        if self.done:
            return True
        if self.start.data is not None:
            self._end_data_start_pass()
            return self.done
        s = self.sums.finish()
        self.n_passes += 1
        self.sketch.n_samples = s.n_samples
        ok = s.n_invalid == 0 and math.isfinite(s.loss_value)
        if self.start.pending:
            self._end_start_pass(s)
        elif self.base is None:
            self._first_point(s, ok)
        elif self.reevaluate:
            # The first pass of the Newton-type finish (or a verifying pass): same
            # point, exact curvature.
            self.reevaluate = False
            self._accept(s, 0.0)
        else:
            self._trial(s, ok)
        return self.done

    # -- start --------------------------------------------------------------------
    def _end_start_pass(self, s: PassSums) -> None:
        """The start pass read only the targets: end the fit where every target is on
        the boundary, else evaluate the (new) start next."""
        self.start.pending = False
        found = boundary_report(self.model, s)
        if found is not None:
            msg, info = found
            self.result.extra.separation = info
            _warn(msg, SeparationWarning)
            self._end(False, msg)
            return
        theta = self.start.intercept_start(s, self.theta)
        if theta is not None:
            self.theta = theta
            self.result.extra.start = "intercept-only"

    def _end_data_start_pass(self) -> None:
        """The data start's pass summed its weighted least squares: start from its solution."""
        self.n_passes += 1
        theta, self.start.data = self.start.data.solve(), None
        if theta is None:
            self._end(False, self.start.no_valid_start(), warn=True)
        else:
            self.theta = theta.to(self.theta.device)
            self.result.extra.start = "weighted least squares from the data (mu0 from y)"

    def _first_point(self, s: PassSums, ok: bool) -> None:
        """The first evaluated point: accept it, or restart from another start."""
        if s.y_sum.dim() == 1:
            # The weight of every declared class (the first pass sums them): a class
            # without samples has no finite estimate (its intercept runs to -inf),
            # the rule of the data gate (``check_classes``) for data no gate saw.
            check_class_weights("y", s.y_sum)
        if ok:
            self._accept(s, 0.0)
            return
        choice = self.start.restart(s)
        if choice == StartRule.INTERCEPT:
            self.theta = intercept_only(self.model, s, self.theta)
            self.result.extra.start = "intercept-only (the given start was outside the link's domain)"
        elif choice == StartRule.DATA:
            self.start.begin_data_start(s, self.dtype, self.theta.device)
        else:
            self._end(False, choice, warn=True)

    # -- subclass hook ----------------------------------------------------------
    def direction(self, s: PassSums) -> tuple[torch.Tensor, float | None]:
        """The search direction at the accepted point and the Newton decrement
        ``lambda^2`` (``None`` when the solver has no curvature model)."""
        raise NotImplementedError

    def initial_step(self) -> float:
        """The first trial step along a new direction (1 for Newton-type steps)."""
        return 1.0

    def on_accept(self, s: PassSums, step: float) -> None:
        """Called with the accepted sums before the new direction (L-BFGS memory)."""

    def redirect(self) -> bool:
        """When no step along the current direction can be verified, try another
        direction from the accepted point (coordinate descent's next coordinate).
        Return False when there is none: the fit then ends at working precision."""
        return False

    def set_direction(self, delta: torch.Tensor) -> None:
        """Search along ``delta`` from the accepted point, starting at ``initial_step``."""
        self.delta = delta
        self.search.start(float(self.base.grad @ delta), self.initial_step())
        self.theta = self.base_theta + self.search.t * self.delta

    # -- step -------------------------------------------------------------------
    def _accept(self, s: PassSums, step: float) -> None:
        """Accept the point of ``s``, reached by a step ``step`` (0: re-evaluated),
        take the direction from it, and stop or search along it."""
        self.on_accept(s, step)
        # Did the step just taken decrease E as its quadratic model predicted? Where it
        # did not (a nearly flat, strongly curved direction), lambda^2 does not bound
        # E - E* yet: no convergence.
        self.check.model_agrees = True
        if step > 0 and self.newton_like and self.base is not None:
            self.check.model_agrees = self.check.agrees(
                self.search.slope, step, self.base.loss_value, s.loss_value
            )
        self.base, self.base_theta = s, self.theta
        self.sketch.exact_next = self.sketch.exact_next and s.sketched
        self._unwritten = not self.write_each_step
        if self.write_each_step:
            set_flat_parameters(self.model, self.theta)
        if step > 0:
            self.result.n_iter += 1
        self.search.n_rejected = 0
        grad_norm = float(torch.linalg.vector_norm(s.grad, math.inf)) if s.grad.numel() else 0.0
        stale = self.check.light
        delta, dec = self._next_direction(s)
        self.delta, self.decrement = delta, dec
        self._record(s, step, grad_norm, dec)
        scale = max(1.0, abs(s.loss_value))
        if not self.newton_like:
            stopped = self._first_order_stop(s, step, grad_norm, dec, scale)
        else:
            stopped = self._certify(s, step, delta, dec, stale, scale)
        if stopped or self._out_of_steps(grad_norm):
            return
        self._search_from(s)

    def _next_direction(self, s: PassSums):
        """The direction from the accepted point and its decrement: a light or
        verifying pass's Newton step with its Hessian, the finish's Newton-type step,
        or the solver's own."""
        stale = self.check.light
        self.check.light = False
        verifying, self.check.verify_full = self.check.verify_full, False
        if stale:
            return self.newton_step(s, self.check.light_hess)
        if verifying:
            return self.newton_step(s, s.hess)
        return self.finish_direction(s) if self.finish.active else self.direction(s)

    def _record(self, s: PassSums, step: float, grad_norm: float, dec: float | None) -> None:
        self.result.history.append(
            {
                "iteration": self.result.n_iter,
                "loss": s.loss_value,
                "grad_norm": grad_norm,
                "newton_decrement": math.nan if dec is None else math.sqrt(max(dec, 0.0)),
                "step_size": step,
                "passes": self.n_passes,
            }
        )

    def _out_of_steps(self, grad_norm: float) -> bool:
        """End the fit unconverged at ``max_iter`` accepted steps (or the finish's
        :data:`~.finish.FINISH_MAX_STEPS`)."""
        if self.finish.active:
            if self.finish.out_of_steps(self.result.n_iter):
                self._end(
                    False,
                    f"{FINISH_MAX_STEPS} Newton-type finishing steps did not meet the decrement test",
                    warn=True,
                )
                return True
        elif self.result.n_iter >= self.max_iter:
            self._end(False, f"max_iter={self.max_iter} reached (gradient norm {grad_norm:.3g})", warn=True)
            return True
        return False

    def _search_from(self, s: PassSums) -> None:
        """Start the line search along the new direction (``-g`` where it does not descend)."""
        slope = float(s.grad @ self.delta)
        if not slope < 0:
            # Not a descent direction (rounding in a near-singular model): fall back to -g.
            self._note("the search direction was not a descent direction; used -gradient")
            # -g's slope says nothing about E - E*: no decrement for the stall rule.
            self.delta, self.decrement, self.solve.exact = -s.grad, None, False
            slope = -float(s.grad @ s.grad)
        t = 1.0 if self.finish.active else self.initial_step()
        self.search.start(slope, t)
        self.theta = self.base_theta + self.search.t * self.delta

    def _first_order_stop(self, s: PassSums, step: float, grad_norm: float, dec, scale: float) -> bool:
        """A first-order rule (not scale-invariant) ends this phase: the fit finishes
        with Newton-type steps that verify the optimum. Returns whether it did."""
        if self.separation.at_boundary(s) and step > 0:
            # First-order steps cannot tell separation from a finite optimum (their
            # steps shrink either way); Newton's can (they shrink quadratically to a
            # finite optimum and keep their length along a separating direction,
            # :class:`~.separation.SeparationWatch`). The finish watches them from here,
            # before the first-order phase drives the boundary samples' curvature to 0
            # (there truncated CG returned a step predicting a decrease of 9e-5 on
            # E = 3e-11, which no line search could take).
            if self._proven_separated(s):
                # separation is proven: a finish would only amplify rounding along it
                return True
            reason = f"{s.n_saturated} samples at the boundary of the mean space (separation?)"
        elif grad_norm <= self.gtol:
            reason = f"gradient norm {grad_norm:.3g} <= gtol {self.gtol:g}"
        elif dec is not None and dec / 2 <= self.first_order_tol * scale:
            reason = f"quasi-Newton decrement {dec / 2:.3g} <= tol*max(1,|E|)"
        else:
            return False
        self._begin_finish(reason, s)
        return True

    # -- certify ------------------------------------------------------------------
    def _certify(self, s: PassSums, step: float, delta: torch.Tensor, dec, stale: bool, scale: float) -> bool:
        """The decrement test after a Newton-type step (:mod:`.certify`): only the
        decrement certifies E - E* (a small gradient does not, along a nearly flat
        direction). Ends the fit, or asks for a verifying pass; returns whether the
        fit ended or re-evaluates the point."""
        bound = self.check.bound(dec, stale)
        if bound is not None and not (math.isfinite(bound) and bound >= 0):
            # g^T A^-1 g < 0 or not finite: A is not positive definite on the step's
            # subspace in this arithmetic (CG on a Hessian singular to rounding), so
            # the value is no decrement and certifies nothing; the step is not Newton's.
            self._note(f"the Newton-type system gave a decrement {bound:.3g} (not a descent direction)")
            self.solve.exact = False
        certified = self.check.certifies(bound, scale)
        had_step = self.separation.prev_delta is not None
        if not stale and self._watch_separation(s, delta, step):
            return True
        if (
            certified
            and self.separation.at_boundary(s)
            and (stale or not had_step or self.separation.streak > 0)
        ):
            # With samples on the boundary, a small decrement is also what a
            # separating direction shows (E - inf E -> 0 while the coefficients run
            # off): it certifies only after a Newton step that did not keep the
            # length and direction of the one before (the separation watch then
            # either ends the fit or lets the next pass certify).
            certified = False
        if certified and self._proven_separated(s):
            return True
        if certified and self._conclude(bound, stale):
            return True
        if stale:
            # Not verified (or the step's decrease was not the predicted one):
            # evaluate this point again with its own curvature.
            self._reevaluate()
            return True
        if s.hess is not None and dec is not None and self.solve.exact and not self.separation.at_boundary(s):
            # Not with saturated samples: a separation needs its full steps watched.
            self.check.schedule_light(s, dec, scale, self.solve.rcond)
            if self.check.light and self._polish_verifies(dec, scale):
                self._end(False, self._handoff_message(dec), hand_off=True)
                return True
        return False

    def _polish_verifies(self, dec: float, scale: float) -> bool:
        """Whether the stage that continues this ``handoff`` stage verifies its light pass
        for it: Newton's or IRLS's float64 polish sums ``E`` and ``g`` only and steps with
        this stage's last Hessian (:meth:`.newton.NewtonFitter.stage_options`, which sets
        ``polish_tol``), as a light pass here would, in float64. So where the quadratic
        rate predicts that pass meets the polish's own tolerance, this stage hands the
        full step's point on at once: its own light pass in float32 evaluated the same
        point with the same Hessian (probit 200k x 50 and Poisson 500k x 30 spent one of
        their 7 passes on it), and the polish's first pass was a step further along.
        Where it predicts only this stage's tolerance (binary 1M x 20: lambda^2 9e-8 at
        the full step, predicted 5e-8, tol 1e-8), the stage keeps its light pass: the
        polish's first pass would take a step, not certify."""
        if not (
            self.handoff
            and self.polish_tol is not None
            and self.exact
            and self.curvature in ("full", "expected")
            and self.hessian_precision == "highest"
        ):
            return False
        lam = math.sqrt(max(dec, 0.0))
        return (lam / (1 - lam)) ** 4 <= self.polish_tol * scale

    def _handoff_message(self, dec: float) -> str:
        lam = math.sqrt(max(dec, 0.0))
        return (
            f"handed to the next stage after a Newton step of decrement lambda^2 = {dec:.3g}: "
            f"the quadratic rate predicts (lambda / (1 - lambda))^4 = {(lam / (1 - lam)) ** 4:.3g} "
            f"<= tol*max(1,|E|) at the full step, which the next stage verifies with this Hessian"
        )

    def _conclude(self, bound: float, stale: bool) -> bool:
        """A decrement within the tolerance: converged where the system was solved to
        its target (a Newton-CG certificate first confirmed with the exact Hessian
        where that costs little); unconverged where the Hessian is singular with a
        gradient along its null directions. Returns whether the fit ended or
        re-evaluates the point."""
        if self.solve.refusal:
            # (a handoff stage's refusal is for the stage that continues to settle: no warning)
            self._end(False, self.solve.refusal, warn=not self.handoff)
            return True
        if self.solve.exact and self.solve.cg and self.finish.curvature == "full":
            # A Newton-CG decrement: confirm it at this point with the exact Hessian.
            self.check.verify_full = True
            self._reevaluate()
            return True
        if self.solve.exact:
            self._end(True, self._decrement_message(bound, stale))
            return True
        if self.solve.flat_gradient:
            self._end(
                False,
                (
                    f"the Hessian is singular to working precision ({self.dtype}) and the "
                    f"gradient along its null directions is {self.solve.flat_gradient:.3g} in "
                    f"equilibrated units, not rounding: the objective still changes along "
                    f"nearly collinear columns, so its optimum there is not determined in "
                    f"this dtype (lambda^2 on the rest is {bound:.3g}); drop or "
                    f"combine those columns, or add an L2 penalty"
                ),
                warn=True,
            )
            return True
        return False

    def _decrement_message(self, bound: float, stale: bool) -> str:
        cert = self.solve.certificate
        if self.solve.cg and cert is not None:
            return (
                f"Newton decrement lambda^2 <= {bound:.3g} <= tol*max(1,|E|) (Newton-CG: "
                f"{cert.model:.3g} from the step, {cert.residual:.3g} bounding the residual's "
                f"r^T H^-1 r by the {cert.kind})"
            )
        what = "with the previous Hessian, bounded" if stale else "="
        return f"Newton decrement lambda^2 {what} {bound:.3g} <= tol*max(1,|E|)"

    def _watch_separation(self, s: PassSums, delta: torch.Tensor, step: float) -> bool:
        """Watch a Newton-type step for separation (:class:`~.separation.SeparationWatch`);
        three such steps in a row end the fit with a :class:`~torchglm.SeparationWarning`."""
        if not self.separation.enabled:
            return False
        if self._proven_separated(s):
            return True
        kind = self.separation.watch(s, delta, step, self.result.history)
        if kind is None:
            return False
        self._report_separation(s, delta, kind)
        return True

    # -- Newton-type directions (every solver's finish; newton, irls, newton-cg) ----
    @property
    def newton_like(self) -> bool:
        """Whether the current direction is a Newton-type step with an exact decrement."""
        return self.exact or self.finish.active

    def remove_shift(self, v: torch.Tensor) -> torch.Tensor:
        """Project out the softmax shift directions (identity for other models)."""
        return v if self.shift is None else self.shift.remove(v)

    def newton_step(self, s: PassSums, A: torch.Tensor):
        """``A delta = -g`` on the equilibrated system (:func:`.linalg.newton_direction`),
        minimum-norm along the softmax shift directions (:class:`~.shift.SoftmaxShift`);
        returns ``(delta, g^T A^-1 g)``."""
        if self.shift is not None:
            A = self.shift.regularize(A)
        own = A is s.hess  # this pass's exact Hessian (not a fixed or previous one)
        self.solve.cg, self.solve.certificate, self.solve.refusal = False, None, ""
        delta, note, flat, self.solve.rcond, hidden, n_neg = newton_direction(A, s.grad)
        # Directions singular to working precision along which the quadratic model
        # still allows a decrease above the tolerance: the decrement cannot certify the
        # optimum there (a gradient 2e-13 along a direction of curvature below the cutoff
        # 4e-15 left E 4e-10 above the optimum when judged only against 1e3 eps).
        # Below the resolution of E in this dtype no decrease can matter (nor be verified):
        # float32 rounds the gradient along an exactly null direction to 1e-8, so ``hidden``
        # reached 1e-11 > tol = 1e-12 on a dummy-variable trap.
        floor = max(self.tol, 10 * torch.finfo(self.dtype).eps)
        # ``hidden`` is the least decrease along the dropped directions (their curvature
        # may be far below the cutoff), so a small one proves nothing unless the gradient
        # there is rounding, as along a direction null in the design; one above the
        # gradient's rounding bound is the objective's own slope (Filip on the normal
        # equations: flat 7e-14 against a bound 2e-16, E 1e-9 above the optimum).
        # (Read only with dropped directions: the pass sums its d1^2 / h only then.)
        self.solve.flat_gradient = flat if flat and self._unresolved(s, flat, hidden, floor) else 0.0
        # An indefinite Hessian (a non-canonical link away from the optimum): the step
        # with its negative eigenvalues flipped descends, but g^T |H|^-1 g is no
        # decrement (the point is no minimum), so it certifies nothing. Only this pass's
        # own Hessian: a fixed float32 one is indefinite by its rounding alone.
        self.solve.exact = not self.solve.flat_gradient and not (own and n_neg and s.curvature == "full")
        if own and s.sketched:
            self.solve.exact = False  # a subsample's Hessian: a step, never a certificate
        if note is not None:
            self._note(f"Hessian {note}")
        return delta, -float(s.grad @ delta)

    @staticmethod
    def _unresolved(s: PassSums, flat: float, hidden: float, floor: float) -> bool:
        """Whether the gradient along the dropped directions (``flat``, in equilibrated
        units) is the objective's own slope: a least decrease ``hidden`` there above
        ``floor max(1, |E|)``, or ``flat`` above the gradient's rounding bound."""
        rounding = s.gradient_rounding
        sloped = rounding is not None and flat > math.sqrt(s.grad.numel()) * rounding
        return hidden > floor * max(1.0, abs(s.loss_value)) or sloped

    def cg_step(self, s: PassSums, max_cg: int | None = None):
        """Newton-CG step from Hessian-vector products (:func:`.linalg.cg_solve`). Where
        its ``-g^T x`` is small enough to certify and no exact Hessian will confirm it
        (``finish.curvature == "hvp"``), the decrement returned is the upper bound of
        :meth:`_bounded_cg` instead; not in a ``handoff`` stage, whose stop certifies
        nothing (the stage that continues in float64 bounds its own decrement: the
        bound's exact bias block costs ``n K^2`` flops, and its smaller-residual
        solves more products, for a stop of the float32 stage only)."""
        self.solve.cg = True
        self.solve.certificate, self.solve.refusal = None, ""
        scale = max(1.0, abs(s.loss_value))
        # A first-order fit's finish (preconditioned by its L-BFGS pairs) takes steps no
        # more accurate than ||r||_P^2 <= tol max(1,|E|) / 100 (superlinear forcing alone
        # asks for ever smaller residuals); a certificate asks for what it needs
        # (:meth:`_bounded_cg`). So do Newton-CG's own steps of a penalized fit certified
        # by the penalty's bound (:class:`~.certify.ResidualBound`; it tightens the
        # solve where the floor leaves too much): digits' last solve took 70 products
        # to a residual 1e-6 times the one its certificate needed, and takes 14 now.
        # An unpenalized fit's steps keep the forcing: on a Hessian singular to
        # rounding a floored solve stalls.
        floored = self.finish.active or (self.finish.curvature == "hvp" and self.model.l2 > 0)
        floor = math.sqrt(0.01 * self.tol * scale) if floored else 0.0
        precondition = self.cg_preconditioner(s) or jacobi_preconditioner(s.diag)
        # (H x of a one-step solve, for its certificate; not where the shift's removal
        # below changes x)
        known = [] if self.shift is None else None
        x, n_cg, self.solve.exact = cg_solve(
            s.hvp, s.grad, s.diag, max_iter=max_cg, precondition=precondition, floor=floor, step_product=known
        )
        x = self.remove_shift(x)
        dec = float(-(s.grad @ x))
        reach = max(self.tol, 100 * torch.finfo(self.dtype).eps) * scale
        if self.finish.curvature == "hvp" and dec <= reach and not self.handoff:
            Hx = known[0] if known else None
            x, dec, n_more = self._bounded_cg(s, x, max_cg, precondition, scale, Hx)
            n_cg += n_more
        self.result.extra.cg_iterations = (self.result.extra.cg_iterations or []) + [n_cg]
        return x, dec

    def _bounded_cg(self, s: PassSums, x: torch.Tensor, max_cg, precondition, scale: float, Hx=None):
        """The CG step's decrement bounded from above (:class:`~.certify.ResidualBound`):
        ``lambda^2 <= -2 m(x) + bound(r^T H^+ r)``. Where the bound alone keeps it above
        the tolerance, CG continues from ``x`` to the smaller residual the bound asks for
        (:meth:`~.certify.ResidualBound.target`), up to :data:`~.certify.TIGHTEN_MAX` times. A step whose
        own part is within the tolerance but whose bound is not (or has none) sets
        ``solve.refusal``: the fit ends unconverged on it. Returns ``(step, decrement
        to test, Hessian-vector products taken)``; ``Hx``: ``x``'s product where known
        (a one-step solve's own)."""
        bound = ResidualBound(s, self.shift, self.model.l2, precondition)
        cert = bound.certificate(x, Hx)
        products, allowed = cert.products, self.tol * scale
        pre = bound.cg_precondition()
        # Below this the residual H x + g is rounding (relative to the gradient's size).
        least = 100 * torch.finfo(self.dtype).eps * math.sqrt(max(float(s.grad @ pre(s.grad)), 0.0))
        while (
            cert.model <= allowed < cert.bound and math.isfinite(cert.bound) and cert.tightened < TIGHTEN_MAX
        ):
            target = bound.target(cert, allowed - cert.model)
            if target < least:
                break
            x, n, met = cg_solve(
                s.hvp,
                s.grad,
                s.diag,
                max_iter=max_cg,
                precondition=pre,
                target=target,
                start=(cert.step, cert.product),
            )
            tightened = cert.tightened + 1
            cert = bound.certificate(self.remove_shift(x))
            cert.tightened, products = tightened, products + n + cert.products
            if not met:
                break
        self.solve.certificate = cert
        if cert.model <= allowed < cert.bound and not self._step_before_refusing(cert):
            self.solve.refusal = self._refusal(bound, cert)
        if self.solve.refusal or not math.isfinite(cert.bound):
            # No certificate from this step: its own part only steers the fit on.
            self.solve.exact = False
            return cert.step, cert.model, products
        self.solve.exact = True  # the bound holds for any x, met target or not
        return cert.step, cert.bound, products

    def _step_before_refusing(self, cert: CGCertificate) -> bool:
        """Whether a finite bound still too loose after its smaller-residual solves is
        stepped from instead of refused: at the first point of a first-order fit's
        finish (the first-order phase's stop, or the point a float32 stage handed to the
        float64 polish). There the step's own part can sit just under the tolerance
        with no room left for the residual's bound (a float32 L-BFGS stage of a sparse
        softmax, K = 5, handed over ``-2 m(x)`` = 2.4e-13 against 1e-12, and the
        penalty's bound stayed at 9.8e-13 after three solves); one Newton-CG step, whose
        line search decides, lands where the bound has the whole tolerance. The
        decrement tested there is the bound (above the tolerance: no certificate here),
        and a bound still too loose at a later point refuses."""
        return math.isfinite(cert.bound) and self.finish.active and self.finish.steps(self.result.n_iter) == 0

    def _refusal(self, bound: ResidualBound, cert: CGCertificate) -> str:
        """Why a CG step's small decrement cannot certify, and what would."""
        if bound.kind is None:
            why = bound.why
        else:
            why = (
                f"its bound on the CG residual's share r^T H^-1 r ({bound.kind}) is "
                f"{cert.residual:.3g} after {cert.tightened} smaller-residual CG solve(s)"
            )
        p = self.theta.numel()
        remedy = "a larger L2 penalty" if self.model.l2 > 0 else "an L2 penalty (l2 > 0)"
        return (
            f"Newton-CG cannot certify the optimum: the step's decrement {cert.model:.3g} is "
            f"within tol*max(1,|E|), but {why}; {remedy} bounds that share, or "
            f"solver='newton' gives the exact decrement where the {p} x {p} Hessian fits in memory"
        )

    def cg_preconditioner(self, s: PassSums):
        """``v -> P v`` for Newton-CG, or ``None`` for Jacobi's ``diag(H)^{-1}``."""
        return None

    # -- finish (the Newton-type steps of a first-order fit) --------------------------
    def finish_direction(self, s: PassSums):
        """The Newton-type step of the finishing phase (exact Hessian or Newton-CG)."""
        if s.hess is not None:
            return self.newton_step(s, s.hess)
        return self.cg_step(s)

    def _begin_finish(self, reason: str, s: PassSums | None = None) -> None:
        """Switch to Newton-type steps, re-evaluating the accepted point with curvature
        (at once from ``s`` when its pass already summed that curvature)."""
        self.finish.begin(self.result.n_iter)
        self.result.extra.first_order_stop = reason
        self.separation.reset()
        if s is not None and s.curvature == self.finish.curvature:
            return self._accept(s, 0.0)
        return self._reevaluate()

    def _reevaluate(self) -> None:
        """Make the next pass evaluate the accepted point again (with the curvature
        :meth:`pass_curvature` then asks for), not a trial step."""
        self.reevaluate = True
        self.theta = self.base_theta

    # -- line search ----------------------------------------------------------------
    def _trial(self, s: PassSums, ok: bool) -> None:
        """A trial point's pass: accept it or reject it (:class:`~.line_search.LineSearch`)."""
        fixed_step = not self.line_search and not self.finish.active
        if self.search.accepts(s, self.base, ok, fixed_step, self.dtype):
            self._accept(s, self.search.t)
        else:
            self._reject(s)

    def _reject(self, s: PassSums) -> None:
        self.check.light = False  # the quadratic prediction was for the full step
        f0 = self.base.loss_value
        stalled = self.search.reject(s, f0, self.dtype, self.newton_like and self.decrement is not None)
        if stalled and not self.newton_like:
            if self.redirect():
                return None
            return self._begin_finish("line search stalled below the rounding of E")
        if stalled and self.solve.cg and self.finish.curvature == "full" and not self.finish.active:
            # A CG direction's predicted decrease bounds nothing along a nearly flat
            # direction that CG missed (columns equal up to 1e-8: Newton-CG claimed
            # working precision 5.7e-9 above the optimum): finish with exact Newton steps
            # from the accepted point, whose decrement either certifies it, steps on, or
            # finds the optimum not determined in this dtype. For good: going back to CG
            # steps after one exact one wandered by an ulp of E until max_iter.
            return self._begin_finish("Newton-CG line search stalled below the rounding of E")
        if (stalled or self.search.exhausted) and self.base.sketched:
            # Along a sketched Hessian's direction: judge this point with its exact one.
            self.sketch.exact_next = True
            return self._reevaluate()
        if stalled:
            return self._stalled(f0)
        if self.search.exhausted:
            if self.separation.at_boundary(self.base) and self.newton_like:
                return self._report_separation(self.base, self.delta, "quasi-complete")
            why = "eta left the link's domain" if s.n_invalid else "no sufficient decrease"
            return self._end(
                False, f"line search failed after {self.search.max_halvings} halvings ({why})", warn=True
            )
        self.search.halve()
        self.theta = self.base_theta + self.search.t * self.delta

    def _stalled(self, f0: float) -> None:
        """The predicted decrease is below the rounding of E: no step can be verified
        (at once for Newton-type steps, whose full step predicts it; first-order
        steps first get a few halvings). That says the point is optimal only where
        the full step's predicted decrease lambda^2 (the estimate of E - E*) is
        itself at the resolution of E, ~100 eps |E| (as for the model's agreement,
        :meth:`~.certify.DecrementTest.agrees`): a step predicting more that no halving
        down to rounding could take is a quadratic model that fails here, not an optimum."""
        dec = self.decrement
        resolution = max(self.tol, 100 * torch.finfo(self.dtype).eps) * max(1.0, abs(f0))
        at_boundary = self.separation.at_boundary(self.base)
        if self.solve.refusal and self.newton_like and not at_boundary:
            return self._end(False, self.solve.refusal, warn=not self.handoff)
        if not (self.newton_like and dec is not None and 0 <= dec <= resolution):
            why = "none (not a Newton-type direction)" if dec is None else f"{dec:.3g}"
            if at_boundary:
                return self._report_separation(self.base, self.delta, "quasi-complete")
            return self._end(
                False,
                f"the line search stalled below the rounding of E with a predicted "
                f"decrease lambda^2 = {why} above it: not verified",
                warn=True,
            )
        if at_boundary and self.separation.streak > 0:
            # Samples on the boundary, and the last full Newton step kept the length
            # and direction of the one before: a separating direction whose further
            # decrease of E is below its rounding, not an optimum.
            return self._report_separation(self.base, self.delta, "quasi-complete")
        if self._proven_separated(self.base):
            return None
        grad_norm = float(self.base.grad.abs().max())
        return self._end(
            True,
            f"converged to working precision ({self.dtype}): predicted "
            f"decrease below rounding, gradient norm {grad_norm:.3g}",
        )

    # -- the end of the fit ---------------------------------------------------------
    def write_accepted(self) -> None:
        """The accepted point into the model, where an accepted step left it unwritten
        (``write_each_step`` off) and the fit's end (:meth:`_end`) did not write it: the
        passes ended by an exception or an interrupt (:class:`~torchglm.passes.Fitter`)."""
        if self._unwritten:
            set_flat_parameters(self.model, self.base_theta)
            self._unwritten = False

    def stop(self, message: str) -> None:
        """End the fit now (e.g. a Trainer's epoch limit): not converged, with a warning."""
        if not self.done:
            self._end(False, message, warn=True)

    def _note(self, text: str) -> None:
        # A stage with a TF32/bf16 Hessian notes its safeguards without a warning: an
        # indefinite or singular Hessian there is that rounding's, and the stage that
        # continues decides with exact Hessians (and warns about them).
        if text not in self.notes and self.hessian_precision == "highest":
            _warn(f"{self.name}: {text}", NumericalWarning)
        self.notes[text] = self.notes.get(text, 0) + 1

    def _proven_separated(self, s: PassSums) -> bool:
        """Samples on the boundary, where the point's own coefficients separate every
        sample strictly (``s.completely_separated``): no optimum exists, whatever a
        decrement says (E - inf E -> 0 along them), and further steps only run off
        along them (amplifying rounding: the Hessian's curvature there vanishes), so
        the fit ends unconverged, naming them. Returns whether it did."""
        if not (self.separation.at_boundary(s) and s.completely_separated):
            return False
        self._report_separation(s, self.remove_shift(s.theta.detach()), "perfect")
        return True

    def _report_separation(self, s: PassSums, delta: torch.Tensor, kind: str) -> None:
        """End the fit unconverged with a :class:`~torchglm.SeparationWarning` naming the
        coefficients that diverge (:func:`~.separation.separation_report`)."""
        msg, info = separation_report(self.model, s, delta, kind)
        self.result.extra.separation = info
        _warn(msg, SeparationWarning)
        self._end(False, msg)

    def _end(self, converged: bool, message: str, warn: bool = False, hand_off: bool = False) -> None:
        """End the fit: the model at the accepted point (a ``handoff`` stage's one
        Newton-type step further where it converged or, ``hand_off``, leaves the verifying
        pass to the next stage: :meth:`_polish_verifies`), the result's verdict and final sums."""
        self.done = True
        r = self.result
        r.converged, r.message = converged, message
        base = self.base
        if base is not None:
            step = (
                (converged or hand_off)
                and self.handoff
                and self.newton_like
                and self.solve.exact
                and self.delta is not None
            )
            set_flat_parameters(self.model, self.base_theta + self.delta if step else self.base_theta)
            self._unwritten = False
            # After a light verifying pass: the Hessian of the previous point.
            # (Never a sketched one: an estimate, not the point's Hessian.)
            hess = None if base.sketched else base.hess
            hess = hess if hess is not None else (self.check.light_hess if converged else None)
            r.extra.update(
                loss=base.loss_value,
                grad=base.grad.detach(),
                hessian=None if hess is None else hess.detach(),
            )
        r.extra.update(passes=self.n_passes, dtype=str(self.dtype), numerical_warnings=dict(self.notes))
        if self.solve.cg and self.solve.certificate is not None:
            r.extra.cg_certificate = self.solve.certificate.report()
        if self.finish.active:
            r.extra.finish_steps = self.finish.steps(r.n_iter)
            r.message = (
                f"{r.extra.first_order_stop}; then {r.extra.finish_steps} Newton-type step(s): {message}"
            )
        if warn:
            _warn(f"{self.name}: {message}", ConvergenceWarning)
