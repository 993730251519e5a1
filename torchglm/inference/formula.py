"""The formula interface: ``glm("y ~ x1 + C(g) + x1:x2", data, family=..., link=...)``.

A Wilkinson-Rogers formula (Wilkinson & Rogers 1973; Chambers & Hastie, *Statistical
Models in S*, §2.3) names the response and the terms of the linear predictor; the
design matrix ``X`` is built from a DataFrame by formulaic (the successor of patsy,
with the same column names: ``Intercept``, ``x1``, ``C(g)[T.b]``, ``x1:x2``). A
categorical factor with levels ``l_0, ..., l_{m-1}`` enters through a contrast
matrix ``C`` (``m x (m - 1)``; treatment contrasts by default, reference ``l_0``),
so its columns are ``C[level_i]``. The GLM is then fitted on ``X`` as it stands (the
formula's ``Intercept`` is one of its columns; the model adds none), and the results
keep the formula's model spec: predictions on new data go through the same
encoding (the same levels, the same contrasts, the same stateful transforms).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from .._validation import fail, optional_import
from ..models.glm import GeneralizedLinearModel
from .glm import fit_glm
from .results import GLMResults

__all__ = ["glm", "FormulaDesign"]

_MISSING = ("raise", "drop")


def _imports():
    pd = optional_import("pandas", "the formula interface (torchglm.glm)", "formula")
    formulaic = optional_import("formulaic", "the formula interface (torchglm.glm)", "formula")
    return pd, formulaic


@dataclass
class FormulaDesign:
    """What a formula fit keeps to rebuild its design on new data.

    Attributes:
        formula: the formula as given.
        model_spec: formulaic's ``ModelSpec`` of the right-hand side (the columns, the
            categorical levels and contrasts, the transforms' state).
        columns: the design's column names (the coefficients' names).
        offset, exposure: the names of the DataFrame columns that gave the offset and
            the exposure (``log(exposure)`` is added to the offset), or ``None``; an
            array given at the fit is not part of the formula, so new data need it
            passed again (``had_offset`` records that there was one).
    """

    formula: str
    model_spec: Any
    columns: list[str]
    offset: str | None = None
    exposure: str | None = None
    had_offset: bool = False

    def design(self, data, offset=None, exposure=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The design ``X`` (float64) and offset of the rows of ``data``, through the
        fit's encoding.

        Raises:
            InputError: ``data`` not a DataFrame, a column missing, a missing value in a
                column the model uses (the rows named), a level of a categorical
                factor that the fit did not see (the column and the levels named), or no
                offset for a fit that had one given as an array.
        """
        pd, _ = _imports()
        if not isinstance(data, pd.DataFrame):
            raise fail("data", "a pandas DataFrame (the fit used a formula)", type(data).__name__)
        used = sorted(self.model_spec.required_variables)
        named = [c for c in (self.offset, self.exposure) if c is not None]
        _check_columns(data, used + named)
        _check_no_missing(data, used + named, [])
        _check_levels(self.model_spec, data)
        x = torch.tensor(_materialize(self.model_spec.get_model_matrix, data).to_numpy(dtype="float64"))
        off = _offset_of(
            data,
            self.offset if offset is None else offset,
            self.exposure if exposure is None else exposure,
            len(data),
        )
        if off is None and self.had_offset:
            raise fail(
                "offset",
                "the offset (or exposure) of the new rows: the fit had one given as an array",
                "none",
            )
        return x, off

    def notes(self) -> list[str]:
        """One line per categorical factor: its levels and contrasts."""
        out = []
        for factor, (kind, state) in self.model_spec.encoder_state.items():
            if getattr(kind, "value", kind) != "categorical":
                continue
            contrasts = state.get("contrasts")
            levels = list(getattr(contrasts, "levels", None) or state.get("categories", []))
            coding = getattr(contrasts, "contrasts", None)
            what = (
                type(coding).__name__.replace("Contrasts", "").lower() if coding is not None else "treatment"
            )
            text = f"{factor}: levels {levels}, {what} contrasts"
            if what == "treatment":
                base = getattr(coding, "base", None)
                base = levels[0] if base is None or "UNSET" in repr(base) else base
                text += f" (reference level {base!r})"
            out.append(text)
        return out


