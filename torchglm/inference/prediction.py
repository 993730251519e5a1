"""Predictions of a fitted GLM with standard errors and confidence intervals for the mean
(statsmodels' ``get_prediction``, R's ``predict(se.fit=TRUE)``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import as_tensor, check_features, check_offset, fail, to_tensor

__all__ = ["PredictionResults"]


@dataclass
class PredictionResults:
    """Predicted means of new rows with their uncertainty from ``Cov(beta^)``.

    On the link scale ``eta_0 = x~_0^T beta^ + offset`` has the standard error
    ``sqrt(x~_0^T V x~_0)`` (``V`` the results' ``cov_params``, robust if it is); on the
    response scale ``mu_0 = g^{-1}(eta_0)`` has the delta-method standard error
    ``|mu'(eta_0)| se(eta_0)``, and its interval is the link interval mapped through
    ``g^{-1}`` (inside the mean's domain, asymmetric; statsmodels' "endpoint" method,
    McCullagh & Nelder §2.5), its bounds sorted (statsmodels leaves them swapped for a
    decreasing link such as the inverse). The quantiles are normal, or Student t with ``df_resid``
    degrees of freedom when the results use t.

    Attributes:
        predicted: the mean ``mu_0`` (``which="mean"``) or ``eta_0`` (``"linear"``), (n,).
        se: its standard error, (n,).
        linpred, se_linpred: ``eta_0`` and its standard error.
        which: ``"mean"`` or ``"linear"``.
    """

    predicted: torch.Tensor
    se: torch.Tensor
    linpred: torch.Tensor
    se_linpred: torch.Tensor
    which: str
    link: object
    use_t: bool
    df: float

    @property
    def predicted_mean(self) -> torch.Tensor:
        """statsmodels' name of :attr:`predicted`."""
        return self.predicted

    @property
    def se_mean(self) -> torch.Tensor:
        """statsmodels' name of :attr:`se`."""
        return self.se

    def conf_int(self, alpha: float = 0.05) -> torch.Tensor:
        """``(n, 2)`` bounds at level ``1 - alpha``: ``eta_0 -/+ q se(eta_0)``, mapped
        through ``g^{-1}`` for ``which="mean"`` (sorted: a decreasing link swaps them)."""
        from scipy import stats  # on first use: most of `import torchglm` before

        if not 0 < alpha < 1:
            raise fail("alpha", "a level in (0, 1)", alpha)
        q = float(stats.t.ppf(1 - alpha / 2, self.df) if self.use_t else stats.norm.ppf(1 - alpha / 2))
        ci = torch.stack([self.linpred - q * self.se_linpred, self.linpred + q * self.se_linpred], 1)
        if self.which == "mean":
            ci = self.link.inverse(ci).sort(dim=1).values
        return ci

    def summary_frame(self, alpha: float = 0.05):
        """A pandas DataFrame with statsmodels' columns: ``mean``, ``mean_se``,
        ``mean_ci_lower``, ``mean_ci_upper`` (``which="mean"``), or ``predicted``, ``se``,
        ``ci_lower``, ``ci_upper`` (``which="linear"``)."""
        import pandas as pd

        ci = self.conf_int(alpha).cpu().numpy()
        names = ("mean", "mean_se", "mean_ci_lower", "mean_ci_upper")
        if self.which == "linear":
            names = ("predicted", "se", "ci_lower", "ci_upper")
        values = (self.predicted.cpu().numpy(), self.se.cpu().numpy(), ci[:, 0], ci[:, 1])
        return pd.DataFrame(dict(zip(names, values)))


def predict(model, theta, cov, x, offset, which: str, use_t: bool, df: float) -> PredictionResults:
    """:class:`PredictionResults` of rows ``x`` (checked like ``model.predict``)."""
    if which not in ("mean", "linear"):
        raise fail("which", "'mean' or 'linear'", repr(which))
    x = to_tensor("x", x, device=cov.device, float_dtype=cov.dtype)
    x = x.to_dense() if x.layout != torch.strided else x
    check_features("x", x, model.n_features)
    offset = as_tensor("offset", offset, x)
    check_offset(offset, x.shape[0])
    x = x.to(cov)
    eta = model.linear_predictor(theta.to(cov), x, None if offset is None else offset.to(cov))
    xt = torch.cat([x, torch.ones_like(x[:, :1])], 1) if model.has_intercept else x
    se_eta = ((xt @ cov) * xt).sum(1).clamp_min(0).sqrt()
    link = model.family.link
    if which == "mean":
        predicted, se = link.inverse(eta), link.inverse_derivative(eta).abs() * se_eta
    else:
        predicted, se = eta, se_eta
    return PredictionResults(predicted, se, eta, se_eta, which, link, use_t, df)
