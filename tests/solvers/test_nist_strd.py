"""The NIST StRD linear least squares suite (torchglm.data.nist): coefficients and
standard deviations to their certified digits, and every solver's convergence claim
checked in exact rational arithmetic.

Digits are the log relative error (LRE) of the worst coefficient, ``-log10 |b - b_cert| /
|b_cert|``. The floors below are this implementation's measured digits on two machines of
this workplace, the lower one, rounded down: the last digits depend on the CPU's BLAS
kernels (Filip's coefficients and standard deviations kept 8.0 and 8.3 digits on one,
7.5 and 7.5 on an AVX-512 one; Wampler5's coefficients 6.4 and 5.9);
for reference, statsmodels' OLS and numpy's ``lstsq`` keep 0.0 digits on Filip, 6.3 on
Pontius and 5.8 on Wampler5 (``python bench/trust_report.py`` prints them side by side).
"""

from fractions import Fraction

import numpy as np
import pytest
import torch

from torchglm import ConvergenceWarning
from torchglm.data import load_dataset
from torchglm.data.nist import NIST_LLS
from torchglm.inference import fit_glm, glm_results
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import SOLVERS, fit

pytestmark = pytest.mark.usefixtures("quiet_one_thread")

#: Correct digits of the worst coefficient with the ``qr`` solver (and ``auto``).
COEF_DIGITS = {
    "Norris": 11.5,
    "Pontius": 11.5,
    "NoInt1": 14.0,
    "NoInt2": 14.5,
    "Filip": 7.0,
    "Longley": 10.5,
    "Wampler1": 9.0,
    "Wampler2": 12.5,
    "Wampler3": 9.0,
    "Wampler4": 7.5,
    "Wampler5": 5.5,
}
#: Correct digits of the worst standard deviation (``glm_results``).
SD_DIGITS = {
    "Norris": 13.0,
    "Pontius": 12.5,
    "NoInt1": 15.0,
    "NoInt2": 14.5,
    "Filip": 7.0,
    "Longley": 12.0,
    "Wampler3": 13.0,
    "Wampler4": 13.0,
    "Wampler5": 13.0,
}


def _digits(est, cert) -> float:
    est, cert = np.asarray(est, dtype=float), np.asarray(cert, dtype=float)
    return float(np.min(-np.log10(np.maximum(np.abs(est - cert) / np.abs(cert), 1e-17))))


def _problem(name):
    p = NIST_LLS[name]
    x, y = torch.tensor(p.design()), torch.tensor(p.y)
    model = GeneralizedLinearModel(x.shape[1], "gaussian", fit_intercept=p.intercept, dtype=torch.float64)
    return p, x, y, model


def _certified_order(model, values) -> list[float]:
    """The model's flat ``[W, b]`` (or its results' ``[coef, intercept]``) in NIST's
    order, intercept first."""
    values = [float(v) for v in values]
    return values[-1:] + values[:-1] if model.has_intercept else values


def _rss(p, coef) -> Fraction:
    """The residual sum of squares at ``coef`` (NIST's order), in exact rational
    arithmetic on the float64 data and coefficients (no rounding at all)."""
    b = [Fraction(v) for v in coef]
    b0, b = (b[0], b[1:]) if p.intercept else (Fraction(0), b)
    total = Fraction(0)
    for row, yi in zip(p.design().tolist(), p.y.tolist()):
        total += (Fraction(yi) - b0 - sum(bj * Fraction(xj) for bj, xj in zip(b, row))) ** 2
    return total


@pytest.mark.parametrize("solver", ["qr", "auto"])
@pytest.mark.parametrize("name", list(NIST_LLS))
def test_certified_coefficients(name, solver):
    p, x, y, model = _problem(name)
    r = fit(model, x, y, solver=solver)
    assert r.converged and r.extra["rank"] == x.shape[1] + p.intercept
    assert _digits(_certified_order(model, model.flat_parameters()), p.coef) >= COEF_DIGITS[name]


@pytest.mark.parametrize("name", list(NIST_LLS))
def test_certified_standard_deviations(name):
    """From the factor of the information (``R^T R``), never the information itself:
    Filip's information has condition number about 1e30 and loses every digit."""
    p, x, y, model = _problem(name)
    res = glm_results(model, x=x, y=y, fit_result=fit(model, x, y, solver="qr"))
    assert not res.notes and not res.unidentified
    sd = _certified_order(model, res.bse)
    if name in SD_DIGITS:
        assert _digits(sd, p.sd) >= SD_DIGITS[name]
    else:  # Wampler1/2: an exact fit, certified sd 0
        assert max(abs(s) / abs(c) for s, c in zip(sd, p.coef)) < 1e-8
    if p.residual_sd is not None:
        assert _digits([res.scale**0.5], [p.residual_sd]) >= 12.5