def _check_columns(data, names) -> None:
    absent = [n for n in names if n not in data.columns]
    if absent:
        raise fail("data", f"the columns {absent} the model uses", f"columns {list(data.columns)}")


def _missing_rows(data, columns, arrays) -> Any:
    """A boolean mask of the rows with a missing value in ``columns`` or ``arrays``."""
    import numpy as np

    mask = np.zeros(len(data), dtype=bool)
    for c in columns:
        mask |= data[c].isna().to_numpy()
    for a in arrays:
        v = np.asarray(a, dtype=float)
        mask |= ~np.isfinite(v)
    return mask


def _check_no_missing(data, columns, arrays) -> None:
    mask = _missing_rows(data, columns, arrays)
    if mask.any():
        rows = list(data.index[mask])
        shown = rows[:10] + (["..."] if len(rows) > 10 else [])
        raise fail(
            "data",
            "no missing values in the columns the model uses (or missing='drop')",
            f"missing values in {len(rows)} rows, index {shown}",
        )


def _factor_columns(factor: str, names) -> list[str]:
    """The data columns a factor's expression reads (``C(g, contr.sum)`` -> ``g``)."""
    return [n for n in dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", factor)) if n in names]


def _check_levels(spec, data) -> None:
    """Every categorical factor's values in new data are among the fit's levels."""
    for factor, (kind, state) in spec.encoder_state.items():
        if getattr(kind, "value", kind) != "categorical":
            continue
        levels = set(state.get("categories", []))
        for col in _factor_columns(factor, data.columns):
            seen = set(data[col].dropna().unique().tolist())
            unseen = sorted(seen - levels, key=str)
            if unseen and (factor == col or re.fullmatch(rf"C\(\s*{re.escape(col)}\s*(,.*)?\)", factor)):
                raise fail(
                    f"data[{col!r}]",
                    f"levels of the factor {factor} seen at the fit {sorted(levels, key=str)}",
                    f"unseen levels {unseen}",
                )


def _materialize(build, data, **kwargs):
    """Run formulaic; its errors become one InputError, and a data mismatch it would only
    warn about (a level it casts to NaN) is an error."""
    _, formulaic = _imports()
    with warnings.catch_warnings():
        warnings.simplefilter("error", formulaic.errors.DataMismatchWarning)
        try:
            return build(data, **kwargs)
        except Exception as e:  # formulaic's parse, evaluation and encoding errors
            raise fail(
                "formula", "a formula formulaic can evaluate on the data", f"{type(e).__name__}: {e}"
            ) from e


def _column_or_array(data, name: str, value, n: int):
    """A per-row quantity given as a column name or an array of length ``n`` (float64)."""
    import numpy as np

    if value is None:
        return None
    if isinstance(value, str):
        _check_columns(data, [value])
        value = data[value]
    try:
        v = np.array(value, dtype=np.float64)  # a copy: pandas may hand out a read-only view
    except (TypeError, ValueError) as e:
        raise fail(
            name, "numbers, one per row (a column name or an array)", f"{type(value).__name__}: {e}"
        ) from e
    if v.shape != (n,):
        raise fail(name, f"a column name or an array of length {n}", f"shape {v.shape}")
    return v


def _offset_of(data, offset, exposure, n: int) -> torch.Tensor | None:
    """``offset + log(exposure)`` (either may be absent), or ``None``."""
    import numpy as np

    off = _column_or_array(data, "offset", offset, n)
    exp = _column_or_array(data, "exposure", exposure, n)
    if exp is not None:
        if not (exp > 0).all():
            raise fail("exposure", "positive values (log(exposure) is added to the offset)", "a value <= 0")
        off = np.log(exp) if off is None else off + np.log(exp)
    return None if off is None else torch.as_tensor(off, dtype=torch.float64)


def _intercept_start(model, columns, y, weight, offset) -> None:
    """Start at the intercept-only fit ``b = g(ybar)`` (weighted mean) on the formula's
    ``Intercept`` column, as the solvers start a model with its own intercept: the
    all-zero start can lie outside a link's domain (``mu = 1/0`` for the inverse link,
    ``mu = 0`` on the sqrt link's boundary). Left at zero where ``b + offset`` is not
    inside the domain."""
    if "Intercept" not in columns:
        return
    w = torch.ones_like(y) if weight is None else torch.as_tensor(weight, dtype=y.dtype)
    b = model.family.link.link((w * y).sum() / w.sum())
    eta = b + (0.0 if offset is None else offset)
    if bool(torch.isfinite(eta).all()) and bool(model.family.valid_eta(torch.as_tensor(eta)).all()):
        theta = torch.zeros(len(columns), dtype=torch.float64)
        theta[columns.index("Intercept")] = b
        model.set_flat_parameters(theta)


def glm(
    formula: str,
    data,
    family="gaussian",
    link=None,
    *,
    freq_weights=None,
    var_weights=None,
    offset=None,
    exposure=None,
    missing: str = "raise",
    solver: str = "auto",
    alpha: float = 0.05,
    use_t: bool = False,
    information: str | None = None,
    cov_type: str = "nonrobust",
    groups=None,
    **options,
) -> GLMResults:
    """Fit a GLM given by a formula on a DataFrame (statsmodels' ``smf.glm(formula,
    data, family=...).fit()``, R's ``glm(formula, family, data)``).

    The design ``X`` is formulaic's ``model_matrix(formula, data)`` (see
    :mod:`torchglm.inference.formula`); the coefficients are named by its columns, a
    note under the summary names each categorical factor's levels and contrasts, and
    :meth:`GLMResults.predict` / :meth:`GLMResults.get_prediction` take a DataFrame of
    new rows and encode it the same way. The fit is that of :func:`fit_glm`:
    unpenalized maximum likelihood, ``Cov = phi (X^T W X)^{-1}`` (McCullagh & Nelder
    §2.5).

    Args:
        formula: ``"y ~ terms"``: ``+`` adds a term, ``a:b`` an interaction, ``a*b``
            both and their interaction, ``C(g)`` a categorical factor (strings and
            pandas categoricals are categorical already), ``- 1`` (or ``+ 0``) drops the
            intercept, ``np.log(x)`` a transform.
        data: a pandas DataFrame with the formula's columns.
        family, link: as for :class:`~torchglm.models.GeneralizedLinearModel`.
        freq_weights, var_weights: frequency weights (the binomial's trials) and
            variance (prior) weights, each a column name or an array, one per row of
            ``data`` (see :func:`fit_glm`; R's ``glm(weights=)`` are ``var_weights``).
        offset: a known term added to ``eta``: a column name or an array.
        exposure: ``log(exposure)`` is added to the offset (the log link only): a
            column name or an array.
        missing: ``"raise"`` (an InputError naming the rows with a missing value in a
            column the model uses) or ``"drop"`` (those rows are left out; statsmodels'
            ``missing="drop"``).
        solver, alpha, use_t, information, cov_type, groups, **options: as for
            :func:`fit_glm` (``groups`` may be a column name).

    Returns:
        A :class:`GLMResults` whose ``formula`` attribute is the
        :class:`FormulaDesign`.

    Raises:
        InputError: ``data`` not a DataFrame, a formula formulaic cannot parse or
            evaluate, a response that is not one numeric column, missing values (with
            ``missing="raise"``), an exposure with a link other than the log, a weight,
            offset or exposure of the wrong length, and every error of :func:`fit_glm`.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"x": np.linspace(0, 1, 40), "g": list("abcd") * 10})
        >>> df["y"] = np.random.default_rng(0).poisson(np.exp(1 + df.x))
        >>> res = glm("y ~ x + C(g)", df, family="poisson")
        >>> res.names
        ['Intercept', 'x', 'C(g)[T.b]', 'C(g)[T.c]', 'C(g)[T.d]']
        >>> res.predict(df.head(2)).shape
        torch.Size([2])
    """
    pd, formulaic = _imports()
    if not isinstance(data, pd.DataFrame):
        raise fail("data", "a pandas DataFrame", type(data).__name__)
    if not isinstance(formula, str) or "~" not in formula:
        raise fail("formula", "a string 'y ~ terms'", repr(formula))
    if missing not in _MISSING:
        raise fail("missing", "'raise' or 'drop'", repr(missing))
    try:
        parsed = formulaic.Formula(formula)
        used = sorted(parsed.required_variables)
    except Exception as e:  # formulaic's parse errors
        raise fail("formula", "a formula formulaic can parse", f"{type(e).__name__}: {e}") from e
    _check_columns(data, used)
    n = len(data)
    per_row = {
        "freq_weights": _column_or_array(data, "freq_weights", freq_weights, n),
        "var_weights": _column_or_array(data, "var_weights", var_weights, n),
        "offset": _column_or_array(data, "offset", offset, n),
        "exposure": _column_or_array(data, "exposure", exposure, n),
    }
    group_labels = data[groups].to_numpy() if isinstance(groups, str) else groups
    arrays = [v for v in per_row.values() if v is not None]
    if missing == "raise":
        _check_no_missing(data, used, arrays)
    else:
        keep = ~_missing_rows(data, used, arrays)
        data = data[keep]
        per_row = {k: None if v is None else v[keep] for k, v in per_row.items()}
        if group_labels is not None:
            import numpy as np

            group_labels = np.asarray(group_labels)[keep] if len(group_labels) == n else group_labels
    mm = _materialize(lambda d: formulaic.model_matrix(formula, d, na_action="raise"), data)
    if not hasattr(mm, "lhs") or mm.lhs.shape[1] != 1:
        got = "no response" if not hasattr(mm, "lhs") else f"columns {list(mm.lhs.columns)}"
        raise fail("formula", "one numeric response column on the left of '~'", got)
    if per_row["exposure"] is not None:
        lk = GeneralizedLinearModel(1, family, link=link).family.link.name
        if lk != "log":
            raise fail("exposure", "the log link (exposure multiplies the mean)", f"link {lk!r}")
    off = _offset_of(data, per_row["offset"], per_row["exposure"], len(data))
    x = torch.tensor(mm.rhs.to_numpy(dtype="float64"))
    y = torch.tensor(mm.lhs.to_numpy(dtype="float64")[:, 0])
    columns = [str(c) for c in mm.rhs.columns]
    fw, vw = per_row["freq_weights"], per_row["var_weights"]
    model = GeneralizedLinearModel(x.shape[1], family, link=link, fit_intercept=False, dtype=torch.float64)
    _intercept_start(model, columns, y, fw if vw is None else (vw if fw is None else fw * vw), off)
    res = fit_glm(
        model,
        x,
        y,
        freq_weights=None if fw is None else torch.tensor(fw),
        var_weights=None if vw is None else torch.tensor(vw),
        offset=off,
        solver=solver,
        alpha=alpha,
        use_t=use_t,
        information=information,
        feature_names=columns,
        cov_type=cov_type,
        groups=group_labels,
        **options,
    )
    res.formula = FormulaDesign(
        formula=formula,
        model_spec=mm.rhs.model_spec,
        columns=columns,
        offset=offset if isinstance(offset, str) else None,
        exposure=exposure if isinstance(exposure, str) else None,
        had_offset=(offset is not None and not isinstance(offset, str))
        or (exposure is not None and not isinstance(exposure, str)),
    )
    res.notes = res.formula.notes() + res.notes
    model.feature_names = columns
    return res
