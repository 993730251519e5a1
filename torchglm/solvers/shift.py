"""The softmax shift directions of a Newton-type step.

Without a penalty on a column ``j``, adding one value to every class's coefficient
of that column leaves every softmax probability unchanged, so the Hessian is
singular along the shift direction ``u_j`` (:func:`.linalg.shift_null_projector`).
The solvers take the minimum-norm step there: the projector ``N = sum_j u_j u_j^T``
is added to the Hessian before the solve (exact, since ``g`` is orthogonal to those
directions), and a CG step is projected onto their orthogonal complement.

``N v`` is a mean over the classes per column, computed as such: the dense ``(p, p)``
``N`` is built only for a Newton solve, whose Hessian has that size anyway (with
20 classes and 94,000 TF-IDF terms a dense ``N`` would take 28 TB; L-BFGS and
Newton-CG only ever apply it).
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..passes import LinearModel
from .linalg import shift_null_projector

__all__ = ["SoftmaxShift"]


class SoftmaxShift:
    """The shift directions of a multi-output model's unpenalized columns.

    Attributes:
        columns: bool (d + has_bias,) mask of the columns with a shift direction.
        N: the projector onto the shift directions, (p, p) in the flat order (built
            on first use: :meth:`regularize` only).
        col: the column ``j`` (``d`` for the bias) of each flat parameter ``(k, j)``.
        count: the number of flat parameters of each column, (d + 1,).
    """

    def __init__(self, model: LinearModel, columns: torch.Tensor, dtype: torch.dtype, device) -> None:
        m, d = model.n_outputs, model.n_features
        has_bias = model.has_intercept
        self.columns = columns
        self._shape = (m, d, has_bias, dtype, device)
        col = torch.arange(m * d, device=device) % d
        self.col = torch.cat([col, torch.full((m if has_bias else 0,), d, device=device)])
        self.count = torch.bincount(self.col, minlength=d + 1).to(dtype)
        # 1 / m on the columns with a shift direction, 0 elsewhere (and on a missing bias)
        on = torch.zeros(d + 1, dtype=torch.bool, device=device)
        on[: columns.numel()] = columns.to(device)
        self._mean_weight = torch.where(on, 1.0 / self.count.clamp_min(1), torch.zeros_like(self.count))

    @cached_property
    def N(self) -> torch.Tensor:
        m, d, has_bias, dtype, device = self._shape
        return shift_null_projector(m, d, has_bias, self.columns, dtype=dtype, device=device)

    @classmethod
    def of(cls, model: LinearModel, dtype: torch.dtype, device) -> "SoftmaxShift | None":
        """The model's shift directions, or ``None`` where it has none (a single-output
        family, or a penalized multi-output model without intercept)."""
        if not model.family.multi_output:
            return None
        d, has_bias = model.n_features, model.has_intercept
        cols = torch.full((d + has_bias,), model.l2 == 0, dtype=torch.bool)
        if has_bias:
            cols[-1] = True  # the bias is never penalized
        return cls(model, cols, dtype, device) if bool(cols.any()) else None

    def regularize(self, A: torch.Tensor) -> torch.Tensor:
        """``A + sum_j c_j u_j u_j^T``: ``A``'s step on the complement of the shift
        directions, and none along them. ``c_j`` is the mean curvature of column
        ``j``'s entries, so the added block has that column's scale (a column scaled
        by 1e8 must not swamp the others)."""
        h = A.diagonal().abs()
        c = torch.zeros_like(self.count).index_add(0, self.col, h) / self.count
        return A + self.N * c[self.col].unsqueeze(1)

    def remove(self, v: torch.Tensor) -> torch.Tensor:
        """``v - N v``: ``v`` with its components along the shift directions projected
        out, ``(N v)_{(k, j)}`` being the mean of ``v_{(., j)}`` over the classes."""
        sums = torch.zeros((self.count.numel(),) + v.shape[1:], dtype=v.dtype, device=v.device)
        sums = sums.index_add(0, self.col, v)
        mean = sums * self._mean_weight.to(v.dtype).reshape((-1,) + (1,) * (v.dim() - 1))
        return v - mean[self.col]
