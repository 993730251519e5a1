"""The features a ``train.py`` model sees, in one place: raw columns -> standardized
``z = (x - mean) / scale`` (the training split's statistics) -> the optional fixed
basis ``phi(z)`` (the lecture notes on probabilistic classification, §15: the model is linear in
``phi``, not in ``x``).

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
    (scale 1) instead of divided by zero.

    Each column is first divided by its largest magnitude ``m_j = max_i |x_ij|``, so
    ``u_ij = x_ij / m_j`` lies in ``[-1, 1]``, then the variance is a sum of squares
    shifted by the mean (``sum_i (u_ij - ubar_j)^2 / n``, never ``E[u^2] - ubar^2``)::

        mean_j = m_j ubar_j,        scale_j = m_j sqrt(mean_i (u_ij - ubar_j)^2)

    exact up to rounding at any magnitude the dtype holds: squaring ``x`` itself
    overflows beyond ``|x| ~ 1e154`` (every scale ``inf``, every standardized
    feature 0) and underflows below ``1e-154``. (Chan, Golub & LeVeque, "Algorithms
    for computing the sample variance", 1983; Higham, *Accuracy and Stability of
    Numerical Algorithms*, §1.9.) The statistics are those of this process's rows:
    every process of a distributed fit holds all of them, so nothing is all-reduced
    (unlike the generative models' :class:`~torchglm.models._moments.ClassMoments`).
    """
    d = x_train.shape[1]
    if not enabled:
        return torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)
    x64 = x_train.to(torch.float64)
    lo, hi = torch.aminmax(x64, dim=0)
    m = torch.maximum(-lo, hi)
    m = torch.where(m > 0, m, torch.ones_like(m))
    u = x64 / m
    mean_u, std_u = u.mean(0), u.std(0, unbiased=False)
    mean, std = mean_u * m, std_u * m
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
