"""The results of a GLM fit: :class:`GLMResults` and its text table and JSON form
(statsmodels' ``GLMResults`` names and layout)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, NamedTuple

import torch

from .._validation import fail
from .hypothesis import WaldTestResults, wald_test
from .observations import GLMInfluence, check_row_order, observations
from .prediction import PredictionResults, predict

__all__ = ["GLMResults"]

#: what the summary and notes call each covariance type
_COV_DESCRIPTIONS = {
    "HC0": "heteroscedasticity-robust sandwich HC0 (White; sandwich::vcovHC type 'HC0')",
    "HC1": "heteroscedasticity-robust sandwich HC1 (HC0 x nobs/(nobs - rank); vcovHC 'HC1')",
    "HC2": "heteroscedasticity-robust sandwich HC2 (scores / sqrt(1 - h); vcovHC 'HC2')",
    "HC3": "heteroscedasticity-robust sandwich HC3 (scores / (1 - h); vcovHC 'HC3')",
    "cluster": "cluster-robust sandwich (CRV1, G/(G-1) (nobs-1)/(nobs-rank))",
}


class _FitContext(NamedTuple):
    """What the per-observation methods need: the model (its layout and family), the
    estimate, the training batches (re-iterated, never copied) and the information."""

    model: Any
    theta: torch.Tensor
    batches: Iterable
    expected: bool
    var_weighted: bool = False


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
        cov_type: ``"nonrobust"`` (``phi`` times the inverse information) or a sandwich
            covariance: ``"HC0"``..``"HC3"``, ``"cluster"`` (statsmodels' ``cov_type``;
            see :func:`~torchglm.inference.observations.robust_covariance`).
        n_groups: the number of clusters (``cov_type="cluster"``), else ``None``.
        df_inference: the t and F tests' degrees of freedom: ``df_resid``, or
            ``n_groups - 1`` for the cluster covariance (statsmodels' ``df_correction``).
        normalized_cov_params: ``J (S H)^- J^T``, the inverse information at ``phi = 1``
            (statsmodels' name), whatever ``cov_type``.
        formula: for a fit by :func:`torchglm.glm`, its
            :class:`~torchglm.inference.formula.FormulaDesign` (the formula and
            formulaic's model spec: :meth:`predict` and :meth:`get_prediction` take a
            DataFrame and encode it as the fit did), else ``None``.

    Residuals, leverage and Cook's distance (:attr:`resid_pearson`, :meth:`get_influence`)
    and predictions (:meth:`get_prediction`) use the model and the training data the
    results were computed from (one more pass over them, for the scalar families): the
    results keep references to both, and the estimate as it was.
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
    cov_type: str = "nonrobust"
    n_groups: int | None = None
    df_inference: float | None = None
    normalized_cov_params: torch.Tensor | None = None
    formula: Any = None
    _fit: _FitContext | None = field(default=None, repr=False, compare=False)

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
            ("Covariance:", self._covariance_label()),
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
        if self.formula is not None:
            lines.append(f"Formula: {self.formula.formula}")
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

    def _covariance_label(self) -> str:
        if self.cov_type != "nonrobust":
            return f"{self.cov_type} ({self.information})"
        return self.information + (" + L2 (Laplace/MAP)" if self.penalized else "")

    # -- tables and tests -----------------------------------------------------------
    def confint(self, alpha: float | None = None) -> torch.Tensor:
        """Wald confidence intervals ``b -/+ q_{1-alpha/2} se`` at level ``1 - alpha``
        (default: the results' ``alpha``, i.e. :attr:`conf_int`), ``(p, 2)``; ``q`` is
        normal, or Student t with :attr:`df_inference` degrees of freedom when ``use_t``
        (statsmodels' ``conf_int(alpha)``, R's ``confint.default``)."""
        from scipy import stats  # on first use: most of `import torchglm` before

        alpha = self.alpha if alpha is None else alpha
        if not 0 < alpha < 1:
            raise fail("alpha", "a level in (0, 1)", alpha)
        dist = stats.t(self._df_tests) if self.use_t else stats.norm
        q = float(dist.ppf(1 - alpha / 2))
        return torch.stack([self.params - q * self.bse, self.params + q * self.bse], dim=1)

    @property
    def _df_tests(self) -> float:
        return self.df_resid if self.df_inference is None else self.df_inference

    def summary_frame(self, alpha: float | None = None):
        """The coefficient table as a pandas DataFrame indexed by the names, with the
        text summary's columns ``coef``, ``std err``, ``z`` (``t``), ``P>|z|`` (``P>|t|``)
        and the interval bounds (``[0.025``, ``0.975]`` at ``alpha = 0.05``)."""
        import pandas as pd

        alpha = self.alpha if alpha is None else alpha
        ci = self.confint(alpha).cpu().numpy()
        stat = "t" if self.use_t else "z"
        return pd.DataFrame(
            {
                "coef": self.params.cpu().numpy(),
                "std err": self.bse.cpu().numpy(),
                stat: self.statistic.cpu().numpy(),
                f"P>|{stat}|": self.pvalues.cpu().numpy(),
                f"[{alpha / 2:g}": ci[:, 0],
                f"{1 - alpha / 2:g}]": ci[:, 1],
            },
            index=pd.Index(self.names),
        )

    def wald_test(self, R, q=None, use_f: bool | None = None) -> WaldTestResults:
        """Wald test of the linear hypothesis ``R beta = q`` (statsmodels' ``wald_test``)
        with :attr:`cov_params` (robust, if it is):
        ``W = (R b - q)^T (R V R^T)^{-1} (R b - q) ~ chi^2(m)``; with ``use_f`` (default:
        ``use_t``) ``W / m ~ F(m, df_inference)``.

        Args:
            R: ``(m, p)`` restrictions (a row of length ``p`` for one), in the order of
                :attr:`names`.
            q: ``(m,)`` right-hand side; default zeros.
            use_f: F instead of chi-square.

        Raises:
            InputError: wrong shapes, or dependent restrictions / unidentified
                coefficients (``R V R^T`` singular).
        """
        use_f = self.use_t if use_f is None else use_f
        return wald_test(self.params, self.cov_params, R, q, use_f, self._df_tests)

    # -- predictions and per-observation quantities ---------------------------------
    def _context(self, what: str) -> _FitContext:
        if self._fit is None:
            raise fail("results", f"results computed by glm_results or fit_glm for {what}", "no fitted model")
        if self._fit.model.family.multi_output:
            raise fail("family", f"a scalar family for {what}", repr(self.family))
        return self._fit

    def get_prediction(self, x, offset=None, which: str = "mean", exposure=None) -> PredictionResults:
        """Predictions for the rows ``x`` with standard errors and intervals (statsmodels'
        ``get_prediction(exog, offset=...).summary_frame(alpha)``, R's
        ``predict(fit, newdata, type="link"|"response", se.fit=TRUE)``); see
        :class:`~torchglm.inference.prediction.PredictionResults`.

        Args:
            x: features (n, n_features), tensor or array-like; for a formula fit
                (:func:`torchglm.glm`) a DataFrame of new rows, encoded by the fit's
                formula (its levels, contrasts and transforms; offset and exposure
                columns read from it).
            offset: optional (n,) offset added to ``eta`` (for a formula fit: an array
                or a column name, replacing the fit's).
            which: ``"mean"`` (response scale) or ``"linear"`` (link scale).
            exposure: a formula fit's exposure (array or column name; log link).

        Raises:
            InputError: wrong shapes; for a formula fit, a missing value, an unseen
                level of a categorical factor (the column and the levels named), or no
                offset where the fit had one given as an array.
        """
        fc = self._context("predictions")
        if self.formula is not None and hasattr(x, "columns") and not isinstance(x, torch.Tensor):
            x, offset = self.formula.design(x, offset, exposure)
        elif exposure is not None:
            raise fail("exposure", "a formula fit (torchglm.glm) and a DataFrame", "exposure without them")
        df = self._df_tests
        return predict(fc.model, fc.theta, self.cov_params, x, offset, which, self.use_t, df)

    def predict(self, x, offset=None, which: str = "mean", exposure=None) -> torch.Tensor:
        """The predicted mean ``g^{-1}(x~^T beta^ + offset)`` (``which="mean"``) or the
        linear predictor (``"linear"``) of the rows ``x`` (statsmodels' ``predict``); the
        arguments as for :meth:`get_prediction`."""
        return self.get_prediction(x, offset, which, exposure).predicted

    @cached_property
    def _influence(self) -> GLMInfluence:
        fc = self._context("residuals and influence")
        check_row_order(fc.batches, "residuals and influence")
        if fc.var_weighted:
            # the batches hold f_i v_i: the residuals would need f_i and v_i apart
            raise fail("results", "a fit without var_weights for residuals and influence", "var_weights")
        G = self.normalized_cov_params
        rank = round(self.nobs - self.df_resid)
        return observations(fc.model, fc.theta, fc.batches, G, self.scale, rank, fc.expected)

    def get_influence(self) -> GLMInfluence:
        """Residuals, leverage ``hat_matrix_diag`` and ``cooks_distance`` of every training
        row, computed in one pass (then kept); see
        :func:`~torchglm.inference.observations.observations`. The leverage uses the
        results' information (statsmodels' ``get_influence(observed=...)``)."""
        return self._influence

    @property
    def resid_response(self) -> torch.Tensor:
        """``y - mu`` per training row (statsmodels' name)."""
        return self._influence.resid_response

    @property
    def resid_working(self) -> torch.Tensor:
        """``(y - mu) g'(mu)``, the IRLS working residuals (statsmodels' name)."""
        return self._influence.resid_working

    @property
    def resid_pearson(self) -> torch.Tensor:
        """``sqrt(a) (y - mu) / sqrt(V(mu))`` (``a`` the binomial's trials, else 1)."""
        return self._influence.resid_pearson

    @property
    def resid_deviance(self) -> torch.Tensor:
        """``sign(y - mu) sqrt(a d(y, mu))``: their squares sum to the deviance (unweighted)."""
        return self._influence.resid_deviance

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
            "covariance": _COV_DESCRIPTIONS.get(
                self.cov_type, "Laplace/MAP (penalized)" if self.penalized else "inverse information"
            ),
            "cov_type": self.cov_type,
            "n_groups": self.n_groups,
            "statistic": "t" if self.use_t else "z",
            "alpha": self.alpha,
            "nobs": self.nobs,
            "df_model": self.df_model,
            "df_resid": self.df_resid,
            "formula": None if self.formula is None else self.formula.formula,
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
