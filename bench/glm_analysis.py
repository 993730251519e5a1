"""The statistician's GLM analysis on a 1M x 20 Poisson: what each quantity costs after
the fit, torchglm against statsmodels on the same data, one thread each side.

Operations (each side's own API; both in float64):

* fit: ``fit_glm`` (default solver: IRLS for the Poisson) / ``sm.GLM(...).fit()`` (IRLS);
* summary: ``res.summary()`` (the results exist; this formats the table);
* results: the nonrobust results from the fitted estimate (torchglm: ``glm_results``, its
  curvature and statistics passes over the data; statsmodels: ``GLMResults`` from the
  IRLS's stored normalized covariance), the base every robust covariance below includes;
* HC0, HC1, cluster: the results with a sandwich covariance from the fitted estimate, no
  refit: ``glm_results(model, x, y, fit_result=fr, cov_type=...)`` / statsmodels'
  ``GLMResults(model, params, normalized_cov_params, scale, cov_type=...)`` (its
  ``fit(cov_type=...)`` builds the same object after the IRLS iterations);
* predict 1000 / all rows: ``get_prediction(x).summary_frame()`` (mean, standard error,
  interval);
* residuals: ``resid_pearson`` and ``resid_deviance`` on fresh results (torchglm: the one
  pass of :func:`~torchglm.inference.observations.observations`, kept; statsmodels: from
  its stored ``mu``);
* influence: ``get_influence()``'s ``hat_matrix_diag`` and ``cooks_distance`` on fresh
  results (torchglm: the same one pass; statsmodels: its ``GLMInfluence``);
* lr_test: ``lr_test(small, big)`` with the nested fit (the last 5 columns dropped)
  already done (its fit time reported apart); statsmodels' GLM has no LR test method:
  ``2 (llf_big - llf_small)`` and ``chi2.sf`` by hand;
* wald_test: the last 5 coefficients 0, ``res.wald_test(R)`` both sides.

Times are the best of ``--repeats`` runs where an operation is repeatable (the fit, the
nested fit and the residual/influence passes once: their first access is the cost).

    OMP_NUM_THREADS=1 python bench/glm_analysis.py      # writes bench/results/glm_analysis.json
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"  # before NumPy and torch load their BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "glm_analysis.json"


def make_data(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    beta = rng.normal(0.0, 0.3 / np.sqrt(d), d)
    y = rng.poisson(np.exp(0.5 + x @ beta)).astype(float)
    groups = rng.integers(0, 1000, n)
    return x, y, groups


def best(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def run_torchglm(x, y, groups, repeats, n_small):
    from torchglm.inference import fit_glm, glm_results, lr_test
    from torchglm.models import GeneralizedLinearModel

    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    d = x.shape[1]
    t = {}

    def fit():
        model = GeneralizedLinearModel(d, "poisson", dtype=torch.float64)
        return model, fit_glm(model, xt, yt)

    t["fit"], (model, res) = best(fit, 1)
    fit_result = None  # glm_results from the model's estimate (its own curvature pass)
    t["summary"], _ = best(res.summary, repeats)
    t["results"], _ = best(lambda: glm_results(model, xt, yt, fit_result=fit_result), repeats)
    for cov in ("HC0", "HC1"):
        t[cov], _ = best(
            lambda cov=cov: glm_results(model, xt, yt, fit_result=fit_result, cov_type=cov), repeats
        )
    t["cluster"], _ = best(
        lambda: glm_results(model, xt, yt, fit_result=fit_result, cov_type="cluster", groups=groups), repeats
    )
    t["predict_1000"], _ = best(lambda: res.get_prediction(xt[:1000]).summary_frame(), repeats)
    t["predict_all"], _ = best(lambda: res.get_prediction(xt).summary_frame(), repeats)
    fresh = glm_results(model, xt, yt, fit_result=fit_result)
    t["residuals"], _ = best(lambda: (fresh.resid_pearson, fresh.resid_deviance), 1)
    fresh = glm_results(model, xt, yt, fit_result=fit_result)
    t["influence"], _ = best(
        lambda: (fresh.get_influence().hat_matrix_diag, fresh.get_influence().cooks_distance), 1
    )

    def small_fit():
        m = GeneralizedLinearModel(n_small, "poisson", dtype=torch.float64)
        return fit_glm(m, xt[:, :n_small], yt)

    t["nested_fit"], small = best(small_fit, 1)
    t["lr_test"], lr = best(lambda: lr_test(small, res), repeats)
    R = np.zeros((d - n_small, d + 1))
    R[:, n_small:d] = np.eye(d - n_small)  # coefficients in [W, b] order: intercept last
    t["wald_test"], wald = best(lambda: res.wald_test(R), repeats)
    stats = {
        "n_iter": res.n_iter,
        "deviance": float(res.deviance),
        "lr_statistic": float(lr.statistic),
        "wald_statistic": float(np.asarray(wald.statistic).ravel()[0]),
        "params_head": [float(v) for v in res.params[:3]],
        "intercept": float(res.params[-1]),
    }
    return t, stats


def run_statsmodels(x, y, groups, repeats, n_small):
    import statsmodels.api as sm
    from scipy import stats as st
    from statsmodels.genmod.generalized_linear_model import GLMResults

    X = sm.add_constant(x, prepend=False)  # intercept last, as torchglm
    d = x.shape[1]
    t = {}
    t["fit"], res = best(lambda: sm.GLM(y, X, family=sm.families.Poisson()).fit(), 1)
    mod = res.model
    t["summary"], _ = best(lambda: str(res.summary()), repeats)
    t["results"], _ = best(
        lambda: GLMResults(mod, res.params, res.normalized_cov_params, res.scale).bse, repeats
    )
    for cov in ("HC0", "HC1"):
        t[cov], _ = best(
            lambda cov=cov: (
                GLMResults(mod, res.params, res.normalized_cov_params, res.scale, cov_type=cov).bse
            ),
            repeats,
        )
    t["cluster"], _ = best(
        lambda: (
            GLMResults(
                mod,
                res.params,
                res.normalized_cov_params,
                res.scale,
                cov_type="cluster",
                cov_kwds={"groups": groups},
            ).bse
        ),
        repeats,
    )
    t["predict_1000"], _ = best(lambda: res.get_prediction(X[:1000]).summary_frame(), repeats)
    t["predict_all"], _ = best(lambda: res.get_prediction(X).summary_frame(), repeats)

    def fresh():
        return GLMResults(mod, res.params, res.normalized_cov_params, res.scale)

    f = fresh()
    t["residuals"], _ = best(lambda: (f.resid_pearson, f.resid_deviance), 1)
    f = fresh()

    def influence():
        inf = f.get_influence()
        return inf.hat_matrix_diag, inf.cooks_distance

    t["influence"], _ = best(influence, 1)
    Xs = sm.add_constant(x[:, :n_small], prepend=False)
    t["nested_fit"], small = best(lambda: sm.GLM(y, Xs, family=sm.families.Poisson()).fit(), 1)

    def lr():
        stat = 2 * (res.llf - small.llf)
        return stat, st.chi2.sf(stat, d - n_small)

    t["lr_test"], (lr_stat, _) = best(lr, repeats)
    R = np.zeros((d - n_small, d + 1))
    R[:, n_small:d] = np.eye(d - n_small)
    t["wald_test"], wald = best(lambda: res.wald_test(R, scalar=True), repeats)
    stats = {
        "n_iter": int(res.fit_history["iteration"]),
        "deviance": float(res.deviance),
        "lr_statistic": float(lr_stat),
        "wald_statistic": float(np.asarray(wald.statistic).ravel()[0]),
        "params_head": [float(v) for v in res.params[:3]],
        "intercept": float(res.params[-1]),
    }
    return t, stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    x, y, groups = make_data(args.n, args.d)
    n_small = args.d - 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tg, tg_stats = run_torchglm(x, y, groups, args.repeats, n_small)
        sm_t, sm_stats = run_statsmodels(x, y, groups, args.repeats, n_small)
    rows = []
    print(f"{args.n} x {args.d} Poisson, one thread (torch.set_num_threads(1), OMP_NUM_THREADS=1)")
    print(f"{'operation':<14}{'torchglm s':>12}{'statsmodels s':>15}{'sm / tg':>10}")
    for op in tg:
        ratio = sm_t[op] / tg[op] if tg[op] > 0 else float("inf")
        rows.append(
            {"operation": op, "torchglm_s": tg[op], "statsmodels_s": sm_t[op], "ratio_sm_over_tg": ratio}
        )
        print(f"{op:<14}{tg[op]:>12.4f}{sm_t[op]:>15.4f}{ratio:>10.2f}")
    out = {
        "n": args.n,
        "d": args.d,
        "threads": {"torch": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]},
        "repeats": args.repeats,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "statsmodels": __import__("statsmodels").__version__,
        "operations": rows,
        "torchglm": tg_stats,
        "statsmodels_stats": sm_stats,
        "agreement": {
            "max_abs_params_head": max(
                abs(a - b) for a, b in zip(tg_stats["params_head"], sm_stats["params_head"])
            ),
            "rel_deviance": abs(tg_stats["deviance"] - sm_stats["deviance"]) / sm_stats["deviance"],
            "rel_lr": abs(tg_stats["lr_statistic"] - sm_stats["lr_statistic"]) / sm_stats["lr_statistic"],
            "rel_wald": abs(tg_stats["wald_statistic"] - sm_stats["wald_statistic"])
            / sm_stats["wald_statistic"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["agreement"]))


if __name__ == "__main__":
    main()
