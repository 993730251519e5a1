"""First-order solvers: gradient descent, coordinate descent and L-BFGS.

Each pass evaluates ``E`` and ``g`` (and, for coordinate descent, the diagonal
of ``H``) at one trial point; the line search and stopping rules are those of
:mod:`.stepper` (stop on ``||g||_inf <= gtol``). One pass is one objective and
gradient evaluation, so these fitters run unchanged under a Lightning
``Trainer`` (one epoch = one pass) and across processes.
"""

from __future__ import annotations

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

    Args:
        model: the model to fit.
        memory: number of stored pairs.
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`.
    """

    name = "lbfgs"
    default_max_iter = 1000

    def __init__(self, model, memory: int = 10, **options):
        if not isinstance(memory, int) or memory < 1:
            raise fail("memory", "a positive integer", memory)
        self.memory = memory
        super().__init__(model, **options)

    def begin(self) -> None:
        super().begin()
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def state_dict(self) -> dict:
        """:meth:`StepFitter.state_dict` and the stored pairs and finishing phase."""
        return {
            **super().state_dict(),
            "pairs": [tuple(t.detach().cpu() for t in p) for p in self.pairs],
            "finishing": self.finish.active,
            "finish_from": self.finish.start_iter,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        device = self.theta.device
        self.pairs = [tuple(t.to(device, self.dtype) for t in p) for p in state["pairs"]]
        self.finish.active, self.finish.start_iter = state["finishing"], state["finish_from"]

    def on_accept(self, s: PassSums, step: float) -> None:
        if self.base is None or step == 0:
            return
        sv = self.theta - self.base_theta
        yv = s.grad - self.base.grad
        sy = sv @ yv
        if float(sy) > torch.finfo(sv.dtype).eps * float(yv @ yv):
            self.pairs.append((sv, yv, 1.0 / sy))
            if len(self.pairs) > self.memory:
                self.pairs.pop(0)

    def direction(self, s: PassSums):
        q = s.grad.clone()
        if not self.pairs:
            # A first step no longer than 1: the objective is a mean, so its
            # curvature is O(1) for standardized features.
            return -q / q.norm().clamp_min(1.0), None
        sv, yv, _ = self.pairs[-1]
        q = self.two_loop(q, (sv @ yv) / (yv @ yv))
        # g^T H~ g: the Newton decrement with the L-BFGS inverse-Hessian approximation.
        return -q, float(s.grad @ q)

    def two_loop(self, q: torch.Tensor, h0) -> torch.Tensor:
        """``H~ q``: the two-loop recursion over the stored pairs from ``H~0 = h0``
        (a scalar or a diagonal as a vector)."""
        alphas = []
        for sv, yv, rho in reversed(self.pairs):
            a = rho * (sv @ q)
            q = q - a * yv
            alphas.append(a)
        q = q * h0
        for (sv, yv, rho), a in zip(self.pairs, reversed(alphas)):
            b = rho * (yv @ q)
            q = q + (a - b) * sv
        return q

    def cg_preconditioner(self, s: PassSums):
        # The finishing Newton-CG solves with the L-BFGS inverse Hessian started from
        # Jacobi's diag(H)^-1 (scale-invariant, and it holds the curvature the pairs
        # measured): at an L-BFGS stop CG then needs few products.
        if not self.pairs or s.diag is None:
            return None
        h0 = jacobi_inverse(s.diag)
        return lambda v: self.two_loop(v, h0)
