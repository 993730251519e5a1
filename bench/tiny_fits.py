"""The fixed cost of tiny fits (issue 26): the 30 fits a ``GridSearchCV(cv=5)`` over 6
values of ``C`` makes on breast_cancer (each fold's training rows standardized, 455 x 30),
by ``torchglm.sklearn.LogisticRegression`` and scikit-learn's (``max_iter=1000``),
interleaved, in this process's CPU time (min of ``--repeats``; robust to a busy machine's
wall-clock stretch), with torchglm's count of torch operations per fit (``torch.profiler``:
ATen calls not nested in another) and its passes. One thread each: torch's, and every
BLAS pool's (threadpoolctl; scikit-learn's OpenBLAS otherwise ran two threads, whose spin
doubled its fits' CPU time: 5.2 against 2.7 ms a fit without ``OMP_NUM_THREADS=1``).

    python bench/tiny_fits.py --repeats 15      # ~1 minute; writes bench/results/tiny_fits.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np
import sklearn
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

import torchglm.sklearn as tgs

C_GRID = [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]


def fits() -> list[tuple[np.ndarray, np.ndarray, float]]:
    x, y = load_breast_cancer(return_X_y=True)
    out = []
    for train, _ in StratifiedKFold(5).split(x, y):
        xt = StandardScaler().fit(x[train]).transform(x[train])
        out += [(xt, y[train], c) for c in C_GRID]
    return out


def op_count(x, y, C: float) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tgs.LogisticRegression(C=C).fit(x, y)
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    return sum(1 for e in aten if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="bench/results/tiny_fits.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    threadpool_limits(1)
    warnings.simplefilter("ignore")
    jobs = fits()
    runs = {
        "torchglm": lambda: [tgs.LogisticRegression(C=c).fit(x, y) for x, y, c in jobs],
        "scikit-learn": lambda: [SkLogistic(C=c, max_iter=1000).fit(x, y) for x, y, c in jobs],
    }
    for run in runs.values():
        run()  # warm
    times = {name: [] for name in runs}
    for r in range(args.repeats):
        for name, run in runs.items() if r % 2 else reversed(runs.items()):
            t = time.process_time()
            run()
            times[name].append((time.process_time() - t) / len(jobs))
    per_fit = {name: min(t) for name, t in times.items()}
    x, y, _ = jobs[0]
    est = tgs.LogisticRegression(C=1.0).fit(x, y)
    result = {
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "sklearn": sklearn.__version__,
        "fits": len(jobs),
        "cpu_s_per_fit_min": per_fit,
        "cpu_s_per_fit_all": times,
        "ratio": per_fit["torchglm"] / per_fit["scikit-learn"],
        "C=1": {
            "torch_ops": op_count(x, y, 1.0),
            "passes": est.fit_result_.history[-1]["passes"],
            "n_iter": int(est.n_iter_[0]),
        },
    }
    print(
        f"per fit (CPU, min of {args.repeats}): torchglm {1e3 * per_fit['torchglm']:.2f} ms, scikit-learn "
        f"{1e3 * per_fit['scikit-learn']:.2f} ms, ratio {result['ratio']:.2f}; C=1: {result['C=1']['torch_ops']} "
        f"torch ops, {result['C=1']['passes']} passes (load {result['load_average'][0]:.1f})"
    )
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
