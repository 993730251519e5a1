"""The softmax shift directions of a Newton-type step.

Without a penalty on a column ``j``, adding one value to every class's coefficient
of that column leaves every softmax probability unchanged, so the Hessian is
singular along the shift direction ``u_j`` (:func:`.linalg.shift_null_projector`).
The solvers take the minimum-norm step there: the projector ``N = sum_j u_j u_j^T``
is added to the Hessian before the solve (exact, since ``g`` is orthogonal to those
directions), and a CG step is projected onto their orthogonal complement.
"""

from __future__ import annotations

import torch

from ..passes import LinearModel
from .linalg import shift_null_projector

__all__ = ["SoftmaxShift"]


class SoftmaxShift:
    """The shift directions of a multi-output model's unpenalized columns.

    Attributes:
        columns: bool (d + has_bias,) mask of the columns with a shift direction.
        col: the column ``j`` (``d`` for the bias) of each flat parameter ``(k, j)``.
        count: the number of flat parameters of each column, (d + 1,).

    The projector ``N`` (:attr:`N`, ``p x p`` with ``p = K (d + 1)``) is built only for
    a dense Hessian's solve (:meth:`regularize`, where ``A`` is ``p x p`` already); a
    step is projected without it (:meth:`remove`, ``O(p)``): with ``K = 1000`` classes
    and 100 features ``N`` would take 82 GB.
    """

    def __init__(self, model: LinearModel, columns: torch.Tensor, dtype: torch.dtype, device) -> None:
        m, d = model.n_outputs, model.n_features
        has_bias = model.has_intercept
        self.m, self.d, self.has_bias = m, d, has_bias
        self.dtype, self.device = dtype, device
        self.columns = columns
        self._N: torch.Tensor | None = None
        col = torch.arange(m * d, device=device) % d
        self.col = torch.cat([col, torch.full((m if has_bias else 0,), d, device=device)])
        self.count = torch.bincount(self.col, minlength=d + 1).to(dtype)
        self.features = columns[:d].to(device)  # the feature columns with a shift direction

    @property
    def N(self) -> torch.Tensor:
        """The projector onto the shift directions, (p, p) in the flat order (built once)."""
        if self._N is None:
            self._N = shift_null_projector(
                self.m, self.d, self.has_bias, self.columns, dtype=self.dtype, device=self.device
            )
        return self._N

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
        """``v`` with its components along the shift directions projected out:
        ``v - N v``, where ``(N v)_(k, j)`` is the mean over the classes ``k`` of
        ``v_(k, j)`` for a shift column ``j`` and 0 elsewhere."""
        m, d = self.m, self.d
        out = v.clone()
        W = out[: m * d].view(m, d)
        if bool(self.features.any()):
            W[:, self.features] -= W[:, self.features].mean(0)
        if self.has_bias and bool(self.columns[-1]):
            b = out[m * d :]
            b -= b.mean()
        return out
