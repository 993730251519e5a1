"""The L2 (ridge) penalty of the GLM objective, written once.

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

from dataclasses import dataclass

import torch

__all__ = ["L2Penalty"]


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
