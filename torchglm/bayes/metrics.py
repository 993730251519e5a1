"""Predictive metrics for comparing MAP, Laplace and MCMC predictives on held-out data:
mean negative log-likelihood of the predictive probabilities, accuracy, and the
expected calibration error (ECE: the bin-weighted gap between the top-label
confidence ``max_k p(C_k|x)`` and the accuracy over ``n_bins`` equal-width bins,
Guo et al. 2017; torchmetrics' multiclass ECE, binary models as two classes).
"""

from __future__ import annotations

import torch
from torchmetrics.functional.classification import multiclass_calibration_error

from .._validation import check_same_length, fail

__all__ = ["predictive_metrics", "format_table"]


def predictive_metrics(proba: torch.Tensor, y: torch.Tensor, n_bins: int = 15) -> dict[str, float]:
    """``{"nll", "accuracy", "ece"}`` of predictive probabilities against labels.

    Args:
        proba: ``p(C_1|x)`` (n,) for binary models or ``p(C_k|x)`` (n, K).
        y: integer labels (n,).
        n_bins: confidence bins for the ECE.

    Returns:
        ``nll = -(1/n) sum_i ln p(y_i | x_i)``, accuracy of the arg-max label, ECE (L1).
    """
    check_same_length(["proba", "y"], proba, y)
    if proba.dim() not in (1, 2):
        raise fail("proba", "shape (n,) or (n, K)", tuple(proba.shape))
    y = y.long()
    if proba.dim() == 1:
        # two columns, so that binary and multiclass ECE both bin the top-label confidence
        proba = torch.stack([1 - proba, proba], 1)
    p_y = proba.gather(1, y[:, None]).squeeze(1)
    label = proba.argmax(1)
    ece = multiclass_calibration_error(proba, y, num_classes=proba.shape[1], n_bins=n_bins, norm="l1")
    return {
        "nll": float(-torch.log(p_y).mean()),
        "accuracy": float((label == y).double().mean()),
        "ece": float(ece),
    }


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """A fixed-width text table, one row per predictive, one column per metric."""
    cols = list(next(iter(rows.values())))
    lines = [f"{'predictive':<12}" + "".join(f"{c:>12}" for c in cols)]
    for name, vals in rows.items():
        lines.append(f"{name:<12}" + "".join(f"{vals[c]:>12.4f}" for c in cols))
    return "\n".join(lines)
