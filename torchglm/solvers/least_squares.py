"""Least squares by Householder QR: the Gaussian family with its identity link.

For ``y ~ N(x~^T theta + o, sigma^2)`` the objective of every solver,

    E(theta) = sum_i s_i (y_i - o_i - x~_i^T theta)^2 / (2 S) + const + (l2 / 2) ||W||^2,

is a linear least-squares problem: ``min || A theta - b ||`` with
``A = [sqrt(s) X~ ; sqrt(l2 S) M]`` and ``b = [sqrt(s) (y - o) ; 0]`` (``M`` picks the
penalized weights; ``S = sum_i s_i``). A Newton step solves its normal equations,
whose condition number is ``cond(X~)^2``: at ``cond(X~) ~ 1e8`` nothing is left in
float64. Householder QR is backward stable column by column (Higham, "Accuracy and
Stability of Numerical Algorithms", 2002, 19.3), so its error grows like
``eps cond(X~)``, whatever the scales of the columns.

One pass reduces each batch's ``[A_b, b_b]`` to its ``(p+1) x (p+1)`` triangle and
stacks it onto the running one (TSQR; Demmel, Grigori, Hoemmen & Langou, 2012);
across processes the triangles are all-gathered and reduced once more, so every
process solves the same system. The rank is decided on the triangle with unit column
norms (Jacobi/van der Sluis equilibration, as :func:`.linalg.newton_direction`):
singular values below ``max(p, 10) eps`` of the largest are dropped (minimum-norm
solution, with a :class:`~torchglm.NumericalWarning`). A second pass evaluates
``E`` and ``g`` at the solution for the result.
"""

from __future__ import annotations


import torch
import torch.distributed as dist

from .._validation import NumericalWarning, fail, warn
from ..distributed import rank_and_world
from ..passes import FitResult, Fitter, all_reduce_sum
from .layout import flat_parameters, penalty_mask, set_flat_parameters
from .pass_sums import PassSums
from .registry import register_direct_solver

__all__ = ["QRFitter", "Triangle", "equilibrated_svd", "penalty_rows"]


class Triangle:
    """The triangle ``R`` (``R^T R = A^T A``) of a tall matrix given in row blocks:
    each block is stacked onto the running triangle and reduced again (TSQR; Demmel,
    Grigori, Hoemmen & Langou, 2012). Always ``q x q`` for ``q`` columns (zero rows
    below a short block's triangle), so every process all-gathers the same shape.

    Attributes:
        R: the triangle so far (``None`` before the first block).
    """

    def __init__(self) -> None:
        self.R: torch.Tensor | None = None

    def add(self, A: torch.Tensor) -> None:
        """Stack the rows ``A`` onto the triangle."""
        if self.R is not None:
            A = torch.cat([self.R, A], 0)
        R = torch.linalg.qr(A, mode="r")[1]
        self.R = (
            torch.cat([R, R.new_zeros(A.shape[1] - R.shape[0], A.shape[1])]) if R.shape[0] < A.shape[1] else R
        )

    def gather(self) -> torch.Tensor | None:
        """The triangle of every process's rows (``torch.distributed``: all-gathered and
        reduced once more, so every process holds the same); this process's otherwise."""
        R, world = self.R, rank_and_world()[1]
        if R is not None and world > 1:
            parts = [torch.empty_like(R) for _ in range(world)]
            dist.all_gather(parts, R.contiguous())
            self.R = None
            for part in parts:
                self.add(part)
        return self.R


