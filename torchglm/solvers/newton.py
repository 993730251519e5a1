"""Second-order solvers: Newton-Raphson, IRLS (Fisher scoring) and Newton-CG.

All three take the step ``delta`` solving ``A delta = -g`` at the accepted point,
then share the line search and stopping rules of :mod:`.stepper`:

* ``newton``: ``A = H``, the exact Hessian (the lecture notes on probabilistic classification, §8:
  ``w <- w - (X~^T Y X~)^{-1} X~^T (y - t)``; §14 adds ``I / lambda``; Bishop PRML §4.3.3),
  assembled per pass by :class:`.pass_sums.PassSums`.
* ``irls``: ``A = X~^T Psi X~ / S + l2 P``, the expected information with
  weights ``psi_i = (dmu/deta)^2 / V(mu)`` (``y_i (1 - y_i)`` for the logit).
  This is the weighted least squares of the lecture notes, §8 (McCullagh & Nelder §2.5): with the
  working response ``z = eta + (t - mu) / (dmu/deta)``, the full step lands on
  ``w_new = (X~^T Psi X~)^{-1} X~^T Psi z`` (plus the penalty). For canonical
  links ``Psi`` is the observed curvature, so ``irls`` and ``newton`` take the
  same iterates; for probit they differ and meet at the same optimum.
* ``newton-cg``: truncated Newton; ``A delta = -g`` is solved by (Jacobi
  preconditioned) conjugate gradients with exact Hessian-vector products
  ``H v = X~^T (h * X~ v) / S + l2 P v`` (forward then backward product of the
  linear map around the per-sample curvature ``h`` from :mod:`torch.func`),
  never forming ``H``; Jacobi-preconditioned CG stops at a relative residual
  ``min(0.5, sqrt(||g||_P))`` in the scale-invariant norm ``||r||_P`` (Nocedal &
  Wright 7.1; :func:`.linalg.cg_solve`).

**Softmax identifiability.** Without a penalty, adding one vector to every
class row of ``[W, b]`` leaves every probability unchanged, so ``H`` is
singular. The solvers take the *minimum-norm* Newton step ``-H^+ g``: the
projector ``N`` onto those shift directions is added to ``H`` before the
Cholesky solve (exact, since ``g`` is orthogonal to them; see
:func:`.linalg.shift_null_projector`), and Newton-CG projects its direction.
From the zero start the coefficients therefore satisfy ``sum_k w_k = 0`` (the
symmetric parametrization); statsmodels' ``MNLogit`` pins class 0 instead, and
its coefficients are ``w_k - w_0`` of ours with identical probabilities. With
``l2 > 0`` only the (unpenalized) bias column has the shift freedom.
"""

from __future__ import annotations

import torch

from .._validation import check_positive, fail
from ..passes import FitResult
from .pass_sums import PassSums
from .registry import register_solver
from .stepper import StepFitter

__all__ = ["NewtonFitter", "IRLSFitter", "NewtonCGFitter"]


class _SecondOrder(StepFitter):
    default_max_iter = 100
    default_dtype = torch.float64
    exact = True


