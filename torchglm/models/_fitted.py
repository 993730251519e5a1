"""The fitted flag shared by every model."""

from __future__ import annotations

import torch

from .._validation import NotFittedError

__all__ = ["FittedFlag"]


class FittedFlag:
    """Mixin for ``nn.Module`` models: a boolean buffer ``_fitted`` (so a loaded
    ``state_dict`` or checkpoint knows the model was fitted) and its accessors.
    Call :meth:`_register_fitted_flag` in ``__init__``."""

    _fitted: torch.Tensor

    def _register_fitted_flag(self) -> None:
        self.register_buffer("_fitted", torch.zeros((), dtype=torch.bool))

    @property
    def is_fitted(self) -> bool:
        return bool(self._fitted)

    def mark_fitted(self) -> None:
        """Set the fitted flag (fits set it themselves; the trainer calls this too)."""
        self._fitted.fill_(True)

    def check_fitted(self) -> None:
        """Raise :class:`~torchglm.NotFittedError` before the first fit."""
        if not self.is_fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: call fit() first")
