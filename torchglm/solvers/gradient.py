"""First-order solvers: gradient descent, coordinate descent and L-BFGS.

Each pass evaluates ``E`` and ``g`` (and, for coordinate descent, the diagonal
of ``H``) at one trial point; the line search and stopping rules are those of
:mod:`.stepper` (stop on ``||g||_inf <= gtol``). One pass is one objective and
gradient evaluation, so these fitters run unchanged under a Lightning
``Trainer`` (one epoch = one pass) and across processes.
"""

from __future__ import annotations

import math

import torch

from .._validation import check_positive, fail
from .pass_sums import PassSums
from .linalg import jacobi_inverse
from .registry import register_solver
from .stepper import StepFitter

__all__ = ["GradientDescentFitter", "CoordinateDescentFitter", "LBFGSFitter"]


@register_solver
class GradientDescentFitter(StepFitter):
    """Full-batch gradient descent ``w <- w - alpha grad E(w)`` (the lecture notes on probabilistic
    classification, §7).

    Args:
        model: the model to fit.
        lr: a fixed step ``alpha`` (the notes' update, no line search); ``None``
            (default) backtracks from twice the last accepted step.
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`.
    """

    name = "gd"
    default_max_iter = 10_000
    linear_rate = True
    budget_max_iter = 3000

    def __init__(self, model, lr: float | None = None, **options):
        if lr is not None:
            check_positive("lr", lr)
            self.line_search = False
        self.lr = lr
        super().__init__(model, **options)

    def begin(self) -> None:
        super().begin()
        self.last_step = 1.0

    def on_accept(self, s: PassSums, step: float) -> None:
        if step > 0:
            self.last_step = step

    def direction(self, s: PassSums):
        return -s.grad, None

    def initial_step(self) -> float:
        return self.lr if self.lr is not None else 2.0 * self.last_step


@register_solver
class CoordinateDescentFitter(StepFitter):
    """Cyclic coordinate descent, one coefficient per pass (the lecture notes, §7:
    "at each iteration only one coefficient in w is updated"; Nocedal & Wright §9.3).

    Pass ``j`` updates coefficient ``k = j mod p`` by the one-dimensional Newton
    step ``w_k <- w_k - g_k / H_kk`` (``H_kk`` from the pass), or by the notes'
    ``w_k <- w_k - alpha g_k`` when ``lr=alpha`` is given, with the shared line
    search. Convergence is tested on the whole gradient.

    Args:
        model: the model to fit.
        lr: a fixed coordinate step ``alpha``; ``None`` uses ``1 / H_kk``.
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`.
    """

    name = "coordinate"
    curvature = "diag"
    default_max_iter = 100_000
    linear_rate = True
    budget_max_iter = 6000

    def __init__(self, model, lr: float | None = None, **options):
        if lr is not None:
            check_positive("lr", lr)
        self.lr = lr
        super().__init__(model, **options)

    def begin(self) -> None:
        super().begin()
        self.k = -1
        self.n_skipped = 0

    def on_accept(self, s: PassSums, step: float) -> None:
        self.n_skipped = 0

    def redirect(self) -> bool:
        # Coordinate k cannot improve E beyond rounding: go on with the next one,
        # until a whole sweep has failed.
        self.n_skipped += 1
        if self.n_skipped >= self.theta.numel():
            return False
        delta, _ = self.direction(self.base)
        self.set_direction(delta)
        return True

    def direction(self, s: PassSums):
        p = s.grad.numel()
        delta = torch.zeros_like(s.grad)
        # Skip coordinates whose gradient is already zero (e.g. an all-zero column).
        for _ in range(p):
            self.k = (self.k + 1) % p
            if float(s.grad[self.k]) != 0.0:
                break
        k = self.k
        hkk = float(s.diag[k])
        if self.lr is not None:
            step = self.lr
        else:
            step = 1.0 / hkk if hkk > 0 else 1.0
        delta[k] = -step * s.grad[k]
        return delta, None