@register_solver
class NewtonFitter(_SecondOrder):
    """Damped Newton-Raphson with the exact Hessian (the lecture notes, §8 and §14; Nocedal & Wright §3.4).

    Each pass assembles ``E``, ``g`` and ``H`` (one weighted product
    ``X~^T (h * X~)`` per batch, a ``K x K`` block pair per batch for softmax),
    then solves ``H delta = -g`` by Cholesky (eigenvalue fallback with a
    :class:`~torchglm.NumericalWarning` for singular or indefinite ``H``).
    Stops on the Newton decrement ``lambda^2 = -g^T delta <= tol max(1, |E|)``
    (see :mod:`.stepper`).

    Args:
        model: the model to fit.
        fixed_hessian: use this (p, p) matrix in every step instead of summing a
            Hessian each pass (passes then cost a gradient). :func:`fit` passes
            the last float32 Hessian to its float64 polish: near the optimum the
            steps then converge at the rate of the float32 rounding of ``H``
            (about ``1e-7 cond(H)`` per step), and the stopping rule is evaluated
            with float64 loss and gradient.
        polish_tol: for a ``handoff`` stage whose polish steps with its last Hessian,
            the polish's tolerance: where Newton's quadratic rate predicts the full
            step meets it, the stage ends there and leaves its light verifying pass to
            the polish (:meth:`~torchglm.solvers.stepper.StepFitter._polish_verifies`;
            :func:`fit` sets it).
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`.

    Example:
        >>> from torchglm.data import TensorBatches
        >>> from torchglm.passes import run_passes
        >>> x = torch.randn(200, 5); y = (x[:, 0] + torch.randn(200) > 0).float()
        >>> fitter = NewtonFitter(LogisticRegression(5))
        >>> result = run_passes(fitter, TensorBatches(x, y, batch_size=10_000), 200)
        >>> result.converged
        True
    """

    name = "newton"
    curvature = "full"

    def __init__(
        self, model, fixed_hessian: torch.Tensor | None = None, polish_tol: float | None = None, **options
    ):
        if polish_tol is not None:
            check_positive("polish_tol", polish_tol, allow_zero=True)
        self.polish_tol = polish_tol
        self.given_hessian = fixed_hessian
        if fixed_hessian is not None:
            # Passes then sum only loss and gradient; every step uses this matrix.
            self.curvature = None
        super().__init__(model, **options)

    def begin(self) -> None:
        super().begin()
        self.fixed_hessian = None
        if self.given_hessian is not None:
            p = self.theta.numel()
            if self.given_hessian.shape != (p, p):
                raise fail("fixed_hessian", f"a ({p}, {p}) matrix", tuple(self.given_hessian.shape))
            self.fixed_hessian = self.given_hessian.to(self.theta)

    @classmethod
    def stage_options(
        cls, dtype: torch.dtype, last: bool, previous: FitResult | None, tol: float, hessian_precision: str
    ) -> dict:
        """:meth:`StepFitter.stage_options`, and: a stage followed by the float64 polish
        stops at its own resolution, ``lambda^2 <= 10 eps(dtype) max(1, |E|)`` (its
        ``E`` rounds at ``eps(dtype)``, so a tighter test there only adds Hessian
        passes; the polish, gradient passes with this stage's Hessian, then meets the
        caller's tolerance in float64); the polish reuses the stage's last Hessian as
        its ``fixed_hessian``, so its passes sum only ``E`` and ``g`` (not a TF32/bf16
        one: its decrement would carry that Hessian's error)."""
        options = super().stage_options(dtype, last, previous, tol, hessian_precision)
        if previous is not None and previous.extra.hessian is not None and hessian_precision == "highest":
            options["fixed_hessian"] = previous.extra.hessian
        if not last:
            options["tol"] = max(tol, 10 * torch.finfo(dtype).eps)
            if hessian_precision == "highest":
                options["polish_tol"] = tol  # the polish verifies with this stage's Hessian
        return options

    def direction(self, s: PassSums):
        return self.newton_step(s, s.hess if self.fixed_hessian is None else self.fixed_hessian)


@register_solver
class IRLSFitter(NewtonFitter):
    """Iteratively reweighted least squares / Fisher scoring (the lecture notes, §8).

    Same as :class:`NewtonFitter` (McCullagh & Nelder §2.5) with the expected information
    ``X~^T diag(psi) X~`` in place of the Hessian, ``psi = (dmu/deta)^2 / V(mu)``
    (the family's variance function); the step solves the weighted least
    squares problem with working response ``z = eta + (t - mu) / (dmu/deta)``.
    The reported decrement is ``g^T A^{-1} g`` with that ``A``.
    """

    name = "irls"
    curvature = "expected"


@register_solver
class NewtonCGFitter(_SecondOrder):
    """Hessian-free truncated Newton (Newton-CG).

    Args:
        model: the model to fit.
        max_cg: maximum CG iterations per Newton step (default ``min(max(2p, 50), 500)``).
        **options: see :class:`~torchglm.solvers.stepper.StepFitter`.

    Every CG iteration is one Hessian-vector product over the batches kept
    from the pass (the per-sample curvature ``h`` and the batch views), with one
    all-reduce, so each process takes the same CG steps.
    """

    name = "newton-cg"
    curvature = "hvp"

    def __init__(self, model, max_cg: int | None = None, **options):
        self.max_cg = max_cg
        super().__init__(model, **options)

    def direction(self, s: PassSums):
        return self.cg_step(s, self.max_cg)