def penalty_rows(model, weight_sum: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """The rows ``sqrt(l2 S) e_j`` on the penalized weights (columns in the flat order
    ``[W, b]`` of :mod:`.layout`): stacked under the rows ``sqrt(s_i) [x_i, 1]``,
    their Gram matrix gains ``l2 S`` on the weights, the curvature of ``(l2/2)||W||^2``
    after the data term is divided by ``S``."""
    mask = penalty_mask(model, dtype=dtype, device=device)
    return torch.diag(mask * (model.l2 * weight_sum.to(dtype)).sqrt())[mask > 0]


def equilibrated_svd(R: torch.Tensor):
    """The SVD of ``R`` with unit column norms (Jacobi / van der Sluis equilibration)
    and the rank it has to working precision.

    Returns:
        ``(c, U, sv, Vh, keep)``: ``R / c = U diag(sv) Vh`` with ``c`` the column norms
        (1 for a zero column), and ``keep = sv > max(q, 10) eps sv[0]`` (the directions
        determined in this dtype; a rank decision independent of the columns' scales).
    """
    q = R.shape[1]
    c = R.norm(dim=0)
    c = torch.where(c > 0, c, torch.ones_like(c))
    U, sv, Vh = torch.linalg.svd(R / c)
    keep = sv > max(q, 10) * torch.finfo(R.dtype).eps * sv[0]
    return c, U, sv, Vh, keep


@register_direct_solver
class QRFitter(Fitter):
    """Householder-QR least squares for the Gaussian family with the identity link.

    Args:
        model: a ``GeneralizedLinearModel`` with ``family="gaussian"``, ``link="identity"``.
        dtype: computation dtype (float64 by default).
        max_iter, tol: accepted for a uniform solver interface; the solve is direct.

    Example:
        >>> from torchglm.solvers import fit
        >>> x = torch.randn(200, 3); y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(200)
        >>> result = fit(GeneralizedLinearModel(3, "gaussian"), x, y, solver="qr")
        >>> result.converged, result.n_iter          # one direct solve
        (True, 1)
    """

    name = "qr"
    default_dtype = torch.float64

    def __init__(
        self, model, dtype: torch.dtype | None = None, max_iter: int | None = None, tol: float | None = None
    ):
        if not model.family.least_squares:
            raise fail(
                "solver 'qr'",
                "a Gaussian model with the identity link",
                f"family '{model.family.name}' with link '{model.family.link.name}'",
            )
        self.max_iter = 2 if max_iter is None else max_iter
        self.requested_dtype = dtype
        self.restart_from(model)

    def begin(self) -> None:
        """The solve's state from the model as it is now (:meth:`.Fitter.restart_from`)."""
        model = self.model
        self.dtype = self.compute_dtype(model, self.requested_dtype)
        self.theta = flat_parameters(model, self.dtype).to(model.param_device)
        self.result = FitResult(solver=self.name)
        self.solved = False
        self.triangle = Triangle()
        self.weight_sum = torch.zeros((), dtype=self.dtype, device=self.theta.device)

    # -- pass 1: the triangle of [A, b]; pass 2: E and g at the solution -------------
    def start_pass(self) -> None:
        if self.solved:
            self.sums = PassSums(self.model, self.theta, None)

    def accumulate(self, batch) -> None:
        if self.solved:
            self.sums.add(batch)
            return
        x = batch.x.to(self.dtype)
        if x.layout != torch.strided:
            x = x.to_dense()
        y = batch.y.to(self.dtype)
        if batch.offset is not None:
            y = y - batch.offset.to(self.dtype)
        cols = [x, y.unsqueeze(-1)]
        if self.model.has_intercept:
            cols.insert(1, torch.ones_like(y).unsqueeze(-1))
        A = torch.cat(cols, 1)
        if batch.weight is not None:
            s = batch.weight.to(self.dtype)
            A = A * s.sqrt().unsqueeze(-1)
            self.weight_sum += s.sum()
        else:
            self.weight_sum += y.shape[0]
        self.triangle.add(A)

    def end_pass(self) -> bool:
        if self.done:
            return True
        if not self.solved:
            self._solve()
            return False
        s = self.sums.finish()
        r = self.result
        r.converged, r.n_iter = True, 1
        r.message = (
            f"least squares by Householder QR (rank {self.rank} of {self.theta.numel()} "
            f"after column equilibration)"
        )
        r.history.append(
            {
                "iteration": 1,
                "loss": s.loss_value,
                "grad_norm": float(s.grad.abs().max()),
                "newton_decrement": 0.0,
                "step_size": 1.0,
                "passes": 2,
            }
        )
        r.extra.update(
            loss=s.loss_value,
            grad=s.grad.detach(),
            hessian=None,
            passes=2,
            dtype=str(self.dtype),
            rank=self.rank,
        )
        self.done = True
        return True

    def _solve(self) -> None:
        p = self.theta.numel()
        if self.triangle.R is None:
            raise fail("data", "at least one batch", "none")
        R = self.triangle.gather()
        all_reduce_sum(self.weight_sum)
        if self.model.l2 > 0:
            # The penalty's rows, with a zero in the target column b of [A, b].
            rows = penalty_rows(self.model, self.weight_sum, self.dtype, R.device)
            self.triangle.add(torch.cat([rows, rows.new_zeros(rows.shape[0], 1)], 1))
            R = self.triangle.R
        R11, qtb = R[:p, :p], R[:p, p]
        c, U, sv, Vh, keep = equilibrated_svd(R11)
        self.rank = int(keep.sum())
        z = Vh.T @ (torch.where(keep, 1.0 / sv, torch.zeros_like(sv)) * (U.T @ qtb))
        theta = z / c
        if self.rank < p:
            warn(
                f"qr: the design is rank {self.rank} of {p} to working precision after "
                f"column equilibration; minimum-norm solution on the rest",
                NumericalWarning,
            )
        self.theta = theta
        set_flat_parameters(self.model, theta)
        self.solved = True
