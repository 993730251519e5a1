"""Evaluation metrics from torchmetrics, chosen by the model's family.

Classifiers: accuracy, AUROC, mean NLL (log loss) and expected calibration
error (binary or multiclass). Regression families: MSE, MAE, R^2, mean NLL
and, when the family defines ``saturated_nll(y)``, the mean unit deviance
``2 (nll(eta, y) - saturated_nll(y))`` (classifiers get it too: their saturated
NLL is 0, so it is twice the NLL).
``loss`` is the mean NLL (no penalty): the held-out loss early stopping watches.
"""

from __future__ import annotations

import torch
from torch import nn

from torchmetrics import MeanAbsoluteError, MeanMetric, MeanSquaredError, Metric, R2Score
from torchmetrics.classification import (
    BinaryAccuracy,
    BinaryAUROC,
    BinaryCalibrationError,
    MulticlassAccuracy,
    MulticlassAUROC,
    MulticlassCalibrationError,
)

__all__ = ["GLMMetrics"]


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
                    "auroc": BinaryAUROC(validate_args=False),
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
