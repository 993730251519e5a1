"""Benchmark: L2-penalized logistic / softmax regression and multinomial naive Bayes on
sparse bag-of-words designs.

Problems (``--problem``):

- ``bow``: n = 25,000 documents, d = 10,000 terms, 150 distinct terms per document
  (CSR, values 1, float64).
- ``hashed``: n = 500,000 documents hashed into d = 2^18 buckets, 120 tokens per
  document drawn log-uniformly (Zipf-like) from a vocabulary of 10^6 (about 100
  distinct buckets per row), counts as float32 CSR with int32 indices.

The GLM minimizes the mean NLL + alpha/2 ||W||^2 (alpha = 1e-3, the intercept
unpenalized; scikit-learn C = 1 / (alpha n)). ``--classes 2`` (default): torchglm's
``auto`` against scikit-learn's lbfgs and liblinear at tol 1e-8; ``--classes K``:
softmax over K classes against scikit-learn's (multinomial) lbfgs. Every objective
is evaluated here in float64 and reported as the gap to the best one. Then
``MultinomialNB(alpha=1)`` against scikit-learn's (fit time; the largest difference
of ``predict_proba`` on 2,000 rows). One thread, best of ``--repeats``; ratios are
to the fastest peer of the same run, in wall seconds and in the process's CPU seconds
(``cpu_s``: on a loaded machine the wall time also counts other processes' turns).

The torchglm GLM fit is also run once in a child process that reports its peak
resident memory above what it held before the fit (``VmHWM`` after resetting it
through ``/proc/self/clear_refs``), as a multiple of the CSR's own bytes.

    python bench/sparse.py                                 # ~1 minute
    python bench/sparse.py --classes 20
    python bench/sparse.py --problem hashed                # several minutes
    python bench/sparse.py --problem hashed --classes 20 --repeats 1
    python bench/sparse.py --threads 2
    python bench/sparse.py --torchglm /path/to/old/checkout --repeats 1 --out /tmp/before.json
    python bench/sparse.py --layout coo --out /tmp/coo.json   # torchglm given a torch COO tensor

Writes bench/results/sparse.json (``bow``, 2 classes) or
bench/results/sparse_<problem>[_k<K>].json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

ALPHA = 1e-3


def bow(n=25_000, d=10_000, k=150, seed=0):
    rng = np.random.default_rng(seed)
    cols = np.sort(np.stack([rng.choice(d, k, replace=False) for _ in range(n)]), axis=1)
    X = sp.csr_matrix((np.ones(n * k), cols.ravel(), np.arange(0, n * k + 1, k)), shape=(n, d))
    return X, rng


def hashed(n=500_000, d=2**18, tokens=120, vocabulary=10**6, seed=0):
    rng = np.random.default_rng(seed)
    X = None
    for lo in range(0, n, 50_000):  # in blocks: the token arrays stay small
        m = min(50_000, n - lo)
        word = np.exp(rng.random(m * tokens) * np.log(vocabulary)).astype(np.int64)  # log-uniform ranks
        bucket = ((word * 2654435761) % (2**31 - 1)) % d  # a multiplicative hash
        rows = np.repeat(np.arange(m, dtype=np.int32), tokens)
        block = sp.coo_matrix(
            (np.ones(m * tokens, np.float32), (rows, bucket.astype(np.int32))), shape=(m, d)
        ).tocsr()  # sums repeated tokens into counts
        block.sort_indices()
        X = block if X is None else sp.vstack([X, block], format="csr")
    X.indptr, X.indices = X.indptr.astype(np.int32), X.indices.astype(np.int32)
    return X, rng


def labels(X, rng, classes):
    if classes == 2:
        w = rng.standard_normal(X.shape[1]) * 0.1
        return (rng.random(X.shape[0]) < 1 / (1 + np.exp(-(X @ w)))).astype(np.int64)
    W = rng.standard_normal((X.shape[1], classes)) * 0.1
    return np.argmax(np.asarray(X @ W) + rng.gumbel(size=(X.shape[0], classes)), axis=1).astype(np.int64)


def problem(name="bow", classes=2, rows=None):
    if name == "bow":
        X, rng = bow() if rows is None else bow(n=rows)
    else:
        X, rng = hashed() if rows is None else hashed(n=rows)
    return X, labels(X, rng, classes)


def objective(X, y, coef, intercept):
    """Mean NLL + alpha/2 ||W||^2 in float64; ``coef`` (K, d) or (d,) for two classes."""
    coef = np.asarray(coef, np.float64)
    if coef.ndim == 1:
        eta = X @ coef + intercept
        return float(np.mean(np.logaddexp(0, eta) - y * eta) + ALPHA / 2 * coef @ coef)
    eta = np.asarray(X @ coef.T) + intercept
    nll = logsumexp(eta, axis=1) - eta[np.arange(len(y)), y]
    return float(np.mean(nll) + ALPHA / 2 * np.sum(coef * coef))


def torchglm_fit(X, y, classes, X_tg=None):
    """torchglm's ``auto`` fit: ``(coef, intercept, n_iter, converged, passes)``."""
    import torch

    from torchglm.models import LogisticRegression, SoftmaxRegression
    from torchglm.solvers import fit

    d = X.shape[1]
    if classes == 2:
        m = LogisticRegression(d, l2=ALPHA, dtype=torch.float64)
    else:
        m = SoftmaxRegression(d, classes, l2=ALPHA, dtype=torch.float64)
    r = fit(m, X if X_tg is None else X_tg, y, solver="auto")
    # (linear.* reads: the bench also runs older checkouts, before the GLM accessors)
    coef = m.linear.weight.detach().numpy()
    bias = m.linear.bias.detach().numpy()
    if classes == 2:
        coef, bias = coef.ravel(), float(bias[0])
    hvps = sum(getattr(r.extra, "cg_iterations", None) or [])
    return coef, bias, r.n_iter, r.converged, {"passes": r.extra.passes, "hvps": hvps}


