"""The results of a GLM fit: :class:`GLMResults` and its text table and JSON form
(statsmodels' ``GLMResults`` names and layout)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GLMResults"]


@dataclass
class GLMResults:
    """Results of a GLM fit, with statsmodels' ``GLMResults`` names and conventions.

    Coefficients are in the model's flat order: the weights (named by
    ``feature_names``) then the intercept; for softmax regression the contrasts
    ``w_k - w_0``, ``k = 1..K-1``, each class's features then its intercept
    (named ``k:feature``, ``k:intercept``), as statsmodels' ``MNLogit``.

    Attributes:
        names: coefficient names.
        params: estimates ``beta^``.
        bse: standard errors ``sqrt(diag(Cov))`` (NaN for unidentified coefficients).
        statistic: ``params / bse`` (z, or t when ``use_t``).
        pvalues: two-sided p-values from the normal (or Student t, ``df_resid``).
        conf_int: ``(p, 2)`` confidence bounds at level ``1 - alpha``.
        cov_params: ``phi J (S H)^{-1} J^T`` (a generalized inverse when the
            information is singular; ``J`` is the identity, or the softmax
            contrasts).
        family, link, solver, information: what was fitted, how, and which
            information the covariance uses (``"observed"`` or ``"expected"``).
        nobs: number of observations: the sum of the frequency weights, or the
            number of rows for the binomial (whose weights are trials).
        df_model: ``rank - 1`` (``rank - (K - 1)`` for softmax); df_resid:
            ``nobs - rank`` (statsmodels).
        scale: dispersion ``phi`` (Pearson ``X^2 / df_resid`` or 1).
        llf: the maximized log-likelihood: for the Gaussian (every link) at the
            dispersion's MLE ``phi = RSS / nobs``, as R's ``logLik`` (statsmodels'
            ``llf`` for the identity link; for the log and inverse links statsmodels
            uses the Pearson scale, 4e-5 relative lower on typical data, which is not the
            maximum and makes AIC incomparable across links); for the Gamma at
            ``scale`` (the Pearson estimate: its MLE of ``phi`` has no closed form; as
            statsmodels); ``phi = 1`` for the families without a dispersion. AIC and
            BIC use it.
        llf_mle: the same number as ``llf`` (R's ``logLik``), kept under its former name.
        llnull: log-likelihood of the intercept-only model at ``scale``.
        deviance, null_deviance: ``sum_i s_i d(y_i, mu_i)`` for the fit and for
            the intercept-only model (refitted with the offsets, if any).
        pearson_chi2: ``sum_i s_i (y_i - mu_i)^2 / V(mu_i)``.
        aic: ``-2 llf + 2 rank``; bic: ``-2 llf + rank log(nobs)`` (statsmodels'
            ``bic_llf``, its default ``bic`` since 0.14; the dispersion is not
            counted as a parameter).
        explained_deviance: ``1 - deviance / null_deviance`` (R^2 for the Gaussian).
        n_iter, converged: from the solver (``None`` when no fit result was given).
        l2: penalty strength; ``> 0`` makes the covariance the Laplace/MAP one.
        unidentified: coefficients along null directions of the information
            (collinear or constant columns): not estimable, bse NaN.
        diverging: coefficients along a direction the likelihood keeps
            improving on (separation): reported by the solver or detected here.
        use_t, alpha: test distribution and confidence level.
        notes: human-readable warnings printed under the table.
    """

    names: list[str]
    params: torch.Tensor
    bse: torch.Tensor
    statistic: torch.Tensor
    pvalues: torch.Tensor
    conf_int: torch.Tensor
    cov_params: torch.Tensor
    family: str
    link: str
    solver: str | None
    information: str
    nobs: float
    n_rows: int
    df_model: float
    df_resid: float
    scale: float
    llf: float
    llf_mle: float
    llnull: float
    deviance: float
    null_deviance: float
    pearson_chi2: float
    aic: float
    bic: float
    n_iter: int | None
    converged: bool | None
    l2: float
    unidentified: list[str] = field(default_factory=list)
    diverging: list[str] = field(default_factory=list)
    use_t: bool = False
    alpha: float = 0.05
    notes: list[str] = field(default_factory=list)

    @property
    def explained_deviance(self) -> float:
        return 1.0 - self.deviance / self.null_deviance if self.null_deviance > 0 else float("nan")

    @property
    def penalized(self) -> bool:
        return self.l2 > 0

    def summary(self) -> str:
        """A text table in the layout of statsmodels' ``GLMResults.summary()``."""
        stat = "t" if self.use_t else "z"
        lo, hi = f"[{self.alpha / 2:.3g}", f"{1 - self.alpha / 2:.3g}]"
        width = 78
        it = "n/a" if self.n_iter is None else f"{self.converged} ({self.n_iter} iter.)"
        left = [
            ("Family:", self.family),
            ("Link:", self.link),
            ("Solver:", self.solver or "n/a"),
            ("Converged:", it),
            ("Covariance:", self.information + (" + L2 (Laplace/MAP)" if self.penalized else "")),
            ("Log-likelihood:", f"{self.llf:.6g}"),
            ("AIC:", f"{self.aic:.6g}"),
        ]
        right = [
            ("No. observations:", f"{self.nobs:g}"),
            ("Df residuals:", f"{self.df_resid:g}"),
            ("Df model:", f"{self.df_model:g}"),
            ("Scale:", f"{self.scale:.6g}"),
            ("Deviance:", f"{self.deviance:.6g}"),
            ("Null deviance:", f"{self.null_deviance:.6g}"),
            ("BIC:", f"{self.bic:.6g}"),
        ]
        lines = ["Generalized linear model results".center(width), "=" * width]
        for (a, b), (c, d) in zip(left, right):
            lines.append(f"{a:<16}{b:>22}  {c:<20}{d:>18}")
        lines.append("=" * width)
        name_w = max(12, max(len(n) for n in self.names) + 1)
        head = f"{'':<{name_w}}{'coef':>11}{'std err':>11}{stat:>9} {f'P>|{stat}|':>8}{lo:>12}{hi:>12}"
        lines += [head, "-" * max(width, len(head))]
        for i, n in enumerate(self.names):
            lines.append(
                f"{n:<{name_w}}{_fmt(self.params[i]):>11}{_fmt(self.bse[i]):>11}"
                f"{_fmt(self.statistic[i], 3):>9} {_fmt_p(self.pvalues[i]):>8}"
                f"{_fmt(self.conf_int[i, 0]):>12}{_fmt(self.conf_int[i, 1]):>12}"
            )
        lines.append("=" * max(width, len(head)))
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (non-finite numbers become ``None``)."""
        coef = {
            n: {
                "coef": _num(self.params[i]),
                "std_err": _num(self.bse[i]),
                "statistic": _num(self.statistic[i]),
                "p_value": _num(self.pvalues[i]),
                "ci_low": _num(self.conf_int[i, 0]),
                "ci_high": _num(self.conf_int[i, 1]),
            }
            for i, n in enumerate(self.names)
        }
        out = {
            "family": self.family,
            "link": self.link,
            "solver": self.solver,
            "converged": self.converged,
            "n_iter": self.n_iter,
            "information": self.information,
            "penalized": self.penalized,
            "l2": self.l2,
            "covariance": "Laplace/MAP (penalized)" if self.penalized else "inverse information",
            "statistic": "t" if self.use_t else "z",
            "alpha": self.alpha,
            "nobs": self.nobs,
            "df_model": self.df_model,
            "df_resid": self.df_resid,
        }
        for k in (
            "scale",
            "llf",
            "llf_mle",
            "llnull",
            "deviance",
            "null_deviance",
            "pearson_chi2",
            "aic",
            "bic",
            "explained_deviance",
        ):
            out[k] = _num(getattr(self, k))
        out.update(
            coefficients=coef,
            cov_params=[[_num(v) for v in row] for row in self.cov_params],
            unidentified=list(self.unidentified),
            diverging=list(self.diverging),
            notes=list(self.notes),
        )
        return out

    def to_json(self, path=None, **kwargs) -> str:
        """``json.dumps(self.to_dict())``; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, **kwargs)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def __str__(self) -> str:
        return self.summary()


def _num(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _fmt(v, digits: int = 4) -> str:
    v = float(v)
    if not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return f"{v:.{digits}f}" if 1e-3 <= abs(v) < 1e6 or v == 0 else f"{v:.{digits}g}"


def _fmt_p(v) -> str:
    # statsmodels' table convention (3 decimals); to_dict() keeps the exact value
    v = float(v)
    return f"{v:.3f}" if math.isfinite(v) else "nan"