@pytest.mark.parametrize("name", list(NIST_LLS))
def test_fit_glm_default_is_least_squares_by_qr(name):
    """``fit_glm``'s default solver for the Gaussian identity link is QR, and keeps its
    certified digits (IRLS, its former default, solves the normal equations: 0 digits on
    Filip, 6.4 on Wampler5); the solver that ran is recorded."""
    p, x, y, model = _problem(name)
    res = fit_glm(model, x, y)
    assert res.solver == "qr" and res.converged
    assert _digits(_certified_order(model, res.params), p.coef) >= COEF_DIGITS[name]
    if name in SD_DIGITS:
        assert _digits(_certified_order(model, res.bse), p.sd) >= SD_DIGITS[name]


@pytest.mark.parametrize("solver", sorted(SOLVERS))
@pytest.mark.parametrize("name", list(NIST_LLS))
def test_every_convergence_claim_holds_in_exact_arithmetic(name, solver, recwarn):
    """``converged=True`` promises ``E - E* <= tol max(1, |E|)`` (``E = RSS / 2n``, tol
    1e-12): checked against the certified optimum with rational arithmetic; a fit that
    cannot get there (Filip on the normal equations) must say so with a warning."""
    p, x, y, model = _problem(name)
    r = fit(model, x, y, solver=solver, max_iter=2000 if solver in ("gd", "coordinate") else None)
    if not r.converged:
        assert any(issubclass(w.category, ConvergenceWarning) for w in recwarn)
        return
    n = len(p.y)
    E, E_star = _rss(p, _certified_order(model, model.flat_parameters())) / (2 * n), _rss(p, p.coef) / (2 * n)
    # certified coefficients are rounded to 15 digits: E* is their RSS, less a 1e-12 margin
    assert float(E - E_star) <= 10 * 1e-12 * max(1.0, float(E)) + 1e-12 * float(E_star), (
        r.message,
        float(E - E_star),
    )


@pytest.mark.parametrize("tol", [1e-12, 3e-12, 1e-11, 1e-10, 1e-9, 1e-8])
@pytest.mark.parametrize("solver", ["newton", "newton-cg", "irls"])
def test_a_nearly_singular_hessian_certifies_no_false_optimum(solver, tol, recwarn):
    """Filip's equilibrated X^T X is singular to float64 while X is not: the Newton-type
    solvers drop directions whose curvature is real but below rounding. A small
    gradient there proves nothing (the decrease along them is at least, not at most,
    flat^2 / 2r): only a gradient at its rounding bound (a direction null in the design)
    may certify. Before that rule, newton and irls claimed convergence at tol 1e-8 with
    E 1.9e-6 above the optimum (40% of E), newton-cg at 1e-12 with 1.1e-9."""
    p, x, y, model = _problem("Filip")
    r = fit(model, x, y, solver=solver, tol=tol)
    if not r.converged:
        assert any(issubclass(w.category, ConvergenceWarning) for w in recwarn)
        return
    n = len(p.y)
    E, E_star = _rss(p, _certified_order(model, model.flat_parameters())) / (2 * n), _rss(p, p.coef) / (2 * n)
    assert float(E - E_star) <= 10 * tol * max(1.0, float(E)) + 1e-12 * float(E_star), (
        r.message,
        float(E - E_star),
    )


def test_the_problems_are_built_in_datasets():
    d = load_dataset("nist_filip")
    assert d.x.shape == (82, 10) and d.task == "regression" and d.feature_names[:2] == ["x", "x^2"]
    assert np.array_equal(d.x, NIST_LLS["Filip"].design())
    longley = load_dataset("nist_longley")
    assert longley.feature_names == ["GNPDEFL", "GNP", "UNEMP", "ARMED", "POP", "YEAR"]
    # the shipped Longley is statsmodels' copy of NIST's
    sm = pytest.importorskip("statsmodels.api")
    ref = sm.datasets.longley.load_pandas()
    assert np.array_equal(longley.x, ref.exog.values) and np.array_equal(longley.y, ref.endog.values)
    # NoInt2's certified values are its closed form's: NIST's digits
    assert NIST_LLS["NoInt2"].coef[0] == pytest.approx(0.727272727272727, rel=1e-15)
    assert NIST_LLS["NoInt2"].sd[0] == pytest.approx(0.420827318078432e-01, rel=1e-14)
