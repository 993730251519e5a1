"""The in-memory :class:`Dataset` record every built-in loader returns.

A leaf module (NumPy only): the registry (:mod:`.datasets`), the GLM simulator
(:mod:`.simulate`) and the shipped corpus (:mod:`.movie_reviews`) all build it, and
none of them imports another for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = ["Dataset", "Task"]

Task = Literal["classification", "regression"]


@dataclass
class Dataset:
    """An in-memory dataset.

    Attributes:
        x: features, float64 (n_samples, n_features).
        y: targets (n_samples,): integer class labels 0..K-1, or real values.
        task: ``"classification"`` or ``"regression"``.
        n_classes: number of classes (classification), else ``None``.
        feature_names: one name per column.
        description: one line on where the data come from.
        weight: optional sample weights (n_samples,): frequency weights, or the
            numbers of trials of a binomial family.
        offset: optional known term added to eta (n_samples,), e.g. log exposure.
    """

    x: np.ndarray
    y: np.ndarray
    task: Task
    n_classes: int | None = None
    feature_names: list[str] = field(default_factory=list)
    description: str = ""
    weight: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __post_init__(self):
        if not self.feature_names:
            self.feature_names = [f"x{j}" for j in range(self.x.shape[1])]
