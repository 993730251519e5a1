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
        shifted: bool (p,): the flat parameters whose column has a shift direction.
    """

    def __init__(self, model: LinearModel, columns: torch.Tensor, dtype: torch.dtype, device) -> None:
        m, d = model.n_outputs, model.n_features
        self.m, self.d, self.has_bias = m, d, model.has_intercept
        self.columns, self.dtype = columns, dtype
        col = torch.arange(m * d, device=device) % d
        self.col = torch.cat([col, torch.full((m if self.has_bias else 0,), d, device=device)])
        self.count = torch.bincount(self.col, minlength=d + 1).to(dtype)
        self.shifted = torch.cat([columns.to(device), columns.new_zeros(d + 1 - columns.numel()).to(device)])[
            self.col
        ]
        self._N = None

    @property
    def N(self) -> torch.Tensor:
        """The projector onto the shift directions, (p, p) in the flat order: formed on
        first use, by the solves with a dense Hessian (``p`` small); the CG steps of a
        large model project through :meth:`remove` in O(p) (20 classes of 10,000
        features asked 320 GB for it)."""
        if self._N is None:
            self._N = shift_null_projector(
                self.m, self.d, self.has_bias, self.columns, dtype=self.dtype, device=self.col.device
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

    def regularize_bias(self, C: torch.Tensor) -> torch.Tensor:
        """:meth:`regularize` of the bias-bias block ``C`` (m, m) alone (the bias
        column always has its shift direction): ``C + c 11^T / m``."""
        return C + C.diagonal().abs().mean() / self.m

    def remove(self, v: torch.Tensor) -> torch.Tensor:
        """``v - N v``: ``v`` with its components along the shift directions projected
        out, i.e. each shifted column's mean over the classes subtracted."""
        mean = torch.zeros(self.d + 1, dtype=v.dtype, device=v.device).index_add(
            0, self.col, v
        ) / self.count.clamp_min(1).to(v.dtype)
        return v - torch.where(self.shifted, mean[self.col], torch.zeros_like(v))
