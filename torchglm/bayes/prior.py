"""The Gaussian prior on a GLM's coefficients (the lecture notes on probabilistic
classification, §14; Bishop PRML §4.5.1).

``w ~ N(0, lambda I)`` on the weights, so ``ln p(w) = -w^T w / (2 lambda) + const``;
the bias is either left unpenalized (a flat, improper prior: the library's default)
or given its own variance ``sigma_b^2``. The MAP under this prior is the library's
L2 objective ``mean NLL + (l2 / 2) ||W||^2`` with ``l2 = 1 / (lambda sum_i s_i)``
(``s_i`` the sample weights, ``sum_i s_i = n`` without them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._validation import check_positive, fail

__all__ = ["GaussianPrior"]


@dataclass(frozen=True)
class GaussianPrior:
    """Isotropic Gaussian prior ``N(0, variance I)`` on the weights.

    Args:
        variance: the prior variance ``lambda`` of every weight.
        bias_variance: prior variance of each bias entry; ``None`` is a flat
            (improper) prior, i.e. an unpenalized bias as in the library's objective.

    Example:
        >>> prior = GaussianPrior(variance=2.0)
        >>> prior.l2(total_weight=100.0)   # 1 / (lambda n)
        0.005
    """

    variance: float
    bias_variance: float | None = None

    def __post_init__(self):
        check_positive("variance", self.variance)
        if self.bias_variance is not None:
            check_positive("bias_variance", self.bias_variance)

    @classmethod
    def from_l2(cls, l2: float, total_weight: float, bias_variance: float | None = None):
        """The prior whose MAP is the library objective with penalty ``l2``:
        ``lambda = 1 / (l2 sum_i s_i)``."""
        if not l2 > 0:
            raise fail("l2", "a positive penalty (l2 = 0 is a flat prior: no proper posterior)", l2)
        check_positive("total_weight", total_weight)
        return cls(1.0 / (l2 * total_weight), bias_variance)

    def l2(self, total_weight: float) -> float:
        """The library penalty ``l2 = 1 / (lambda sum_i s_i)`` with the same MAP."""
        check_positive("total_weight", total_weight)
        return 1.0 / (self.variance * float(total_weight))

    def precision(self, n_weights: int, n_bias: int, like: torch.Tensor) -> torch.Tensor:
        """Diagonal of the prior precision over ``theta = (vec W, b)``: ``1/lambda``
        per weight, ``1/sigma_b^2`` (or 0 for the flat prior) per bias entry."""
        bias_prec = 0.0 if self.bias_variance is None else 1.0 / self.bias_variance
        return torch.cat(
            [
                torch.full((n_weights,), 1.0 / self.variance, dtype=like.dtype, device=like.device),
                torch.full((n_bias,), bias_prec, dtype=like.dtype, device=like.device),
            ]
        )

    def log_normalizer(self, n_weights: int, n_bias: int) -> float:
        """``-(m/2) log(2 pi lambda)`` (plus the bias term when its prior is proper);
        the flat bias prior contributes a constant that does not depend on ``lambda``."""
        out = -0.5 * n_weights * math.log(2 * math.pi * self.variance)
        if self.bias_variance is not None:
            out -= 0.5 * n_bias * math.log(2 * math.pi * self.bias_variance)
        return out
