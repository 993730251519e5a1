"""The features a ``train.py`` model sees, in one place: raw columns -> standardized
``z = (x - mean) / scale`` (the training split's statistics) -> the optional fixed
basis ``phi(z)`` (seed 004: the model is linear in ``phi``, not in ``x``).

The data module standardizes its splits with :func:`standardization` and
:func:`standardize`; the task keeps the statistics and the basis with its weights
(so a checkpoint predicts on raw rows) and applies them through the same functions;
the callbacks reach the model's inputs through :func:`feature_map`.
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["feature_map", "standardization", "standardize"]


def standardization(x_train: torch.Tensor, enabled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Column means and scales of the training rows, in float64 (``enabled=False``:
    0 and 1). A constant training column carries no information: it is left unscaled
    (scale 1) instead of divided by zero. ``torch.std`` sums centred squares, never
    ``E[x^2] - mean^2``."""
    d = x_train.shape[1]
    if not enabled:
        return torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)
    x64 = x_train.to(torch.float64)
    mean, std = x64.mean(0), x64.std(0, unbiased=False)
    return mean, torch.where(std > 0, std, torch.ones_like(std))


def standardize(x: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(x - mean) / scale`` computed in the statistics' precision (float64), then
    cast to the model's ``dtype``."""
    return ((x.to(mean) - mean) / scale).to(dtype)


def feature_map(pl_module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The task's map from standardized features to the model's inputs (``phi``), or
    ``None`` when the model reads the standardized columns themselves."""
    if getattr(pl_module, "basis", None) is None:
        return None
    return pl_module.phi
