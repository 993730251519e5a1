"""Benchmark: L2-penalized logistic regression on a sparse bag-of-words design.

n = 25,000 documents, d = 10,000 terms, 150 distinct terms per document (CSR, values
1), alpha = 1e-3 on the mean NLL (scikit-learn C = 1 / (alpha n)). torchglm's
``auto`` (L-BFGS with its verifying Newton-CG finish) against scikit-learn's lbfgs
and liblinear at tol 1e-8, one thread, best of ``--repeats``; every objective is
evaluated here in float64 and reported as the gap to the best one.

    python bench/sparse.py                # ~1 minute
    python bench/sparse.py --threads 2
    python bench/sparse.py --torchglm /path/to/old/checkout --repeats 1 --out /tmp/before.json
    python bench/sparse.py --layout coo --out /tmp/coo.json   # torchglm given a torch COO tensor

Writes bench/results/sparse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings

import numpy as np
import scipy.sparse as sp
import torch

ALPHA = 1e-3


def problem(n=25_000, d=10_000, k=150, seed=0):
    rng = np.random.default_rng(seed)
    cols = np.sort(np.stack([rng.choice(d, k, replace=False) for _ in range(n)]), axis=1)
    X = sp.csr_matrix((np.ones(n * k), cols.ravel(), np.arange(0, n * k + 1, k)), shape=(n, d))
    w = rng.standard_normal(d) * 0.1
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w)))).astype(np.int64)
    return X, y


def objective(X, y, coef, intercept):
    eta = X @ coef + intercept
    return float(np.mean(np.logaddexp(0, eta) - y * eta) + ALPHA / 2 * coef @ coef)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--layout",
        choices=["csr", "coo"],
        default="csr",
        help="what torchglm is given: the scipy CSR matrix, or a torch COO tensor",
    )
    ap.add_argument("--torchglm", default=None, metavar="CHECKOUT", help="import torchglm from this checkout")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "sparse.json"))
    args = ap.parse_args()
    if args.torchglm:
        import sys

        sys.path.insert(0, os.path.abspath(args.torchglm))
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    warnings.simplefilter("ignore")
    from sklearn.linear_model import LogisticRegression as SK

    from torchglm.models import LogisticRegression
    from torchglm.solvers import fit

    X, y = problem()
    n, d = X.shape

    if args.layout == "coo":
        c = X.tocoo()
        X_tg = torch.sparse_coo_tensor(np.vstack([c.row, c.col]), c.data, c.shape).coalesce()
    else:
        X_tg = X

    def tg():
        m = LogisticRegression(d, l2=ALPHA, dtype=torch.float64)
        r = fit(m, X_tg, y, solver="auto")
        # (linear.* reads: the bench also runs older checkouts, before the GLM accessors)
        return (
            m.linear.weight.detach().numpy().ravel(),
            float(m.linear.bias.detach()),
            r.n_iter,
            r.converged,
        )

    def sk(solver):
        def run():
            est = SK(C=1 / (ALPHA * n), solver=solver, tol=1e-8, max_iter=10_000).fit(X, y)
            return est.coef_.ravel(), float(est.intercept_[0]), int(np.max(est.n_iter_)), True

        return run

    rows = {}
    for name, f in [
        ("torchglm auto", tg),
        ("sklearn lbfgs", sk("lbfgs")),
        ("sklearn liblinear", sk("liblinear")),
    ]:
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            coef, b, it, conv = f()
            times.append(time.perf_counter() - t)
        rows[name] = {
            "time_s": min(times),
            "n_iter": it,
            "converged": conv,
            "objective": objective(X, y, coef, b),
        }
    best = min(r["objective"] for r in rows.values())
    for name, r in rows.items():
        r["gap"] = r["objective"] - best
        print(f"{name:20s} {r['time_s']:7.3f} s  {r['n_iter']:4d} it  gap {r['gap']:.2e}")
    import torchglm

    out = {
        "problem": {"n": n, "d": d, "nnz_per_row": 150, "alpha": ALPHA, "torchglm_input": args.layout},
        "torchglm": os.path.dirname(torchglm.__file__),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
        },
        "methods": rows,
    }
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
