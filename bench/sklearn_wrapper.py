"""What the scikit-learn layer costs (issue 13): wrapper vs core fit, and a grid search
against scikit-learn's own LogisticRegression.

1. ``torchglm.sklearn.LogisticRegression(C).fit(X, y)`` against the core
   ``torchglm.LogisticRegression(d, l2=1/(C n)).fit(X, y)`` on the same NumPy data
   (200k x 50 by default, solver ``auto``). The two fits run alternately, ``--repeats``
   times each; the minimum wall time of each is reported, and the overhead is
   ``wrapper / core - 1``. The wrapper's extra work (scikit-learn's ``validate_data``,
   label encoding, ``_check_sample_weight``, the NumPy copies of ``coef_``) is timed
   separately on the same data.
2. ``GridSearchCV(Pipeline(StandardScaler(), est), {C: 6 values}, cv=5)`` on
   breast_cancer, with ``est`` torchglm's and scikit-learn's ``LogisticRegression``
   (defaults otherwise; scikit-learn with ``max_iter=1000`` so that no fold stops
   early): wall time (min of ``--repeats``), best C and best mean CV accuracy, with
   ``n_jobs=--grid-jobs`` (default 1: in this process; ``--grid-jobs 2`` runs the folds
   in two worker processes, started by the first repeat and reused by the next:
   ``python bench/sklearn_small.py --sections grid_jobs`` times the cold start apart).

Run: ``python bench/sklearn_wrapper.py --threads 1 --repeats 5 --out bench/results/sklearn_wrapper.json``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings

import numpy as np
import sklearn
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array

import torchglm
import torchglm.sklearn as tgs

C_GRID = [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]


def _data(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal(d) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x @ w + 0.3)))).astype(np.int64)
    return x, y


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def overhead(n: int, d: int, repeats: int, C: float = 1.0) -> dict:
    x, y = _data(n, d)
    core_t, wrap_t = [], []
    for _ in range(repeats):
        core = torchglm.LogisticRegression(d, l2=1.0 / (C * n), dtype=torch.float64)
        t, core_result = _timed(lambda core=core: core.fit(x, y))
        core_t.append(t)
        est = tgs.LogisticRegression(C=C)
        t, _ = _timed(lambda est=est: est.fit(x, y))
        wrap_t.append(t)
    same = np.abs(est.coef_ - core.linear.weight.detach().numpy()).max()
    # the wrapper's own steps, on the same arrays
    parts = {
        "validate_data (check_array)": min(
            _timed(lambda: check_array(x, dtype=[np.float64, np.float32]))[0] for _ in range(repeats)
        ),
        "labels (check_classification_targets + np.unique)": min(
            _timed(lambda: (check_classification_targets(y), np.unique(y, return_inverse=True)))[0]
            for _ in range(repeats)
        ),
    }
    return {
        "n": n,
        "d": d,
        "C": C,
        "solver": core_result.solver,
        "n_iter": core_result.n_iter,
        "core_fit_s_min": min(core_t),
        "wrapper_fit_s_min": min(wrap_t),
        "core_fit_s_all": core_t,
        "wrapper_fit_s_all": wrap_t,
        "overhead": min(wrap_t) / min(core_t) - 1.0,
        "wrapper_steps_s": parts,
        "max_abs_coef_difference": float(same),
    }


def grid_search(repeats: int, n_jobs: int | None = None) -> dict:
    x, y = load_breast_cancer(return_X_y=True)
    out = {}
    for name, est, key in (
        ("torchglm", tgs.LogisticRegression(), "logisticregression__C"),
        ("scikit-learn", SkLogistic(max_iter=1000), "logisticregression__C"),
    ):
        times = []
        for _ in range(repeats):
            grid = GridSearchCV(make_pipeline(StandardScaler(), est), {key: C_GRID}, cv=5, n_jobs=n_jobs)
            t, _ = _timed(lambda grid=grid: grid.fit(x, y))
            times.append(t)
        out[name] = {
            "wall_s_min": min(times),
            "wall_s_all": times,
            "best_C": grid.best_params_[key],
            "best_score": float(grid.best_score_),
            "mean_test_score": [float(s) for s in grid.cv_results_["mean_test_score"]],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--grid-jobs", type=int, default=None, help="GridSearchCV's n_jobs")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # tiny folds may warn about separation; timings only
    result = {
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "torch": torch.__version__,
            "sklearn": sklearn.__version__,
            "numpy": np.__version__,
        },
        "overhead": overhead(args.n, args.d, args.repeats),
        "grid_jobs": args.grid_jobs,
        "grid_search": grid_search(args.repeats, args.grid_jobs),
    }
    o, g = result["overhead"], result["grid_search"]
    print(
        f"fit {o['n']} x {o['d']} logistic ({o['solver']}, {o['n_iter']} iter.): core {o['core_fit_s_min']:.3f} s, "
        f"wrapper {o['wrapper_fit_s_min']:.3f} s, overhead {100 * o['overhead']:+.1f}% "
        f"(max |coef difference| {o['max_abs_coef_difference']:.1e})"
    )
    for step, t in o["wrapper_steps_s"].items():
        print(f"  {step}: {1000 * t:.1f} ms")
    for name, r in g.items():
        print(
            f"GridSearchCV(cv=5, n_jobs={args.grid_jobs}, 6 C) breast_cancer, {name}: {r['wall_s_min']:.2f} s, "
            f"best C {r['best_C']}, best score {r['best_score']:.4f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
