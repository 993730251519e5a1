"""Issue 11's trust cases, as numbers: what each solver reports and how far it is from
the truth. Run it on two checkouts (the older one first on PYTHONPATH) for before/after::

    OMP_NUM_THREADS=1 python bench/trust_report.py

Cases: the NIST StRD least squares suite (torchglm.data.nist: certified digits of the
coefficients and standard deviations, torchglm's ``qr`` and ``glm_results`` beside
statsmodels' OLS, numpy's ``lstsq`` and scikit-learn's ``LinearRegression``), raw NIST
Longley on every solver (certified digits, RSS), logistic regression with columns scaled
by (1, 1e4, 1e-4) and by 1e-6 (max probability error against the unscaled fit), nearly
collinear columns (objective gap to the optimum), separated data with d = 40 (what the
fit reports). gd and coordinate descent get 2000 steps.
"""

from __future__ import annotations

import warnings

import numpy as np
import statsmodels.api as sm
import torch

from torchglm import LogisticRegression
from torchglm.data.nist import NIST_LLS
from torchglm.inference import glm_results
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import fit

SOLVERS = ["newton", "irls", "newton-cg", "lbfgs", "gd", "coordinate", "auto"]


def run(model, x, y, solver):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = fit(model, x, y, solver=solver, max_iter=2000 if solver in ("gd", "coordinate") else None)
    kinds = sorted({w.category.__name__ for w in caught})
    return r, ",".join(kinds) or "-"


def digits(est, cert) -> float:
    """Correct digits of the worst entry (log relative error; 0 where none)."""
    est, cert = np.asarray(est, dtype=float), np.asarray(cert, dtype=float)
    ok = cert != 0
    if not ok.any():
        return float("nan")
    err = np.abs(est[ok] - cert[ok]) / np.abs(cert[ok])
    return max(0.0, float(np.min(-np.log10(np.maximum(np.nan_to_num(err, nan=1.0), 1e-17)))))


def nist_table() -> None:
    """The NIST StRD linear least squares suite: digits of the worst coefficient (and
    standard deviation) for torchglm and the peers, on the same float64 data."""
    from sklearn.linear_model import LinearRegression

    print("NIST StRD linear least squares: correct digits of the worst coefficient (sd: standard deviation)")
    print(
        f"  {'problem':10s}{'level':>9s}{'torchglm qr':>13s}{'sd':>6s}{'statsmodels':>13s}{'sd':>6s}"
        f"{'lstsq':>7s}{'sklearn':>9s}"
    )
    for name, p in NIST_LLS.items():
        X, y = p.design(), p.y
        x = torch.tensor(X)
        m = GeneralizedLinearModel(X.shape[1], "gaussian", fit_intercept=p.intercept, dtype=torch.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fit(m, x, torch.tensor(y), solver="qr")
            res = glm_results(m, x=x, y=torch.tensor(y), fit_result=r)
            Xc = sm.add_constant(X, has_constant="add") if p.intercept else X
            ols = sm.OLS(y, Xc).fit()
            lstsq = np.linalg.lstsq(Xc, y, rcond=None)[0]
            sk = LinearRegression(fit_intercept=p.intercept).fit(X, y)
        order = (lambda v: np.r_[v[-1], v[:-1]]) if p.intercept else (lambda v: np.asarray(v))
        ours, ours_sd = order(m.flat_parameters().numpy()), order(np.asarray(res.bse))
        skc = np.r_[sk.intercept_, sk.coef_] if p.intercept else sk.coef_
        print(
            f"  {name:10s}{p.difficulty:>9s}{digits(ours, p.coef):13.1f}{digits(ours_sd, p.sd):6.1f}"
            f"{digits(ols.params, p.coef):13.1f}{digits(ols.bse, p.sd):6.1f}"
            f"{digits(lstsq, p.coef):7.1f}{digits(skc, p.coef):9.1f}"
        )


def main():
    torch.manual_seed(0)
    nist_table()
    longley = NIST_LLS["Longley"]
    LONGLEY = np.array(longley.coef)
    x, y = torch.tensor(longley.x), torch.tensor(longley.y)
    print("NIST Longley (raw), every solver: certified digits, RSS (certified 836424.055506)")
    for s in SOLVERS:
        m = GeneralizedLinearModel(6, "gaussian", dtype=torch.float64)
        r, w = run(m, x, y, s)
        est = np.r_[m.linear.bias.detach().numpy(), m.linear.weight.detach().numpy().ravel()]
        digits = -np.log10(np.max(np.abs(est - LONGLEY) / np.abs(LONGLEY)))
        rss = float(((y - m(x).detach()) ** 2).sum())
        print(f"  {s:10s} converged={r.converged!s:5s} digits={digits:5.1f} rss={rss:.6f} warnings={w}")

    g = torch.Generator().manual_seed(0)
    n = 2000
    z = torch.randn(n, 3, generator=g, dtype=torch.float64)
    t = (
        torch.rand(n, generator=g, dtype=torch.float64)
        < torch.sigmoid(z @ torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64))
    ).double()
    ref = LogisticRegression(3, dtype=torch.float64)
    fit(ref, z, t, solver="newton", tol=1e-20)
    p0 = torch.sigmoid(ref(z)).detach()
    for scale in ([1.0, 1e4, 1e-4], [1e-6, 1e-6, 1e-6]):
        sc = torch.tensor(scale, dtype=torch.float64)
        print(f"logistic, columns scaled by {scale}: max |p - p_unscaled|")
        for s in SOLVERS:
            m = LogisticRegression(3, dtype=torch.float64)
            r, w = run(m, z * sc, t, s)
            err = float((torch.sigmoid(m(z * sc)).detach() - p0).abs().max())
            print(f"  {s:10s} converged={r.converged!s:5s} max_err={err:.2e} warnings={w}")

    zc = torch.randn(n, 5, generator=g, dtype=torch.float64)
    zc = torch.cat([zc, zc[:, :1] + 1e-6 * torch.randn(n, 1, generator=g, dtype=torch.float64)], 1)
    tc = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(zc[:, :5].sum(1))).double()
    ref = LogisticRegression(6, dtype=torch.float64)
    fit(ref, zc, tc, solver="newton", tol=1e-20)
    e0 = float(ref.objective(zc, tc).detach())
    print("nearly collinear columns: objective gap E - E*")
    for s in SOLVERS:
        m = LogisticRegression(6, dtype=torch.float64)
        r, w = run(m, zc, tc, s)
        print(
            f"  {s:10s} converged={r.converged!s:5s} gap={float(m.objective(zc, tc).detach()) - e0:.2e} warnings={w}"
        )

    xs = torch.randn(400, 40, generator=g, dtype=torch.float64)
    ts = (xs[:, 0] + 0.3 * xs[:, 1] > 0).double()
    print("separated data, d = 40: what the fit reports")
    for s in SOLVERS:
        m = LogisticRegression(40, dtype=torch.float64)
        r, w = run(m, xs, ts, s)
        print(
            f"  {s:10s} converged={r.converged!s:5s} max|w|={float(m.linear.weight.detach().abs().max()):8.1f} "
            f"warnings={w}"
        )


if __name__ == "__main__":
    main()