@register_solver
class LBFGSFitter(StepFitter):
    """Full-batch limited-memory BFGS with a backtracking line search.

    The direction is ``-H_k g`` from the two-loop recursion over the last
    ``memory`` pairs ``s = theta_{k+1} - theta_k``, ``y = g_{k+1} - g_k``
    (pairs with ``y^T s <= 0`` are skipped), scaled by ``gamma = s^T y / y^T y``
    (Nocedal & Wright, Algorithm 7.4). The first direction is ``-g / max(1, ||g||)``.
    Besides ``gtol``, the fit stops on the quasi-Newton decrement
    ``g^T H~ g / 2 <= tol max(1, |E|)`` (``H~`` the L-BFGS inverse-Hessian
    approximation), once pairs are stored.

    With ``jacobi=True`` the recursion starts from ``H~0 = gamma D^{-1}`` instead,
    ``D = diag(H)`` summed once at the first evaluated point (that pass reads the
    squared values too) and ``gamma = s^T y / y^T D^{-1} y``; the first direction is
    ``-D^{-1} g / max(1, (g^T D^{-1} g)^{1/2})``. That is L-BFGS in the coordinates
    ``v = D^{1/2} theta`` (Nocedal & Wright §7.2 on the choice of ``H~0``): a change of
    variables, so the objective, its penalty on the original coefficients and the
    optimum are those of the plain fit, and the iterates are equivariant under
    rescaling a column (``D_jj`` scales with its square). Columns whose scales differ
    by orders of magnitude (hashed counts, where a bucket of frequent words has
    ``diag(H)`` 10^4 times a rare one's) cost plain L-BFGS hundreds of iterations:
    the 2^18-bucket hashed bag of words at 50,000 rows, 362 iterations and 452 passes
    plain, 32 and 40 from the Jacobi start (bench/sparse.py).

    A float32 stage may leave its Newton-type finish to the float64 polish
    (``finish_in_next_stage``): its first-order phase then runs to the caller's ``tol``
    and hands the point on with its memory (``extra.lbfgs_memory``: the pairs and the
    Jacobi scaling), and the polish (``start_memory``) begins its Newton-CG finish
    there, its CG preconditioned by that memory's inverse Hessian ``H~`` (from
    ``gamma D^{-1}`` of the stage's first point: scale-invariant), so its ``"hvp"`` pass
    reads no ``x * x`` for a diagonal. On a dense 50,000 x 500 logistic fit the float32
    finish cost a Hessian-vector pass and 1-3 products in float32 before the float64
    polish's own pass and products, which certify either way.

    Args:
        model: the model to fit.
        memory: number of stored pairs.
        jacobi: start the recursion from the Jacobi scaling (above); ``auto`` sets it
            for a sparse design and a dense one fitted in float32 (:func:`~torchglm.solvers.fit`).
        finish_in_next_stage: in a ``handoff`` stage, end at the first-order stop (above)
            instead of finishing with Newton-type steps in this dtype.
        start_memory: the ``extra.lbfgs_memory`` of the stage before (set by
            :meth:`stage_options`): the polish's CG preconditioner.
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`.
    """

    name = "lbfgs"
    default_max_iter = 1000

    def __init__(
        self,
        model,
        memory: int = 10,
        jacobi: bool = False,
        finish_in_next_stage: bool = False,
        start_memory: dict | None = None,
        **options,
    ):
        if not isinstance(memory, int) or memory < 1:
            raise fail("memory", "a positive integer", memory)
        if not isinstance(jacobi, bool):
            raise fail("jacobi", "True or False", jacobi)
        if not isinstance(finish_in_next_stage, bool):
            raise fail("finish_in_next_stage", "True or False", finish_in_next_stage)
        if start_memory is not None and not (isinstance(start_memory, dict) and "pairs" in start_memory):
            raise fail(
                "start_memory", "None or an extra.lbfgs_memory dict (pairs, metric)", type(start_memory)
            )
        self.memory = memory
        self.jacobi = jacobi
        self.finish_in_next_stage = finish_in_next_stage
        self.start_memory = start_memory
        super().__init__(model, **options)
        if self.hands_on_finish:
            # Its point is the polish's first: the quasi-Newton decrement at the polish's
            # tolerance (a stall of the line search below E's rounding hands on earlier).
            self.first_order_tol = self.tol

    @property
    def hands_on_finish(self) -> bool:
        """Whether this stage leaves its Newton-type finish to the next stage."""
        return self.finish_in_next_stage and self.handoff

    @classmethod
    def stage_options(cls, dtype, last, previous, tol, hessian_precision) -> dict:
        """:meth:`StepFitter.stage_options`, and the polish of a stage that handed on its
        memory starts from it (``start_memory``)."""
        options = super().stage_options(dtype, last, previous, tol, hessian_precision)
        if last and previous is not None and previous.extra.lbfgs_memory is not None:
            options["start_memory"] = previous.extra.lbfgs_memory
        return options

    def begin(self) -> None:
        super().begin()
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        #: ``D^{-1}`` of the Jacobi start (``jacobi=True``), once its pass summed ``D``.
        self.metric: torch.Tensor | None = None
        if self.start_memory is not None:
            self._load_memory(self.start_memory)

    def _load_memory(self, memory: dict) -> None:
        """The pairs and Jacobi scaling of the stage before, in this fit's dtype (a pair
        whose curvature ``s^T y`` is not positive here is left out)."""
        metric = memory.get("metric")
        self.metric = None if metric is None else metric.to(self.theta)
        for sv, yv in memory["pairs"]:
            sv, yv = sv.to(self.theta), yv.to(self.theta)
            sy = sv @ yv
            if float(sy) > 0:
                self.pairs.append((sv, yv, 1.0 / sy))
        self.pairs = self.pairs[-self.memory :]

    def memory_state(self) -> dict:
        """The pairs ``(s, y)`` and the Jacobi scaling (``extra.lbfgs_memory``)."""
        return {"pairs": [(sv.detach(), yv.detach()) for sv, yv, _ in self.pairs], "metric": self.metric}

    def state_dict(self) -> dict:
        """:meth:`StepFitter.state_dict` and the stored pairs, Jacobi scaling and
        finishing phase."""
        return {
            **super().state_dict(),
            "pairs": [tuple(t.detach().cpu() for t in p) for p in self.pairs],
            "metric": None if self.metric is None else self.metric.detach().cpu(),
            "finishing": self.finish.active,
            "finish_from": self.finish.start_iter,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        device = self.theta.device
        self.pairs = [tuple(t.to(device, self.dtype) for t in p) for p in state["pairs"]]
        metric = state.get("metric")
        self.metric = None if metric is None else metric.to(device, self.dtype)
        self.finish.active, self.finish.start_iter = state["finishing"], state["finish_from"]

    def pass_curvature(self) -> str | None:
        """The Jacobi start's ``D``: the first pass that evaluates a point sums
        ``diag(H)`` (where it would sum no curvature)."""
        curvature = super().pass_curvature()
        if curvature is None and self.jacobi and self.metric is None and not self.start.pending:
            return "diag"
        return curvature

    def pass_diagonal(self) -> bool:
        """The finish after a stage that handed on its memory with a Jacobi scaling
        preconditions with that memory (:meth:`cg_preconditioner`): its passes sum no
        ``diag(H)``."""
        return not (self.start_memory is not None and self.metric is not None and self.pairs)

    def _first_order_stop_predicted(self) -> bool:
        # A stage that hands on its finish sums no curvature for it.
        return not self.hands_on_finish and super()._first_order_stop_predicted()

    def _begin_finish(self, reason: str, s: PassSums | None = None) -> None:
        """The first-order phase ended: finish with Newton-type steps, or hand the point
        and the memory to the next stage (``finish_in_next_stage``)."""
        if not self.hands_on_finish:
            return super()._begin_finish(reason, s)
        self.result.extra.first_order_stop = reason
        self.result.extra.lbfgs_memory = self.memory_state()
        self._end(False, f"{reason}: handed to the next stage with the L-BFGS memory", hand_off=True)
        return None

    def on_accept(self, s: PassSums, step: float) -> None:
        if self.base is None or step == 0:
            return
        sv = self.theta - self.base_theta
        yv = s.grad - self.base.grad
        sy = sv @ yv
        # Curvature along s well above rounding: s^T y > eps y^T H~0 y, in the metric of
        # the recursion's start (Jacobi's D^-1 where given: scale-invariant, where
        # eps y^T y skipped every float32 pair once a column was multiplied by 1e6).
        yy = yv @ yv if self.metric is None else yv @ (self.metric * yv)
        if float(sy) > torch.finfo(sv.dtype).eps * float(yy):
            self.pairs.append((sv, yv, 1.0 / sy))
            if len(self.pairs) > self.memory:
                self.pairs.pop(0)

    def direction(self, s: PassSums):
        if self.jacobi and self.metric is None and s.diag is not None:
            self.metric = jacobi_inverse(s.diag)
        metric = self.metric
        if not self.pairs:
            # A first step no longer than 1 (in the Jacobi coordinates where given): the
            # objective is a mean, so its curvature is O(1) for standardized features.
            if metric is None:
                return -s.grad / s.grad.norm().clamp_min(1.0), None
            q = metric * s.grad
            return -q / math.sqrt(max(1.0, float(s.grad @ q))), None
        sv, yv, _ = self.pairs[-1]
        if metric is None:
            h0 = (sv @ yv) / (yv @ yv)
        else:
            h0 = (sv @ yv) / (yv @ (metric * yv)) * metric
        q = self.two_loop(s.grad, h0)
        # g^T H~ g: the Newton decrement with the L-BFGS inverse-Hessian approximation.
        return -q, float(s.grad @ q)

    def two_loop(self, q: torch.Tensor, h0) -> torch.Tensor:
        """``H~ q``: the two-loop recursion over the stored pairs from ``H~0 = h0``
        (a scalar or a diagonal as a vector), into a new vector (``q`` is left as it is).

        Every pair's update runs in place on one copy of ``q``, its term written into
        one reused buffer (the same roundings as ``q - a y``; the coefficients stay
        0-dim tensors: no host read, on any device). With two fresh vectors per update,
        the 20-class TF-IDF fit (11,000 x 94,000, 1.9 million parameters, 10 pairs)
        spent 4.0 of its 9.5 s in this recursion (one thread), a pass costing about
        40 ms."""
        q = q.clone()
        term = torch.empty_like(q)
        alphas = []
        for sv, yv, rho in reversed(self.pairs):
            a = rho * (sv @ q)
            q.sub_(torch.mul(yv, a, out=term))
            alphas.append(a)
        q.mul_(h0)
        for (sv, yv, rho), a in zip(self.pairs, reversed(alphas)):
            b = rho * (yv @ q)
            q.add_(torch.mul(sv, a - b, out=term))
        return q

    def cg_preconditioner(self, s: PassSums):
        # The finishing Newton-CG solves with the L-BFGS inverse Hessian started from
        # Jacobi's diag(H)^-1 (scale-invariant, and it holds the curvature the pairs
        # measured): at an L-BFGS stop CG then needs few products.
        # Without this pass's diagonal (:meth:`pass_diagonal`), from the handed memory's
        # Jacobi scaling as its two-loop recursion starts: gamma D^{-1}.
        if not self.pairs or (s.diag is None and self.metric is None):
            return None
        if s.diag is not None:
            h0 = jacobi_inverse(s.diag)
        else:
            sv, yv, _ = self.pairs[-1]
            h0 = (sv @ yv) / (yv @ (self.metric * yv)) * self.metric
        return lambda v: self.two_loop(v, h0)
