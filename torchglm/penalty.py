"""The penalties of the GLM objective, written once: the L2 (ridge) penalty of every
fit, and the elastic net (L1 plus L2) of the proximal Newton solver.

    E(theta) = sum_i s_i nll_i / sum_i s_i + (l2 / 2) ||P theta||^2

``P`` is the 0/1 mask of the penalized entries of the flat parameters (the weights
``W``, not the bias). It is the negative log of the Gaussian prior of the lecture notes on
probabilistic classification, §14, ``w ~ N(0, lambda I)`` per unit of sample weight,
``l2 = 1 / (lambda sum_i s_i)`` (:meth:`torchglm.bayes.GaussianPrior.l2`). Its gradient is
``l2 P theta`` and its Hessian ``l2 diag(P)`` (the ``I / lambda`` the notes add to ``X^T Y X``;
Bishop PRML eq. 4.143).

The model's objective for SGD (:meth:`~torchglm.models.GeneralizedLinearModel.penalty`),
the solvers' passes (:class:`~torchglm.solvers.pass_sums.PassSums`) and the Laplace
posterior all go through :class:`L2Penalty`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["ElasticNetPenalty", "L2Penalty"]


@dataclass(frozen=True)
class L2Penalty:
    """``(l2 / 2) ||w||^2`` of the penalized entries ``w = P theta`` (or ``W`` itself).

    Args:
        l2: the strength (``>= 0``).

    Example:
        >>> pen = L2Penalty(0.1)
        >>> float(pen.value(torch.tensor([3.0, 4.0])))   # 0.05 * 25
        1.25
    """

    l2: float

    def value(self, w: torch.Tensor) -> torch.Tensor:
        """``(l2 / 2) sum_j w_j^2`` (a 0-d tensor)."""
        return 0.5 * self.l2 * (w * w).sum()

    def grad(self, w: torch.Tensor) -> torch.Tensor:
        """``l2 w``: the gradient with respect to ``theta`` at ``w = P theta``."""
        return self.l2 * w

    def curvature(self, mask: torch.Tensor) -> torch.Tensor:
        """``l2 P``: the diagonal of the Hessian (``mask`` is ``P``'s diagonal)."""
        return self.l2 * mask


@dataclass(frozen=True)
class ElasticNetPenalty:
    """The elastic net ``l1 ||w||_1 + (l2 / 2) ||w||^2`` of the penalized entries
    ``w = P theta`` (Zou & Hastie 2005; the lasso for ``l2 = 0``, Tibshirani 1996).

    The full objective of a fit with it is

        F(theta) = sum_i s_i nll_i / sum_i s_i + l1 ||P theta||_1 + (l2 / 2) ||P theta||^2,

    the negative log posterior per unit of sample weight under independent Laplace
    priors ``p(w_j) ∝ exp(-|w_j| / b)`` with ``l1 = 1 / (b sum_i s_i)`` (times the
    Gaussian prior of :class:`L2Penalty`; Murphy, "Machine Learning: a Probabilistic
    Perspective", §13.3). The L1 term is not differentiable at ``w_j = 0``: a solver
    uses its proximal map (soft-thresholding) and certifies an optimum by the minimum-norm
    subgradient (:meth:`kkt_residual`), never by the gradient alone.

    scikit-learn's ``LogisticRegression`` minimizes
    ``C sum_i s_i nll_i + l1_ratio ||w||_1 + (1 - l1_ratio) ||w||^2 / 2``; divided by
    ``C sum_i s_i`` this is ``F`` with ``l1 = l1_ratio / (C sum_i s_i)`` and
    ``l2 = (1 - l1_ratio) / (C sum_i s_i)`` (:meth:`from_C`). glum's and scikit-learn's
    GLM regressors minimize ``sum_i s_i dev_i / (2 sum_i s_i) + alpha (l1_ratio ||w||_1 +
    (1 - l1_ratio) ||w||^2 / 2)``, half the unit deviance being the NLL up to a constant:
    ``l1 = alpha l1_ratio``, ``l2 = alpha (1 - l1_ratio)`` (:meth:`from_alpha`).

    Args:
        l1: the L1 strength (``>= 0``).
        l2: the L2 strength (``>= 0``).

    Example:
        >>> pen = ElasticNetPenalty(0.5, 0.1)
        >>> float(pen.value(torch.tensor([3.0, -4.0])))   # 0.5 * 7 + 0.05 * 25
        4.75
    """

    l1: float
    l2: float = 0.0

    @classmethod
    def from_C(cls, C: float, l1_ratio: float, total_weight: float) -> "ElasticNetPenalty":
        """scikit-learn's ``C`` and ``l1_ratio`` (classifiers): ``l1 = l1_ratio / (C S)``,
        ``l2 = (1 - l1_ratio) / (C S)`` with ``S = sum_i s_i``; 0 for ``C = inf``."""
        if math.isinf(C):
            return cls(0.0, 0.0)
        scale = 1.0 / (C * float(total_weight))
        return cls(l1_ratio * scale, (1.0 - l1_ratio) * scale)

    @classmethod
    def from_alpha(cls, alpha: float, l1_ratio: float) -> "ElasticNetPenalty":
        """glum's / scikit-learn's GLM ``alpha`` and ``l1_ratio``: ``l1 = alpha l1_ratio``,
        ``l2 = alpha (1 - l1_ratio)``."""
        return cls(alpha * l1_ratio, alpha * (1.0 - l1_ratio))

    def value(self, w: torch.Tensor) -> torch.Tensor:
        """``l1 sum_j |w_j| + (l2 / 2) sum_j w_j^2`` (a 0-d tensor)."""
        return self.l1 * w.abs().sum() + 0.5 * self.l2 * (w * w).sum()

    def kkt_residual(self, grad: torch.Tensor, theta: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The minimum-norm subgradient of ``F`` at ``theta`` from the gradient ``grad``
        of its smooth part (the mean NLL and the L2 term): ``g_j + l1 sign(theta_j)`` on
        penalized entries off zero, ``sign(g_j) max(|g_j| - l1, 0)`` on penalized entries
        at zero (the subdifferential ``g_j + l1 [-1, 1]`` nearest 0), ``g_j`` on the
        unpenalized ones. ``theta`` is optimal exactly when it is 0 (Rockafellar,
        "Convex Analysis", §27; Hastie, Tibshirani & Wainwright, "Statistical Learning
        with Sparsity", §5.1)."""
        pen = mask > 0
        at_zero = torch.sign(grad) * (grad.abs() - self.l1).clamp_min(0)
        off_zero = grad + self.l1 * torch.sign(theta)
        return torch.where(pen & (theta == 0), at_zero, torch.where(pen, off_zero, grad))