def sklearn_fit(solver, classes):
    from sklearn.linear_model import LogisticRegression as SK

    def run(X, y):
        est = SK(C=1 / (ALPHA * X.shape[0]), solver=solver, tol=1e-8, max_iter=10_000).fit(X, y)
        coef, b = est.coef_, est.intercept_
        if classes == 2:
            coef, b = coef.ravel(), float(b[0])
        return coef, b, int(np.max(est.n_iter_)), True, {}

    return run


CHILD = """
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path[:0] = json.loads(sys.argv[1])
import torch
torch.set_num_threads(int(sys.argv[4]))
from sparse import problem, torchglm_fit

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) * 1024

X, y = problem(sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[5]))
torchglm_fit(X[:2000], y[:2000], int(sys.argv[3]))  # imports and warms up torch and torchglm
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
before = status("VmRSS")
torchglm_fit(X, y, int(sys.argv[3]))
print(json.dumps({"rss_before": before, "peak": status("VmHWM")}))
"""


def fit_memory(args, path):
    """Peak resident bytes of the torchglm fit above the process's bytes before it."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            json.dumps(path),
            args.problem,
            str(args.classes),
            str(args.threads),
            json.dumps(args.rows),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
    )
    m = json.loads(out.stdout.strip().splitlines()[-1])
    return {**m, "fit_extra": m["peak"] - m["rss_before"]}


def naive_bayes(X, y, classes, repeats):
    """torchglm's ``MultinomialNB`` against scikit-learn's: fit times and agreement."""
    import torch
    from sklearn.naive_bayes import MultinomialNB as SKNB

    from torchglm.models import MultinomialNB

    def tg():
        nb = MultinomialNB(X.shape[1], classes, alpha=1.0)
        nb.fit(X, y)
        return nb

    rows = {}
    for name, f in [
        ("torchglm MultinomialNB", tg),
        ("sklearn MultinomialNB", lambda: SKNB(alpha=1.0).fit(X, y)),
    ]:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            est = f()
            times.append(time.perf_counter() - t)
        rows[name] = {"time_s": min(times), "est": est}
    head = X[:2000]
    p_tg = rows["torchglm MultinomialNB"].pop("est").predict_proba(head)
    p_tg = p_tg.detach().numpy() if isinstance(p_tg, torch.Tensor) else np.asarray(p_tg)
    p_sk = rows["sklearn MultinomialNB"].pop("est").predict_proba(head)
    rows["torchglm MultinomialNB"]["max_abs_proba_diff"] = float(np.max(np.abs(p_tg - p_sk)))
    return rows


def compare(args, X, y, X_tg):
    """The GLM fits side by side: one row per method, ratios to the fastest peer."""
    methods = [("torchglm auto", lambda X, y: torchglm_fit(X, y, args.classes, X_tg))]
    methods.append(("sklearn lbfgs", sklearn_fit("lbfgs", args.classes)))
    if args.classes == 2:
        methods.append(("sklearn liblinear", sklearn_fit("liblinear", args.classes)))
    rows = {}
    for name, f in methods:
        times, cpu = [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            coef, b, it, conv, extra = f(X, y)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        rows[name] = {"time_s": min(times), "cpu_s": min(cpu), "n_iter": it, "converged": conv, **extra}
        rows[name]["objective"] = objective(X, y, coef, b)
    best = min(r["objective"] for r in rows.values())
    peers = [r for k, r in rows.items() if not k.startswith("torchglm")]
    fastest = min(r["time_s"] for r in peers)
    fastest_cpu = min(r["cpu_s"] for r in peers)
    for name, r in rows.items():
        r["gap"] = r["objective"] - best
        r["ratio_to_fastest_peer"] = r["time_s"] / fastest
        # CPU seconds of this (one-thread) process: on a loaded machine the wall time
        # also counts the time other processes held the core.
        r["cpu_ratio_to_fastest_peer"] = r["cpu_s"] / fastest_cpu
        passes = f"  {r['passes']} passes + {r['hvps']} Hv" if "passes" in r else ""
        print(
            f"{name:24s} {r['time_s']:7.3f} s  x{r['ratio_to_fastest_peer']:.2f}  cpu {r['cpu_s']:7.3f} s"
            f"  x{r['cpu_ratio_to_fastest_peer']:.2f}  {r['n_iter']:4d} it  gap {r['gap']:.2e}{passes}"
        )

    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", choices=["bow", "hashed"], default="bow")
    ap.add_argument("--classes", type=int, default=2, help="2: logistic; more: softmax")
    ap.add_argument("--rows", type=int, default=None, help="fewer rows than the problem's (a quick look)")
    ap.add_argument(
        "--only-memory", action="store_true", help="only the child process measuring the fit's memory"
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--layout",
        choices=["csr", "coo"],
        default="csr",
        help="what torchglm is given: the scipy CSR matrix, or a torch COO tensor",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the child process measuring peak memory")
    ap.add_argument("--no-nb", action="store_true", help="skip MultinomialNB")
    ap.add_argument(
        "--torchglm",
        default=None,
        metavar="CHECKOUT",
        help="import torchglm from this checkout (default: this one)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    if args.out is None:
        name = "sparse" if args.problem == "bow" else f"sparse_{args.problem}"
        name += "" if args.classes == 2 else f"_k{args.classes}"
        name += "" if args.rows is None else f"_n{args.rows}"
        name += "_memory" if args.only_memory else ""
        args.out = os.path.join(here, "results", name + ".json")
    # torchglm from --torchglm, else from the checkout this script is in
    path = [here, os.path.abspath(args.torchglm or os.path.join(here, os.pardir))]
    sys.path[:0] = path
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")

    t = time.perf_counter()
    X, y = problem(args.problem, args.classes, args.rows)
    made = time.perf_counter() - t
    n, d = X.shape
    csr_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    print(
        f"{args.problem}: {n} x {d}, {X.nnz / n:.1f} stored per row, {csr_bytes / 2**20:.0f} MiB CSR ({made:.1f} s)"
    )

    X_tg = None
    if args.layout == "coo":
        c = X.tocoo()
        X_tg = torch.sparse_coo_tensor(np.vstack([c.row, c.col]), c.data, c.shape).coalesce()

    rows = {} if args.only_memory else compare(args, X, y, X_tg)
    out = {
        "problem": {
            "name": args.problem,
            "n": n,
            "d": d,
            "classes": args.classes,
            "nnz_per_row": X.nnz / n,
            "values": str(X.data.dtype),
            "csr_bytes": csr_bytes,
            "alpha": ALPHA,
            "torchglm_input": args.layout,
        },
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
            "load_average": os.getloadavg(),
        },
        "methods": rows,
    }
    if not (args.no_nb or args.only_memory):
        nb = naive_bayes(X, y, args.classes, args.repeats)
        fastest = nb["sklearn MultinomialNB"]["time_s"]
        for name, r in nb.items():
            r["ratio_to_fastest_peer"] = r["time_s"] / fastest
            print(f"{name:24s} {r['time_s']:7.3f} s  x{r['ratio_to_fastest_peer']:.2f}")
        out["naive_bayes"] = nb
    if not args.no_memory and args.layout == "csr":
        mem = fit_memory(args, path)
        mem["fit_extra_over_csr"] = mem["fit_extra"] / csr_bytes
        print(
            f"torchglm fit peak memory: {mem['fit_extra'] / 2**20:.0f} MiB above the "
            f"{mem['rss_before'] / 2**20:.0f} MiB before it = {mem['fit_extra_over_csr']:.2f}x the CSR"
        )
        out["torchglm_fit_memory"] = mem
    import torchglm

    out["torchglm"] = os.path.dirname(torchglm.__file__)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
