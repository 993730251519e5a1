"""Wall time of ``fit(..., solver)`` on bench/newton.py's five problems, min of 3 runs.

A quick before/after check of a solver change (bench/newton.py is the full comparison
with the peers): run it once per checkout, the older one put first on the path::

    OMP_NUM_THREADS=1 python bench/fit_times.py                                 # this checkout
    PYTHONPATH=/path/to/old/checkout OMP_NUM_THREADS=1 python bench/fit_times.py  # another

Prints one line per (problem, solver, tol): time, iterations, converged, objective.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
from newton import ALPHA, make_problem, objective  # noqa: E402

PROBLEMS = [
    ("logit", 200_000, 50, None),
    ("logit", 1_000_000, 20, None),
    ("logit", 50_000, 500, None),
    ("softmax", 100_000, 100, 10),
    ("probit", 200_000, 50, None),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import torchglm
    from torchglm.models import GeneralizedLinearModel
    from torchglm.solvers import fit

    warnings.simplefilter("ignore")
    print(f"torchglm from {os.path.dirname(torchglm.__file__)}, {args.threads} thread(s)")
    for kind, n, d, K in PROBLEMS:
        X, y = make_problem(kind, n, d, K)
        x, t = torch.from_numpy(X), torch.from_numpy(y)
        fam, link = ("categorical", "softmax") if kind == "softmax" else ("bernoulli", kind)
        for solver in ["auto"] if kind == "softmax" else ["auto", "newton"]:
            for tol in (1e-8, 1e-10):
                walls = []
                for _ in range(args.repeats):
                    m = GeneralizedLinearModel(d, fam, link, n_classes=K, l2=ALPHA, dtype=torch.float64)
                    t0 = time.perf_counter()
                    r = fit(m, x, t, solver=solver, tol=tol, max_iter=5000)
                    walls.append(time.perf_counter() - t0)
                obj = objective(kind, X, y, m.linear.weight.detach().numpy(), m.linear.bias.detach().numpy())
                print(
                    f"{kind:8s} n={n:<8d} d={d:<4d} {solver:7s} tol={tol:g}  {min(walls):.3f} s  "
                    f"iters {r.n_iter:3d}  converged {r.converged}  objective {obj:.12f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
