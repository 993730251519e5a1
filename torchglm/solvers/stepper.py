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
   little (truncated CG can miss a nearly flat direction); a Hessian singular to working
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
:meth:`StepFitter._check_separation`); a first-order phase ends as soon as a sample
reaches that boundary, so that the Newton-type finish decides.
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
from .._validation import warn as _warn  # (_finish has a `warn` flag)
from ..passes import all_reduce_sum
from .base import FitResult, Fitter
from .layout import flat_parameters, hessian_cost, parameter_names, set_flat_parameters
from .pass_sums import PassSums
from .products import HESSIAN_PRECISIONS
from .sparse_rows import SparseRows
from .linalg import cg_solve, newton_direction, shift_null_projector

__all__ = ["FINISH_MAX_STEPS", "NEWTON_MAX_COST", "StepFitter"]

#: Up to this many Hessian entries per sample (``d~ K (K + 1) / 2``) exact Newton steps
#: are the cheaper way to a verified optimum: ``auto`` picks Newton, and a first-order
#: fit finishes with the exact Hessian (Newton-CG above it). Measured on two cores
#: (bench/newton.py, docs/solvers.md): at d~ = 51, 200k rows, a Hessian pass costs 72 ms,
#: a gradient pass 21 ms, and float32 Newton + polish (0.287 s) beat L-BFGS with its
#: verifying Hessian pass (0.315 s); at d~ = 501 L-BFGS with a Newton-CG finish wins 3x.
NEWTON_MAX_COST = 128
#: The message of a start with no finite loss, gradient or curvature (not a domain problem).
_NO_USABLE_START = (
    "the starting point gives eta outside the link's domain, or a loss or derivatives "
    "that are not finite in this dtype (rescale the features)"
)
#: Newton-type steps a first-order fit may take to finish after its own rule stopped.
FINISH_MAX_STEPS = 100


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
            step and a second pass for ``lambda^2`` just above its tolerance.
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
            singular rounded Hessian) are counted in ``extra["numerical_warnings"]``
            without a warning.
    """

    name = ""
    curvature: str | None = None
    default_max_iter = 100
    #: whether :meth:`direction` is a Newton-type step with an exact decrement
    #: (otherwise the fit finishes with Newton-type steps; module docstring).
    exact = False
    #: ``False``: accept every trial that stays in the link's domain (a fixed step).
    line_search = True

    def __init__(
        self,
        model,
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
        self.model = model
        self.max_iter, self.tol, self.gtol = max_iter, tol, gtol
        self.armijo, self.max_halvings = armijo, max_halvings
        self.dtype = self.compute_dtype(model, dtype)
        # Every family whose targets can sit on the boundary of the mean space
        # (``Family.separable``: a probability 0 or 1, a count's mean 0).
        self.detect_separation = detect_separation and model.l2 == 0 and model.family.separable
        self.saturation = saturation
        self.handoff = handoff
        self.hessian_precision = hessian_precision
        # Sparse batches' transposed CSR, kept across passes (sparse_rows.SparseRows).
        self.sparse_cache: dict = {}
        self.theta = flat_parameters(model, self.dtype).to(model.param_device)
        self.result = FitResult(solver=self.name)
        self.done = False
        self.n_passes = 0
        self.base: PassSums | None = None
        self.base_theta: torch.Tensor | None = None
        self.delta: torch.Tensor | None = None
        self.decrement: float | None = None
        self.t = 1.0
        self.slope = 0.0
        self.n_rejected = 0
        self.restarted = False
        self.notes: dict[str, int] = {}
        self.sep_streak = 0
        self.prev_delta: torch.Tensor | None = None
        self.finishing = False
        self.finish_curvature = "full" if hessian_cost(model) <= NEWTON_MAX_COST else "hvp"
        self.finish_from = 0
        self.reevaluate = False
        #: whether the last Newton-type direction solved its system to its target.
        self.solve_exact = True
        #: the equilibrated gradient along directions dropped as singular (0: none).
        self.flat_gradient = 0.0
        #: reciprocal condition of the last equilibrated Hessian (1 before any).
        self.rcond = 1.0
        #: whether the last Newton-type step's decrease matched its quadratic model.
        self.model_agrees = True
        #: whether the last Newton-type direction came from CG (Hessian-vector products).
        self.cg_direction = False
        # A CG decrement that passed the test is confirmed with the exact Hessian where
        # that costs little (``hessian_cost <= NEWTON_MAX_COST``): truncated CG misses
        # the flat directions of an ill-conditioned Hessian (nearly collinear columns).
        self.verify_full = False
        # The light verifying pass (see ``_accept``): the next pass sums only E and g,
        # and its decrement is taken with the last Hessian ``light_hess``.
        self.light = False
        self.light_hess: torch.Tensor | None = None
        self.light_lambda = 0.0
        # The softmax shift directions of unpenalized columns (see ``newton_step``).
        m, d = model.n_outputs, model.n_features
        has_bias = model.has_intercept
        self.shift_columns = None
        if model.family.multi_output:
            cols = torch.full((d + has_bias,), model.l2 == 0, dtype=torch.bool)
            if has_bias:
                cols[-1] = True
            if bool(cols.any()):
                self.shift_columns = cols
                self.N = shift_null_projector(
                    m, d, has_bias, cols, dtype=self.dtype, device=self.theta.device
                )
                # Column j (d for the bias) of each flat parameter (k, j).
                col = torch.arange(m * d, device=self.theta.device) % d
                self.N_col = torch.cat(
                    [col, torch.full((m if has_bias else 0,), d, device=self.theta.device)]
                )
                self.N_count = torch.bincount(self.N_col, minlength=d + 1).to(self.dtype)
        # From the all-zero start (the model's initialization), the first pass reads
        # only the targets and weights (not the features), and the fit starts from the intercept-only
        # model b = g(ybar) instead (as R's glm and statsmodels do): from 0, counts of
        # 1e15 need steps of exp(35) that no line search can take.
        self.start_pending = has_bias and not model.family.multi_output and not bool(self.theta.any())
        # The data-based start (``_data_start``): pending while its pass runs, tried once.
        self.data_start: DataStart | None = None
        self.data_start_tried = False

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
            self.start_pending = self.start_pending and not bool(self.theta.any())

    # -- the pass hooks -------------------------------------------------------
    def pass_curvature(self) -> str | None:
        """What the next pass accumulates."""
        if self.start_pending or self.light:
            return None
        if self.verify_full:
            return "full"
        if self.finishing:
            return self.finish_curvature
        if not self.exact and self.finish_curvature == "hvp" and self._first_order_stop_predicted():
            # The first-order phase is about to stop: sum the finish's curvature on
            # its next pass (a diagonal and kept per-sample curvature, about half a
            # pass more), so the finish needs no separate pass to re-evaluate the point.
            return "hvp"
        return self.curvature

    def _first_order_stop_predicted(self) -> bool:
        """Whether the next accepted first-order step is predicted to meet the
        decrement rule: the last decrement times the larger of the last two ratios
        of successive decrements (one ratio after a sudden drop is optimistic: a
        wrong prefetch costs half a pass, a missed one a pass)."""
        hist = [h["newton_decrement"] ** 2 for h in self.result.history[-3:]]
        if len(hist) < 2 or not all(math.isfinite(v) and v > 0 for v in hist):
            return False
        ratio = max(b / a for a, b in zip(hist, hist[1:]))
        predicted = hist[-1] * min(ratio, 1.0)
        return predicted / 2 <= self.tol * max(1.0, abs(self.result.history[-1]["loss"]))

    def start_pass(self) -> None:
        if self.sparse_cache:
            SparseRows.evict_unseen(self.sparse_cache)
        if self.data_start is not None:
            return  # this pass sums the data start's weighted least squares
        self.sums = PassSums(
            self.model,
            self.theta,
            self.pass_curvature(),
            self.saturation if self.detect_separation else 0.0,
            y_sum=self.base is None,
            targets_only=self.start_pending,
            sparse_cache=self.sparse_cache,
            hessian_precision=self.hessian_precision,
        )

    def accumulate(self, batch) -> None:
        if self.data_start is not None:
            self.data_start.add(batch)
        else:
            self.sums.add(batch)

    def end_pass(self) -> bool:
        if self.done:
            return True
        if self.data_start is not None:
            self.n_passes += 1
            theta, self.data_start = self.data_start.solve(), None
            if theta is None:
                self._no_valid_start()
            else:
                self.theta = theta.to(self.theta.device)
                self.result.extra["start"] = "weighted least squares from the data (mu0 from y)"
            return self.done
        s = self.sums.finish()
        self.n_passes += 1
        loss = float(s.loss)
        ok = s.n_invalid == 0 and math.isfinite(loss)
        if self.start_pending:
            # The start pass read only the targets: evaluate the (new) start next.
            self.start_pending = False
            if self._targets_on_boundary(s):
                return True
            self._intercept_start(s)
            return False
        if self.base is None:
            if s.y_sum.dim() == 1:
                # The weight of every declared class (the first pass sums them): a class
                # without samples has no finite estimate (its intercept runs to -inf),
                # the rule of the data gate (``check_classes``) for data no gate saw.
                check_class_weights("y", s.y_sum)
            if ok:
                self._accept(s, 0.0)
            else:
                self._restart_or_fail(s)
            return self.done
        if self.reevaluate:
            # The first pass of the Newton-type finish: same point, exact curvature.
            self.reevaluate = False
            self._accept(s, 0.0)
            return self.done
        f0 = float(self.base.loss)
        fixed_step = not self.line_search and not self.finishing
        if ok and (fixed_step or loss <= f0 + self.armijo * self.t * self.slope):
            self._accept(s, self.t)
        elif (
            ok
            and loss <= f0 + 8 * torch.finfo(self.dtype).eps * max(1.0, abs(f0))
            and float(s.grad.norm()) < float(self.base.grad.norm())
        ):
            # E changes below its rounding: accept when the gradient shrank instead.
            self._accept(s, self.t)
        else:
            self._reject(s)
        return self.done

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
        self.slope = float(self.base.grad @ delta)
        self.n_rejected = 0
        self.t = self.initial_step()
        self.theta = self.base_theta + self.t * self.delta

    # -- steps ------------------------------------------------------------------
    def _accept(self, s: PassSums, step: float) -> None:
        self.on_accept(s, step)
        # Did the step just taken decrease E as its quadratic model predicted
        # (lambda^2 (t - t^2/2) for a Newton-type step)? Where it did not (a nearly flat,
        # strongly curved direction), lambda^2 does not bound E - E* yet: no convergence.
        self.model_agrees = True
        if step > 0 and self.newton_like and self.base is not None:
            predicted = -self.slope * (step - step * step / 2)
            actual = float(self.base.loss) - float(s.loss)
            rounding = 100 * torch.finfo(self.dtype).eps * max(1.0, abs(float(s.loss)))
            self.model_agrees = predicted <= rounding or 0.5 <= actual / predicted <= 2.0
        self.base, self.base_theta = s, self.theta
        set_flat_parameters(self.model, self.theta)
        if step > 0:
            self.result.n_iter += 1
        self.n_rejected = 0
        grad_norm = float(s.grad.abs().max()) if s.grad.numel() else 0.0
        stale = self.light
        self.light = False
        verifying, self.verify_full = self.verify_full, False
        if stale:
            delta, dec = self.newton_step(s, self.light_hess)
        elif verifying:
            delta, dec = self.newton_step(s, s.hess)
        else:
            delta, dec = self.finish_direction(s) if self.finishing else self.direction(s)
        self.delta, self.decrement = delta, dec
        loss = float(s.loss)
        self.result.history.append(
            {
                "iteration": self.result.n_iter,
                "loss": loss,
                "grad_norm": grad_norm,
                "newton_decrement": math.nan if dec is None else math.sqrt(max(dec, 0.0)),
                "step_size": step,
                "passes": self.n_passes,
            }
        )
        scale = max(1.0, abs(loss))
        # Samples whose fitted mean is numerically on the boundary where their target
        # sits (Family.separable): a finite optimum, or separation.
        at_boundary = self.detect_separation and s.n_saturated > 0
        if not self.newton_like:
            # A first-order rule (not scale-invariant): end this phase, finish with
            # Newton-type steps that verify the optimum.
            if at_boundary and step > 0:
                # First-order steps cannot tell separation from a finite optimum (their
                # steps shrink either way); Newton's can (they shrink quadratically to a
                # finite optimum and keep their length along a separating direction,
                # :meth:`_check_separation`). The finish watches them from here, before
                # the first-order phase drives the boundary samples' curvature to 0
                # (there truncated CG returned a step predicting a decrease of 9e-5 on
                # E = 3e-11, which no line search could take).
                return self._begin_finish(
                    f"{s.n_saturated} samples at the boundary of the mean space (separation?)", s
                )
            if grad_norm <= self.gtol:
                return self._begin_finish(f"gradient norm {grad_norm:.3g} <= gtol {self.gtol:g}", s)
            if dec is not None and dec / 2 <= self.tol * scale:
                return self._begin_finish(f"quasi-Newton decrement {dec / 2:.3g} <= tol*max(1,|E|)", s)
        else:
            # Only the decrement certifies E - E* (a small gradient does not, along a
            # nearly flat direction); a truncated CG solve underestimates it, so it
            # counts only when CG met its residual target.
            # A light pass's decrement uses the previous Hessian H0: after a step of
            # H0-length lambda0, H >= (1 - lambda0)^2 H0 (self-concordance; Boyd &
            # Vandenberghe 9.6), so g^T H^-1 g <= g^T H0^-1 g / (1 - lambda0)^2.
            bound = dec / (1 - self.light_lambda) ** 2 if stale and dec is not None else dec
            if bound is not None and not (math.isfinite(bound) and bound >= 0):
                # g^T A^-1 g < 0 or not finite: A is not positive definite on the step's
                # subspace in this arithmetic (CG on a Hessian singular to rounding), so
                # the value is no decrement and certifies nothing; the step is not Newton's.
                self._note(f"the Newton-type system gave a decrement {bound:.3g} (not a descent direction)")
                self.solve_exact = False
            certified = (
                bound is not None
                and math.isfinite(bound)
                and 0 <= bound <= self.tol * scale
                and self.model_agrees
            )
            had_step = self.prev_delta is not None
            if not stale and self.detect_separation and self._check_separation(s, delta, step):
                return None
            if certified and at_boundary and (stale or not had_step or self.sep_streak > 0):
                # With samples on the boundary, a small decrement is also what a
                # separating direction shows (E - inf E -> 0 while the coefficients run
                # off): it certifies only after a Newton step that did not keep the
                # length and direction of the one before (the separation watch then
                # either ends the fit or lets the next pass certify).
                certified = False
            if certified and self.solve_exact and self.cg_direction and self.finish_curvature == "full":
                # A Newton-CG decrement: confirm it at this point with the exact Hessian.
                self.verify_full = True
                return self._reevaluate()
            if certified and self.solve_exact:
                what = "with the previous Hessian, bounded" if stale else "="
                return self._finish(True, f"Newton decrement lambda^2 {what} {bound:.3g} <= tol*max(1,|E|)")
            if certified and self.flat_gradient:
                return self._finish(
                    False,
                    (
                        f"the Hessian is singular to working precision ({self.dtype}) and the "
                        f"gradient along its null directions is {self.flat_gradient:.3g} in "
                        f"equilibrated units, not rounding: the objective still changes along "
                        f"nearly collinear columns, so its optimum there is not determined in "
                        f"this dtype (lambda^2 on the rest is {bound:.3g}); drop or "
                        f"combine those columns, or add an L2 penalty"
                    ),
                    warn=True,
                )
            if stale:
                # Not verified (or the step's decrease was not the predicted one):
                # evaluate this point again with its own curvature.
                return self._reevaluate()
            if (
                s.hess is not None
                and dec is not None
                and self.solve_exact
                and not (self.detect_separation and s.n_saturated)
            ):
                # Newton converges quadratically: once the decrement predicted after a
                # full step, (lambda / (1 - lambda))^4, is below the tolerance, the
                # next pass sums only E and g (a Hessian pass costs d~ K (K+1) / 2 of
                # them) and verifies with this Hessian; a miss costs one more pass. Not
                # with saturated samples: a separation needs its full steps watched.
                # Only for a well-conditioned Hessian: along a nearly flat direction
                # the Hessian changes a lot relative to its small eigenvalue (the
                # self-concordance constant grows with the condition number).
                lam = math.sqrt(max(dec, 0.0))
                if (
                    lam <= 0.25
                    and (lam / (1 - lam)) ** 4 <= self.tol * scale
                    and self.rcond >= math.sqrt(torch.finfo(self.dtype).eps)
                ):
                    self.light, self.light_hess, self.light_lambda = True, s.hess, lam
        if self.finishing:
            if self.result.n_iter - self.finish_from >= FINISH_MAX_STEPS:
                return self._finish(
                    False,
                    f"{FINISH_MAX_STEPS} Newton-type finishing steps did not meet the decrement test",
                    warn=True,
                )
        elif self.result.n_iter >= self.max_iter:
            return self._finish(
                False, f"max_iter={self.max_iter} reached (gradient norm {grad_norm:.3g})", warn=True
            )
        self.slope = float(s.grad @ delta)
        if not self.slope < 0:
            # Not a descent direction (rounding in a near-singular model): fall back to -g.
            self._note("the search direction was not a descent direction; used -gradient")
            # -g's slope says nothing about E - E*: no decrement for the stall rule.
            self.delta, self.decrement, self.solve_exact = -s.grad, None, False
            self.slope = -float(s.grad @ s.grad)
        self.t = 1.0 if self.finishing else self.initial_step()
        self.theta = self.base_theta + self.t * self.delta

    # -- Newton-type directions (every solver's finish; newton, irls, newton-cg) ----
    @property
    def newton_like(self) -> bool:
        """Whether the current direction is a Newton-type step with an exact decrement."""
        return self.exact or self.finishing

    def remove_shift(self, v: torch.Tensor) -> torch.Tensor:
        """Project out the softmax shift directions (identity for other models)."""
        return v if self.shift_columns is None else v - self.N @ v

    def newton_step(self, s: PassSums, A: torch.Tensor):
        """``A delta = -g`` on the equilibrated system (:func:`.linalg.newton_direction`),
        minimum-norm along the softmax shift directions; returns ``(delta, g^T A^-1 g)``."""
        if self.shift_columns is not None:
            # N = sum_j u_j u_j^T over the shift directions u_j (one per column j):
            # A + sum_j c_j u_j u_j^T has A's step on their orthogonal complement. c_j is
            # the mean curvature of column j's entries, so the added block has that
            # column's scale (a column scaled by 1e8 must not swamp the others).
            h = A.diagonal().abs()
            c = torch.zeros_like(self.N_count).index_add(0, self.N_col, h) / self.N_count
            A = A + self.N * c[self.N_col].unsqueeze(1)
        own = A is s.hess  # this pass's exact Hessian (not a fixed or previous one)
        self.cg_direction = False
        delta, note, flat, self.rcond, hidden, n_neg = newton_direction(A, s.grad)
        # Directions singular to working precision along which the quadratic model
        # still allows a decrease above the tolerance: the decrement cannot certify the
        # optimum there (a gradient 2e-13 along a direction of curvature below the cutoff
        # 4e-15 left E 4e-10 above the optimum when judged only against 1e3 eps).
        # Below the resolution of E in this dtype no decrease can matter (nor be verified):
        # float32 rounds the gradient along an exactly null direction to 1e-8, so ``hidden``
        # reached 1e-11 > tol = 1e-12 on a dummy-variable trap.
        floor = max(self.tol, 10 * torch.finfo(self.dtype).eps)
        self.flat_gradient = flat if hidden > floor * max(1.0, abs(float(s.loss))) else 0.0
        # An indefinite Hessian (a non-canonical link away from the optimum): the step
        # with its negative eigenvalues flipped descends, but g^T |H|^-1 g is no
        # decrement (the point is no minimum), so it certifies nothing. Only this pass's
        # own Hessian: a fixed float32 one is indefinite by its rounding alone.
        self.solve_exact = not self.flat_gradient and not (own and n_neg and s.curvature == "full")
        if note is not None:
            self._note(f"Hessian {note}")
        return delta, float(-(s.grad @ delta))

    def cg_step(self, s: PassSums, max_cg: int | None = None):
        """Newton-CG step from Hessian-vector products (:func:`.linalg.cg_solve`)."""
        self.cg_direction = True
        # A first-order fit's finish (preconditioned by its L-BFGS pairs) solves no
        # more accurately than the decrement test can see: ||r||_P^2 <= tol max(1,|E|) / 100
        # (the decrement's error r^T H^-1 r where the preconditioned curvature is O(1));
        # superlinear forcing alone asks for ever smaller residuals. Newton-CG's own
        # steps keep the forcing: on an ill-conditioned Hessian a floored solve stalls.
        floor = math.sqrt(0.01 * self.tol * max(1.0, abs(float(s.loss)))) if self.finishing else 0.0
        x, n_cg, self.solve_exact = cg_solve(
            s.hvp, s.grad, s.diag, max_iter=max_cg, precondition=self.cg_preconditioner(s), floor=floor
        )
        self.result.extra.setdefault("cg_iterations", []).append(n_cg)
        x = self.remove_shift(x)
        return x, float(-(s.grad @ x))

    def cg_preconditioner(self, s: PassSums):
        """``v -> P v`` for Newton-CG, or ``None`` for Jacobi's ``diag(H)^{-1}``."""
        return None

    def finish_direction(self, s: PassSums):
        """The Newton-type step of the finishing phase (exact Hessian or Newton-CG)."""
        if s.hess is not None:
            return self.newton_step(s, s.hess)
        return self.cg_step(s)

    def _begin_finish(self, reason: str, s: PassSums | None = None) -> None:
        """Switch to Newton-type steps, re-evaluating the accepted point with curvature
        (at once from ``s`` when its pass already summed that curvature)."""
        self.finishing = True
        self.finish_from = self.result.n_iter
        self.result.extra["first_order_stop"] = reason
        self.prev_delta = None
        self.sep_streak = 0
        if s is not None and s.curvature == self.finish_curvature:
            return self._accept(s, 0.0)
        return self._reevaluate()

    def _reevaluate(self) -> None:
        """Make the next pass evaluate the accepted point again (with the curvature
        :meth:`pass_curvature` then asks for), not a trial step."""
        self.reevaluate = True
        self.theta = self.base_theta

    def _reject(self, s: PassSums) -> None:
        self.n_rejected += 1
        self.light = False  # the quadratic prediction was for the full step
        f0 = float(self.base.loss)
        rounding = 10 * torch.finfo(self.dtype).eps * max(1.0, abs(f0))
        stalled = (
            s.n_invalid == 0
            and -self.t * self.slope <= rounding
            and ((self.newton_like and self.decrement is not None) or self.n_rejected >= 5)
        )
        if stalled and not self.newton_like:
            if self.redirect():
                return None
            return self._begin_finish("line search stalled below the rounding of E")
        if stalled and self.cg_direction and self.finish_curvature == "full" and not self.finishing:
            # A CG direction's predicted decrease bounds nothing along a nearly flat
            # direction that CG missed (columns equal up to 1e-8: Newton-CG claimed
            # working precision 5.7e-9 above the optimum): finish with exact Newton steps
            # from the accepted point, whose decrement either certifies it, steps on, or
            # finds the optimum not determined in this dtype. For good: going back to CG
            # steps after one exact one wandered by an ulp of E until max_iter.
            return self._begin_finish("Newton-CG line search stalled below the rounding of E")
        if stalled:
            # The predicted decrease is below the rounding of E: no step can be verified
            # (at once for Newton-type steps, whose full step predicts it; first-order
            # steps first get a few halvings). That says the point is optimal only where
            # the full step's predicted decrease lambda^2 (the estimate of E - E*) is
            # itself at the resolution of E, ~100 eps |E| (as for the model's agreement
            # in ``_accept``): a step predicting more that no halving down to rounding
            # could take is a quadratic model that fails here, not an optimum.
            dec = self.decrement
            resolution = max(self.tol, 100 * torch.finfo(self.dtype).eps) * max(1.0, abs(f0))
            if not (self.newton_like and dec is not None and 0 <= dec <= resolution):
                why = "none (not a Newton-type direction)" if dec is None else f"{dec:.3g}"
                if self.detect_separation and self.base.n_saturated:
                    return self._report_separation(self.base, self.delta, "quasi-complete")
                return self._finish(
                    False,
                    f"the line search stalled below the rounding of E with a predicted "
                    f"decrease lambda^2 = {why} above it: not verified",
                    warn=True,
                )
            if self.detect_separation and self.base.n_saturated and self.sep_streak > 0:
                # Samples on the boundary, and the last full Newton step kept the length
                # and direction of the one before: a separating direction whose further
                # decrease of E is below its rounding, not an optimum.
                return self._report_separation(self.base, self.delta, "quasi-complete")
            grad_norm = float(self.base.grad.abs().max())
            return self._finish(
                True,
                f"converged to working precision ({self.dtype}): predicted "
                f"decrease below rounding, gradient norm {grad_norm:.3g}",
            )
        if self.n_rejected > self.max_halvings:
            if self.detect_separation and self.base.n_saturated and self.newton_like:
                return self._report_separation(self.base, self.delta, "quasi-complete")
            why = "eta left the link's domain" if s.n_invalid else "no sufficient decrease"
            return self._finish(
                False, f"line search failed after {self.max_halvings} halvings ({why})", warn=True
            )
        self.t *= 0.5
        self.theta = self.base_theta + self.t * self.delta

    def _intercept_start(self, s: PassSums) -> bool:
        """Move the all-zero start to the intercept-only fit ``b = g(ybar)`` (weighted
        mean target; skipped with offsets, or where ``g(ybar)`` is not finite or not
        in the link's domain, e.g. a single class). Returns whether it moved."""
        if s.n_offset or not float(s.weight_sum) > 0:
            return False
        theta = self._intercept_only(s)
        b = theta[-1:]
        if not bool(torch.isfinite(b).all()) or not bool(self.model.family.valid_eta(b).all()):
            return False
        self.theta = theta
        self.result.extra["start"] = "intercept-only"
        return True

    def _targets_on_boundary(self, s: PassSums) -> bool:
        """Every target on the boundary of the mean space (the weighted mean ``ybar``
        is: all counts 0, all proportions 0 or all 1): the intercept takes every
        mean to the boundary whatever the penalty (the bias is never penalized; for
        the canonical links ``eta -> -+inf``) and the weights to 0, so no estimate
        exists. The fit ends unconverged with a
        :class:`~torchglm.SeparationWarning` naming the intercept, at the start pass,
        which reads only the targets (statsmodels refuses such data; scikit-learn
        warns and returns ``-inf``)."""
        family = self.model.family
        if not family.separable or not float(s.weight_sum) > 0:
            return False
        ybar = (s.y_sum / s.weight_sum).reshape(1)
        if bool(family.interior_mean(ybar).all()):
            return False
        names = parameter_names(self.model)
        sign = -1.0 if float(ybar[0]) <= 0 else 1.0
        msg = (
            f"every target lies on the boundary of the mean's range (weighted mean {float(ybar[0]):g}): "
            f"the likelihood rises as the intercept {names[-1]} takes every mean to that boundary, "
            "which no linear predictor in the link's domain reaches, whatever the L2 penalty (the "
            "intercept is not penalized); the maximum-likelihood estimate does not exist"
        )
        self.result.extra["separation"] = {
            "kind": "boundary",
            "n_saturated": s.n_samples,
            "n_samples": s.n_samples,
            "coefficients": {names[-1]: sign},
        }
        _warn(msg, SeparationWarning)
        self._finish(False, msg)
        return True

    def _intercept_only(self, s: PassSums) -> torch.Tensor:
        """``W = 0``, ``b = g(ybar)`` with the pass's weighted mean target."""
        theta = torch.zeros_like(self.theta)
        theta[-1] = self.model.family.link.link((s.y_sum / s.weight_sum).reshape(1))[0]
        return theta

    def _restart_or_fail(self, s: PassSums) -> None:
        """The starting point is outside the link's domain: start from the
        intercept-only fit ``b = g(mean(y))``, ``W = 0`` (once); where there is no
        intercept, or that start is outside the domain too, from the data
        (:meth:`_data_start`, once, where the start has no likelihood: not for finite
        sums that overflowed, which no other start cures); else fail saying so."""
        model = self.model
        if model.family.multi_output:
            return self._finish(False, _NO_USABLE_START, warn=True)
        if not self.restarted and model.has_intercept:
            self.restarted = True
            self.theta = self._intercept_only(s)
            self.result.extra["start"] = "intercept-only (the given start was outside the link's domain)"
            return None
        if not self.data_start_tried and s.no_likelihood and float(s.weight_sum) > 0:
            return self._data_start(s)  # a domain problem (not an overflow): start from the data
        if self.data_start_tried:
            return self._no_valid_start()
        return self._finish(False, _NO_USABLE_START, warn=True)

    def _data_start(self, s: PassSums) -> None:
        """Start from the data, as R's ``glm`` and statsmodels do: the next pass sums one
        weighted least-squares problem of IRLS at ``mu0`` from the targets
        (:class:`DataStart`), whose solution is the start. Only where the given (zero)
        start and the intercept-only one are outside the link's domain: it costs a pass
        over the features."""
        self.data_start_tried = True
        ybar = s.y_sum / s.weight_sum
        self.data_start = DataStart(self.model, float(ybar), self.dtype, self.theta.device)

    def _no_valid_start(self) -> None:
        self._finish(
            False,
            f"no starting point in the domain of the '{self.model.family.link.name}' link of the "
            f"'{self.model.family.name}' family: the start"
            + (", the intercept-only fit" if self.model.has_intercept else "")
            + " and the weighted least-squares start from the data (mu0 from y) give a mean "
            "outside the family's range (or a loss that is not finite) for some rows; give "
            "starting parameters (set the model's coefficients) whose means are all valid",
            warn=True,
        )

    def stop(self, message: str) -> None:
        """End the fit now (e.g. a Trainer's epoch limit): not converged, with a warning."""
        if not self.done:
            self._finish(False, message, warn=True)

    def _note(self, text: str) -> None:
        # A stage with a TF32/bf16 Hessian notes its safeguards without a warning: an
        # indefinite or singular Hessian there is that rounding's, and the stage that
        # continues decides with exact Hessians (and warns about them).
        if text not in self.notes and self.hessian_precision == "highest":
            _warn(f"{self.name}: {text}", NumericalWarning)
        self.notes[text] = self.notes.get(text, 0) + 1

    def _check_separation(self, s: PassSums, delta: torch.Tensor, step: float) -> bool:
        """Separation: samples with fitted probabilities numerically 0 or 1, and full
        steps that keep the same direction and do not shrink (for a finite
        optimum, Newton steps shrink quadratically). Three such steps in a row
        end the fit with a :class:`~torchglm.SeparationWarning`."""
        prev, self.prev_delta = self.prev_delta, delta
        if s.n_saturated == 0 or prev is None or step < 1.0:
            self.sep_streak = 0
            return False
        dn, pn = float(delta.norm()), float(prev.norm())
        cos = float(delta @ prev) / max(dn * pn, 1e-300)
        self.sep_streak = self.sep_streak + 1 if (dn >= 0.5 * pn and cos >= 0.9) else 0
        if self.sep_streak < 3:
            return False
        # Perfect separation drives the whole loss to 0 (geometrically, along Newton
        # steps); quasi-complete separation leaves the loss of the overlapping samples.
        losses = [h["loss"] for h in self.result.history[-2:]]
        self._report_separation(s, delta, "perfect" if losses[-1] < 0.9 * losses[0] else "quasi-complete")
        return True

    def _report_separation(self, s: PassSums, delta: torch.Tensor, kind: str) -> None:
        """End the fit unconverged with a :class:`~torchglm.SeparationWarning` naming the
        coefficients that diverge (the largest entries of the direction ``delta``)."""
        direction = delta / max(float(delta.norm()), 1e-300)
        names = parameter_names(self.model)
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
        self.result.extra["separation"] = info
        where = (
            "probabilities numerically 0 or 1"
            if self.model.family.is_classifier
            else "means numerically on the boundary where their targets lie (0 or 1 for a proportion, 0 for a count)"
        )
        msg = (
            f"{kind} separation: {s.n_saturated} of {s.n_samples} samples have fitted "
            f"{where} and the coefficients diverge along "
            f"{coefs}; the unpenalized maximum-likelihood estimate does not exist. "
            f"Fit with an L2 penalty (l2 > 0, e.g. l2=1e-4) for finite coefficients."
        )
        _warn(msg, SeparationWarning)
        self._finish(False, msg)

    def _finish(self, converged: bool, message: str, warn: bool = False) -> None:
        self.done = True
        r = self.result
        r.converged, r.message = converged, message
        base = self.base
        if base is not None:
            step = (
                converged
                and self.handoff
                and self.newton_like
                and self.solve_exact
                and self.delta is not None
            )
            set_flat_parameters(self.model, self.base_theta + self.delta if step else self.base_theta)
            # After a light verifying pass: the Hessian of the previous point.
            hess = base.hess if base.hess is not None else (self.light_hess if converged else None)
            r.extra.update(
                loss=float(base.loss),
                grad=base.grad.detach(),
                hessian=None if hess is None else hess.detach(),
            )
        r.extra.update(passes=self.n_passes, dtype=str(self.dtype), numerical_warnings=dict(self.notes))
        if self.finishing:
            r.extra["finish_steps"] = r.n_iter - self.finish_from
            r.message = (
                f"{r.extra['first_order_stop']}; then {r.extra['finish_steps']} "
                f"Newton-type step(s): {message}"
            )
        if warn:
            _warn(f"{self.name}: {message}", ConvergenceWarning)


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
