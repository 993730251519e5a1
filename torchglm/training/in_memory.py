"""Data read into memory (:func:`~.sources.read_source`), validated, split and
standardized (:func:`memory_splits`): the in-memory counterpart of :mod:`.streamed`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._validation import check_finite, check_magnitude, check_weight, fail
from .features import MAGNITUDE_REMEDY, standardization, standardize
from .sources import Loaded
from .splits import Split

__all__ = ["InMemory", "memory_splits"]


@dataclass
class InMemory:
    """The splits of data held in memory (:func:`memory_splits`)."""

    splits: dict[str, tuple[torch.Tensor, torch.Tensor]]  # standardized x (dtype), float64 y
    extras: dict[str, tuple[torch.Tensor | None, torch.Tensor | None]]  # weight, offset (dtype)
    y: torch.Tensor  # every row's target, file order
    weight: torch.Tensor | None  # every row's weight, file order
    mean: torch.Tensor
    scale: torch.Tensor


def memory_splits(data: Loaded, split: Split, enabled: bool, dtype: torch.dtype) -> InMemory:
    """Validate the arrays read, split the rows (``split.parts``) and standardize the
    features with the training rows' statistics (:func:`~.features.standardization`
    when ``enabled``), cast to ``dtype``.

    Raises:
        InputError: non-finite features, targets or offsets, bad weights, mismatched
            lengths, an empty split, or standardized features whose squares overflow.
    """
    x = torch.as_tensor(data.x, dtype=torch.float64)
    y = torch.as_tensor(np.asarray(data.y, dtype=np.float64))
    if x.dim() != 2 or x.shape[0] != y.shape[0]:
        raise fail("X/y", "the same number of samples", f"X={x.shape[0]}, y={y.shape[0]}")
    check_finite("X", x)
    check_finite("y", y)
    weight, offset = (
        None if t is None else torch.as_tensor(np.asarray(t, dtype=np.float64))
        for t in (data.weight, data.offset)
    )
    check_weight(weight, x.shape[0])
    if offset is not None:
        check_finite("offset", offset)
    parts = split.parts(x.shape[0])
    mean, scale = standardization(x[parts["train"]], enabled)
    z = standardize(x, mean, scale, dtype)
    # Sums of squares of the design (Hessian, Gram matrix) must not overflow the
    # working dtype: checked here, before any solver sees an infinite Hessian.
    check_magnitude("X", z, remedy=MAGNITUDE_REMEDY)
    splits = {k: (z[idx].contiguous(), y[idx]) for k, idx in parts.items()}
    extras = {
        k: tuple(None if t is None else t[idx].to(dtype) for t in (weight, offset))
        for k, idx in parts.items()
    }
    return InMemory(splits, extras, y, weight, mean, scale)
