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

A **Newton-CG** step ``x`` (the Hessian never formed) gives ``-g^T x``, not the
decrement: for any ``x``, with the residual ``r = H x + g``,

    lambda^2 = g^T H^+ g = -2 m(x) + r^T H^+ r,    m(x) = g^T x + x^T H x / 2,

and nothing bounds ``r^T H^+ r`` by ``||r||`` alone (``H``'s least eigenvalue is not
known). :class:`ResidualBound` bounds it from below-bounds on ``H`` that cost no
extra pass: the L2 penalty after an exact solve on the (unpenalized) bias block, or
a Gram lower bound of the data part (:class:`CGCertificate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .linalg import equilibrate, newton_direction
from .pass_sums import PassSums
from .shift import SoftmaxShift

__all__ = ["Solve", "DecrementTest", "CGCertificate", "ResidualBound", "GRAM_MAX_WIDTH", "TIGHTEN_MAX"]

#: Design widths ``d~`` (features plus bias) up to which a Newton-CG certificate of an
#: unpenalized fit forms the Gram lower bound (``d~^2`` entries: 128 MiB in float64
#: at 4096, and ``n d~^2`` flops once per certified point).
GRAM_MAX_WIDTH = 4096
#: Smaller-residual CG solves a Newton-CG certificate may ask for at one point.
TIGHTEN_MAX = 3

#: The bounds of :class:`ResidualBound`.
SCHUR = "L2 penalty after the exact bias-block solve"
GRAM = "Gram lower bound X~^T D X~"


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
        certificate: the bounded decrement of that CG direction (where it was small
            enough to certify; :class:`ResidualBound`), else ``None``.
        refusal: why that direction's small decrement cannot certify (no bound, or
            one too loose), with what would: the fit then ends unconverged.
    """

    exact: bool = True
    flat_gradient: float = 0.0
    rcond: float = 1.0
    cg: bool = False
    certificate: "CGCertificate | None" = None
    refusal: str = ""


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


@dataclass
class CGCertificate:
    """An upper bound on the Newton decrement from a Newton-CG step (module docstring).

    Attributes:
        step: the step ``x`` (after the bias-block correction, where made).
        product: ``H x``.
        model: ``-2 m(x) = -2 g^T x - x^T H x``, the part of ``lambda^2`` the step
            accounts for (``<= lambda^2``; ``-g^T x`` where ``x^T r = 0``).
        residual: the upper bound on ``r^T H^+ r`` (``inf``: none).
        kind: the bound used (``None``: none available).
        residual_norm: ``||r||_P`` in the CG solve's norm.
        products: the Hessian-vector products the certificate took.
        tightened: the smaller-residual CG solves asked for at this point.
    """

    step: torch.Tensor
    product: torch.Tensor
    model: float
    residual: float
    kind: str | None
    residual_norm: float = 0.0
    products: int = 0
    tightened: int = 0

    @property
    def bound(self) -> float:
        """``lambda^2 <= model + residual``."""
        return self.model + self.residual

    def report(self) -> dict:
        """The entries ``extra.cg_certificate`` reports."""
        return {
            "decrement_bound": self.bound,
            "step_part": self.model,
            "residual_bound": self.residual,
            "bound": self.kind,
            "tightened": self.tightened,
        }


class ResidualBound:
    """Upper bounds on ``r^T H^+ r`` at one point of a Newton-CG fit, from the curvature
    its ``"hvp"`` pass kept (no extra pass over the data).

    * **Penalized** (``l2 > 0``, data curvature positive semidefinite): with the bias
      block ``C = H_bb`` (exact, ``m x m``, :meth:`.PassSums.bias_block`), the step is
      corrected on the bias by ``d_b = -C^+ r_b`` (one Hessian-vector product; none for
      one output, whose pass summed ``H``'s bias column, :meth:`.PassSums.bias_product`), so the
      new residual ``r' = r + H[:, b] d_b`` has no bias part and
      ``r'^T H^+ r' = r'_w^T S^-1 r'_w <= ||r'_w||^2 / l2``: the Schur complement
      ``S = H_ww - H_wb C^+ H_bw`` of ``H`` is the data part's (positive semidefinite)
      plus the penalty's ``l2 I`` (Horn & Johnson, "Matrix Analysis", 7.7.6; ``C^+``
      along the softmax shift direction, :class:`~.shift.SoftmaxShift`). In ``E``'s
      units: ``E`` is the mean NLL plus ``(l2 / 2) ||w||^2`` (:mod:`~torchglm.penalty`).
    * **Gram** (unpenalized, ``d~ <= GRAM_MAX_WIDTH``): ``H >= G (x) (I - 11^T/m)``
      with ``G = X~^T diag(f) X~ / S`` and ``f_i`` each sample's floor
      (:meth:`.Curvature.floor`: ``s_i min_k mu_ik`` for the softmax, ``h_i`` for one
      output, where ``G`` is ``H``'s data part itself). Both have the shift
      directions as null space, so ``r^T H^+ r <= tr(R_c G^-1 R_c^T)``, ``R`` the
      residual as an (m, d~) matrix (:mod:`.layout`), ``R_c`` centred over the classes
      (Horn & Johnson 7.7.4: ``A >= B > 0`` gives ``B^-1 >= A^-1``).
    * Otherwise (unpenalized and wider): no bound; the certificate refuses.

    Args:
        s: the sums of a ``"hvp"`` pass at the point.
        shift: the model's softmax shift directions (``None``: none).
        l2: the model's L2 strength.
        precondition: ``v -> P v`` of the CG solves (the norm of their residual target).
    """

    def __init__(self, s: PassSums, shift: SoftmaxShift | None, l2: float, precondition) -> None:
        self.s, self.shift, self.l2, self.precondition = s, shift, l2, precondition
        self.md = s.m * s.d
        self.width = s.d + s.has_bias
        self.kind, self.why = self._choose()
        self._factor: tuple | None = None

    def _choose(self) -> tuple[str | None, str]:
        psd = not self.s.scalar or self.s.negative_curvature() == 0
        if self.l2 > 0 and psd:
            return SCHUR, ""
        if self.width <= GRAM_MAX_WIDTH:
            # One output: G is the data part itself (a negative h_i included), exact.
            return GRAM, ""
        if self.l2 > 0:
            return None, (
                f"some samples have negative curvature (a non-canonical link) and X~ has "
                f"{self.width} > {GRAM_MAX_WIDTH} columns (no Gram matrix formed)"
            )
        return None, (
            f"the fit is unpenalized and X~ has {self.width} > {GRAM_MAX_WIDTH} columns "
            f"(no Gram lower bound formed)"
        )

    def project(self, v: torch.Tensor) -> torch.Tensor:
        return v if self.shift is None else self.shift.remove(v)

    def certificate(self, x: torch.Tensor, Hx: torch.Tensor | None = None) -> CGCertificate:
        """The bounded decrement at the step ``x`` (one or two Hessian-vector products;
        one fewer where its product ``Hx`` is given: a one-step CG's own,
        :func:`~.linalg.cg_solve`'s ``step_product``)."""
        s = self.s
        products = int(Hx is None)
        Hx = s.hvp(x) if Hx is None else Hx
        r = self.project(Hx + s.grad)
        if self.kind == SCHUR:
            x, Hx, r, residual, n = self._schur(x, Hx, r)
            products += n
        elif self.kind == GRAM:
            residual = self._gram_form(r)
        else:
            residual = math.inf
        model = float(-2 * (s.grad @ x) - x @ Hx)
        norm = math.sqrt(max(float(r @ self.cg_precondition()(r)), 0.0))
        return CGCertificate(x, Hx, model, residual, self.kind, norm, products)

    def _schur(self, x, Hx, r):
        """The bias-corrected step and the penalty's bound (class docstring)."""
        s, md = self.s, self.md
        if s.has_bias:
            C = s.bias_block()
            if self.shift is not None:
                C = self.shift.regularize_bias(C)
            d_b, note, *_ = newton_direction(C, r[md:])
            if note is not None:
                return x, Hx, r, math.inf, 0  # C singular beyond the shift: no exact solve
            e = torch.zeros_like(x)
            e[md:] = d_b
            # (one output: from the pass's bias column, no Hessian-vector product)
            He = s.bias_product(d_b)
            # r' = r + H[:, b] d_b: its bias part r_b + C d_b vanishes (up to the m x m
            # solve's rounding), so only r'_w is left to bound.
            x, Hx, r = x + e, Hx + He, self.project(r + He)
        rw = r[:md]
        return x, Hx, r, float(rw @ rw) / self.l2, int(s.has_bias and s.bias_column is None)

    def _gram(self):
        """The equilibrated Cholesky factor of ``G`` (plus ``l2`` on the features), its
        scaling and a rounding allowance; ``None`` where it is singular to working
        precision."""
        if self._factor is None:
            G = self.s.gram_floor()
            G.diagonal()[: self.s.d] += self.l2
            d = equilibrate(G)
            L, info = torch.linalg.cholesky_ex(G * d.unsqueeze(0) * d.unsqueeze(1))
            eps = torch.finfo(G.dtype).eps
            piv = L.diagonal()
            rcond = float((piv.min() / piv.max()) ** 2) if int(info) == 0 else 0.0
            # x^T A^-1 x through Cholesky is good to about d~ eps cond(A) relative.
            ok = rcond > 2 * self.width * eps
            self._factor = (L, d, 1 + self.width * eps / rcond) if ok else (None, None, math.inf)
        return self._factor

    def _gram_inverse(self, v: torch.Tensor) -> torch.Tensor:
        """``(G (x) (I - 11^T/m))^+ v`` in the flat order (``G^-1 v`` for one output):
        ``v`` as an (m, d~) matrix, centred over the classes, times ``G^-1``."""
        L, d, _ = self._gram()
        s = self.s
        V = v[: self.md].view(s.m, s.d)
        if s.has_bias:
            V = torch.cat([V, v[self.md :].view(s.m, 1)], 1)
        if s.m > 1:
            V = V - V.mean(0)  # on 1^T V = 0 the bound's G (x) (I - 11^T/m) acts as G
        Z = (torch.cholesky_solve((V * d).T, L).T * d).reshape(s.m, -1)
        return torch.cat([Z[:, : s.d].reshape(-1), Z[:, s.d :].reshape(-1)])

    def _gram_form(self, r: torch.Tensor) -> float:
        """``tr(R_c G^-1 R_c^T)`` (class docstring), with the Cholesky solve's rounding
        allowance."""
        L, _, allowance = self._gram()
        if L is None:
            return math.inf
        return allowance * float(r @ self._gram_inverse(r))

    def cg_precondition(self):
        """The preconditioner of a smaller-residual CG solve: for the Gram bound its own
        inverse (CG's residual norm is then the bound itself), else the fit's."""
        if self.kind == GRAM and self._gram()[0] is not None:
            return self._gram_inverse
        return self.precondition

    def target(self, cert: CGCertificate, room: float) -> float:
        """The residual ``||r||`` (in :meth:`cg_precondition`'s norm) for which the
        bound takes half of ``room``: for the Gram bound that norm is the bound; for
        the penalty's, ``||r'_w||^2 / l2`` scales as ``||r||^2`` once the residual's
        direction settles (at most a third of the last residual per solve)."""
        if self.kind == GRAM:
            return math.sqrt(0.5 * room / self._gram()[2])
        return cert.residual_norm * min(1 / 3, math.sqrt(0.5 * room / cert.residual))
