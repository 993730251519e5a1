"""Evaluation metrics from torchmetrics, chosen by the model's family.

Classifiers: accuracy, AUROC, mean NLL (log loss) and expected calibration
error (binary or multiclass). Regression families: MSE, MAE, R^2, mean NLL
and, when the family defines ``saturated_nll(y)``, the mean unit deviance
``2 (nll(eta, y) - saturated_nll(y))`` (classifiers get it too: their saturated
NLL is 0, so it is twice the NLL).
``loss`` is the mean NLL (no penalty): the held-out loss early stopping watches.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from torchmetrics import MeanAbsoluteError, MeanMetric, MeanSquaredError, Metric, R2Score
from torchmetrics.utilities import dim_zero_cat
from torchmetrics.classification import (
    BinaryAccuracy,
    BinaryCalibrationError,
    MulticlassAccuracy,
    MulticlassAUROC,
    MulticlassCalibrationError,
)

__all__ = ["GLMMetrics", "RankAUROC"]


class GLMMetrics(nn.Module):
    """Metrics of a model's predictions for one split (``train``, ``val``, ``test``).

    Args:
        family: the model's family (gives ``mean`` and ``nll``; ``is_classifier``,
            ``multi_output`` pick the metrics).
        n_classes: number of classes for classifiers.
        ece_bins: number of equal-width bins of the calibration error.

    Example:
        >>> x = torch.randn(100, 3); y = (x[:, 0] + torch.randn(100) > 0).long()
        >>> model = LogisticRegression(3); result = model.fit(x, y)
        >>> m = GLMMetrics(model.family, 2)
        >>> m.update(model(x), y); sorted(m.compute())
        ['accuracy', 'auroc', 'deviance', 'ece', 'loss', 'nll']
    """

    def __init__(self, family, n_classes: int | None = None, ece_bins: int = 15):
        super().__init__()
        self.family = family
        # NaN propagates (a diverged fit must show as NaN, not be silently dropped).
        self.nll = MeanMetric(nan_strategy="disable")
        has_saturated = family.has_saturated_model
        self.deviance = MeanMetric(nan_strategy="disable") if has_saturated else None
        self.on_mu = nn.ModuleDict()
        if family.is_classifier and family.multi_output:
            k = int(n_classes)
            self.on_mu.update(
                {
                    "accuracy": MulticlassAccuracy(k, average="micro", validate_args=False),
                    "auroc": MulticlassAUROC(k, validate_args=False),
                    "ece": MulticlassCalibrationError(k, n_bins=ece_bins, validate_args=False),
                }
            )
        elif family.is_classifier:
            self.on_mu.update(
                {
                    "accuracy": BinaryAccuracy(validate_args=False),
                    "auroc": RankAUROC(),
                    "ece": BinaryCalibrationError(n_bins=ece_bins, validate_args=False),
                }
            )
        else:
            self.on_mu.update({"mse": MeanSquaredError(), "mae": MeanAbsoluteError(), "r2": R2Score()})

    @torch.no_grad()
    def update(self, eta: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        """Add a batch of linear predictors ``eta``, targets ``y`` and optional sample
        weights (they weight the NLL and deviance means; the other metrics count rows)."""
        mu = self.family.mean(eta)
        w = 1.0 if weight is None else weight
        nll = self.family.nll(eta, y)
        self.nll.update(nll, w)
        if self.deviance is not None:
            # d(y, mu) = 2 (nll(eta, y) - nll_saturated(y)) at phi = 1: the family's
            # unit deviance, computed on the eta scale so that |eta| >> 1 stays finite.
            self.deviance.update(2 * (nll - self.family.saturated_nll(y)), w)
        for metric in self.on_mu.values():
            metric.update(mu, y)

    def compute(self) -> dict[str, torch.Tensor]:
        """Metric name -> value; ``loss`` and ``nll`` are both the mean NLL."""
        out = {"loss": self.nll.compute(), "nll": self.nll.compute()}
        if self.deviance is not None:
            out["deviance"] = self.deviance.compute()
        out.update({name: metric.compute() for name, metric in self.on_mu.items()})
        return out

    def reset(self) -> None:
        for m in self.modules():
            if isinstance(m, Metric):
                m.reset()


class RankAUROC(Metric):
    """The exact area under the ROC curve of binary predictions, as the rank statistic
    it equals: the probability that a positive scores above a negative, ties counting
    one half (Mann-Whitney ``U / (n_pos n_neg)``; Hanley & McNeil, *Radiology* 143,
    1982)::

        2 U = sum over positives p of  #{negatives < p} + #{negatives <= p}

    counted by binary search in the sorted negative scores, exactly (integers).
    torchmetrics' ``BinaryAUROC`` (the same value, up to its float32 rounding) builds
    the whole ROC curve: over a 1.2M-row training split it peaked 83 MB above its
    stored predictions, which set a streamed ``train.py`` run's peak
    (``bench/cli_memory.py``); this holds one sorted copy of the negatives' scores.
    The labels are stored as bytes.

    Given one class only (the curve is undefined) it reports 0, as ``BinaryAUROC``
    does; a NaN score gives NaN (a diverged fit shows as one).

    Example:
        >>> m = RankAUROC(); m.update(torch.tensor([0.1, 0.5, 0.5, 0.7]), torch.tensor([0, 1, 0, 1]))
        >>> float(m.compute())
        0.875
    """

    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("preds", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.preds.append(preds.detach().flatten())
        self.target.append(target.detach().flatten().to(torch.uint8))

    def compute(self) -> torch.Tensor:
        scores = dim_zero_cat(self.preds).cpu()
        if scores.dtype not in (torch.float32, torch.float64):
            scores = scores.float()  # bfloat16/half scores: exactly, in the same order
        scores = scores.numpy()
        positive = dim_zero_cat(self.target).cpu().numpy().astype(bool)
        if np.isnan(scores).any():
            return torch.tensor(float("nan"), dtype=torch.float64)
        negatives = scores[~positive]
        negatives.sort()
        positives = scores[positive]
        n_pos, n_neg = len(positives), len(negatives)
        if n_pos == 0 or n_neg == 0:
            return torch.tensor(0.0, dtype=torch.float64)
        twice_u = 0
        for i in range(0, n_pos, _SEARCH_ROWS):
            p = positives[i : i + _SEARCH_ROWS]
            twice_u += int(
                np.searchsorted(negatives, p, "left").sum() + np.searchsorted(negatives, p, "right").sum()
            )
        return torch.tensor(twice_u / 2 / (n_pos * n_neg), dtype=torch.float64)


#: positive scores looked up at a time by :meth:`RankAUROC.compute`
_SEARCH_ROWS = 65536
