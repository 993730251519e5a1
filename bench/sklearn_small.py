"""Small problems through the scikit-learn wrappers, as a new user fits them (issue 26):
``torchglm.sklearn.LogisticRegression`` against scikit-learn's, on a quiet machine and
beside a busy process.

Problems (features standardized for the two toy sets, as a user's pipeline would):

- ``breast_cancer`` (569 x 30, binary) and ``digits`` (1,797 x 64, 10 classes);
- ``dense``: 50,000 x 100 Gaussian features, binary (a problem whose products torch
  runs on several threads: the one the loaded comparison is about);
- ``tfidf_binary`` / ``tfidf_20``: a 20-newsgroups-sized TF-IDF matrix made up here
  (:func:`tfidf`: 11,000 documents, ~94,000 terms, ~175 terms per document, Zipf
  background words plus 1,500 topic words per class, scikit-learn's
  ``TfidfTransformer``), with its 20 classes and a binary variant (classes 0-9 vs 10-19).

Each problem is fitted at ``C`` (default 10, the issue's) by both estimators with their
defaults (scikit-learn with ``max_iter=1000`` so that no fit stops early), and by
scikit-learn at ``tol=1e-8`` (its default tolerance stops 1e-4 to 1e-2 above the
optimum in relative objective; torchglm's certifies it), best of
``--repeats`` (one repeat where a fit takes over ``--long`` seconds), in wall time and in
this process's CPU time (on a shared machine, load stretches long fits' wall time more
than short ones': compare CPU times there). Each fit's
objective ``C sum_i nll_i + ||W||^2 / 2`` is evaluated here in float64 and reported
as the relative gap to the lower of the two. ``grid_jobs``: ``GridSearchCV(cv=5,
n_jobs=2)`` over 6 values of ``C`` (breast_cancer, in a ``StandardScaler`` pipeline),
cold (the worker pool shut down first, so the workers start and import) and warm (the
same pool again).

``--load``: every section runs twice, quiet, then with a busy process beside it (a
NumPy matmul loop with its BLAS threads on every CPU, stopped at the end or after
``--load-seconds``), and the report gives each ratio torchglm / scikit-learn quiet and
loaded, and each estimator's slowdown loaded / quiet.

``--threads``: torch's and the BLAS threads of this process (``default``: leave both as
they start, which is what the loaded comparison is about: the library's own default;
torchglm is then also timed with ``n_jobs=-1``, one thread per CPU whatever the load,
the default before ``torchglm.threads``).

    python bench/sklearn_small.py                                   # ~3 minutes, one thread
    python bench/sklearn_small.py --threads default --load --problems breast_cancer,digits,dense
    python bench/sklearn_small.py --sections small --problems breast_cancer,digits

Writes bench/results/sklearn_small.json (``--out``).
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
import sklearn
import torch
from scipy.special import logsumexp
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

import torchglm.sklearn as tgs

C_GRID = [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]
BUSY = """
import sys, time
import numpy as np
a = np.random.default_rng(0).standard_normal((1500, 1500))
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a = a @ a
    a /= np.abs(a).max()
"""


def tfidf(n_docs: int = 11_000, vocab: int = 100_000, n_classes: int = 20, seed: int = 0):
    """A made-up TF-IDF matrix of 20-newsgroups' size: CSR (n_docs, terms used) and labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n_docs)
    lengths = np.clip(rng.lognormal(5.3, 0.7, n_docs).astype(int), 20, 3000)
    zipf = 1.0 / np.arange(1, vocab + 1) ** 1.05
    topic_words = np.stack([rng.choice(vocab, 1500, replace=False) for _ in range(n_classes)])
    topic_p = 1.0 / np.arange(1, 1501) ** 0.9
    doc = np.repeat(np.arange(n_docs), lengths)
    terms = rng.choice(vocab, doc.size, p=zipf / zipf.sum())
    from_topic = rng.random(doc.size) < 0.15
    terms[from_topic] = topic_words[
        y[doc[from_topic]], rng.choice(1500, int(from_topic.sum()), p=topic_p / topic_p.sum())
    ]
    counts = sp.csr_matrix((np.ones(doc.size), (doc, terms)), shape=(n_docs, vocab))
    counts.sum_duplicates()
    counts = counts[:, np.flatnonzero(counts.getnnz(axis=0))]
    return TfidfTransformer().fit_transform(counts).tocsr(), y


def problems(names):
    out = {}
    if "breast_cancer" in names:
        x, y = load_breast_cancer(return_X_y=True)
        out["breast_cancer"] = (StandardScaler().fit_transform(x), y)
    if "digits" in names:
        x, y = load_digits(return_X_y=True)
        out["digits"] = (StandardScaler().fit_transform(x), y)
    if "dense" in names:  # large enough for torch to run its products on several threads
        rng = np.random.default_rng(0)
        x = rng.standard_normal((50_000, 100))
        eta = x @ (rng.standard_normal(100) / 10) + 0.3
        out["dense"] = (x, (rng.random(50_000) < 1 / (1 + np.exp(-eta))).astype(np.int64))
    if {"tfidf_binary", "tfidf_20"} & set(names):
        x, y = tfidf()
        if "tfidf_binary" in names:
            out["tfidf_binary"] = (x, (y >= 10).astype(np.int64))
        if "tfidf_20" in names:
            out["tfidf_20"] = (x, y)
    return out


def objective(x, y, coef, intercept, C: float) -> float:
    """scikit-learn's ``C sum_i nll_i + ||W||^2 / 2`` in float64 (labels 0..K-1)."""
    eta = np.asarray(x @ coef.T) + intercept
    if eta.shape[1] == 1:
        e = eta[:, 0]
        nll = np.logaddexp(0, e) - (y == 1) * e
    else:
        nll = logsumexp(eta, axis=1) - eta[np.arange(len(y)), y]
    return float(C * nll.sum() + 0.5 * np.sum(coef * coef))


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _timed_cpu(fn):
    """Wall and CPU seconds of ``fn()`` (the CPU time of this process, all its threads:
    on a shared machine the one-thread comparison that load does not distort)."""
    c = time.process_time()
    t, out = _timed(fn)
    return t, time.process_time() - c, out


def small(data: dict, C: float, repeats: int, long: float, all_threads: bool = False) -> dict:
    """Each problem fitted by the estimators; with ``all_threads``, also by torchglm with
    ``n_jobs=-1`` (one thread per CPU whatever the load: the default before
    :mod:`torchglm.threads` capped it)."""
    rows = {}
    estimators = [
        ("torchglm", lambda: tgs.LogisticRegression(C=C)),
        ("scikit-learn", lambda: SkLogistic(C=C, max_iter=1000)),
        ("scikit-learn tol=1e-8", lambda: SkLogistic(C=C, tol=1e-8, max_iter=10_000)),
    ]
    if all_threads:
        estimators.append(("torchglm n_jobs=-1", lambda: tgs.LogisticRegression(C=C, n_jobs=-1)))
    for name, (x, y) in data.items():
        row = {"n": x.shape[0], "d": x.shape[1], "classes": int(len(np.unique(y)))}
        for who, make in estimators:
            times, cpu = [], []
            while len(times) < repeats and not (times and times[0] > long):
                t, c, est = _timed_cpu(lambda make=make, x=x, y=y: make().fit(x, y))
                times.append(t)
                cpu.append(c)
            r = {
                "fit_s": min(times),
                "fit_s_all": times,
                "cpu_s": min(cpu),
                "n_iter": int(np.max(est.n_iter_)),
            }
            if who.startswith("torchglm"):
                res = est.fit_result_
                r.update(solver=res.solver, passes=res.extra.passes, converged=bool(res.converged))
            r["objective"] = objective(x, y, est.coef_, est.intercept_, C)
            row[who] = r
        who = ("torchglm", "scikit-learn", "scikit-learn tol=1e-8")
        best = min(row[w]["objective"] for w in who)
        for w in who:
            row[w]["relative_gap"] = (row[w]["objective"] - best) / abs(best)
        row["ratio"] = row["torchglm"]["fit_s"] / row["scikit-learn"]["fit_s"]
        row["ratio_tight"] = row["torchglm"]["fit_s"] / row["scikit-learn tol=1e-8"]["fit_s"]
        row["cpu_ratio"] = row["torchglm"]["cpu_s"] / row["scikit-learn"]["cpu_s"]
        row["cpu_ratio_tight"] = row["torchglm"]["cpu_s"] / row["scikit-learn tol=1e-8"]["cpu_s"]
        rows[name] = row
        tg, sk_, st = (row[w] for w in who)
        print(
            f"  {name:14s} torchglm {tg['fit_s']:7.3f} s ({tg['solver']}, {tg['n_iter']} it, "
            f"{tg['passes']} passes, gap {tg['relative_gap']:.1e}) | scikit-learn {sk_['fit_s']:7.3f} s "
            f"({sk_['n_iter']} it, gap {sk_['relative_gap']:.1e}), ratio {row['ratio']:.2f} | "
            f"tol=1e-8 {st['fit_s']:7.3f} s ({st['n_iter']} it, gap {st['relative_gap']:.1e}), "
            f"ratio {row['ratio_tight']:.2f} | CPU-time ratios {row['cpu_ratio']:.2f}, "
            f"{row['cpu_ratio_tight']:.2f}",
            flush=True,
        )
        if all_threads:
            row["ratio_all_threads"] = row["torchglm n_jobs=-1"]["fit_s"] / row["scikit-learn"]["fit_s"]
            print(f"  {'':14s} torchglm n_jobs=-1 {row['torchglm n_jobs=-1']['fit_s']:7.3f} s", flush=True)
    return rows


def _tree_cpu_s() -> float | None:
    """CPU seconds (user + system) of this process and every process below it (the
    worker pool's), from Linux's ``/proc``; ``None`` elsewhere. On a shared machine the
    sum over the pool is the load-robust measure of a parallel grid search: its wall
    time waits for CPUs that other processes hold."""
    try:
        parent, ticks = {}, {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parent[int(entry)] = int(fields[1])
                ticks[int(entry)] = int(fields[11]) + int(fields[12])
    except OSError:
        return None
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        kids = [c for c, p in parent.items() if p == pid and c not in tree]
        tree.update(kids)
        frontier += kids
    return sum(ticks.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


def _shutdown_workers():
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


def grid_jobs(n_jobs: int, repeats: int) -> dict:
    x, y = load_breast_cancer(return_X_y=True)
    out = {}
    for who, est in (
        ("torchglm", tgs.LogisticRegression()),
        ("scikit-learn", SkLogistic(max_iter=1000)),
    ):
        row = {}
        for mode in ("cold", "warm"):
            times, cpu = [], []
            for _ in range(repeats):
                if mode == "cold":
                    _shutdown_workers()
                grid = GridSearchCV(
                    make_pipeline(StandardScaler(), est),
                    {"logisticregression__C": C_GRID},
                    cv=5,
                    n_jobs=n_jobs,
                )
                c = _tree_cpu_s()
                t, _ = _timed(lambda grid=grid: grid.fit(x, y))
                times.append(t)
                if c is not None:
                    cpu.append(_tree_cpu_s() - c)
            row[mode] = {"wall_s": min(times), "wall_s_all": times}
            if cpu:
                row[mode].update(cpu_s=min(cpu), cpu_s_all=cpu)
        row["best_C"] = grid.best_params_["logisticregression__C"]
        row["best_score"] = float(grid.best_score_)
        out[who] = row
    _shutdown_workers()
    for mode in ("cold", "warm"):
        tg, sk_ = out["torchglm"][mode], out["scikit-learn"][mode]
        out[f"ratio_{mode}"] = tg["wall_s"] / sk_["wall_s"]
        cpu = ""
        if "cpu_s" in tg and "cpu_s" in sk_:
            out[f"cpu_ratio_{mode}"] = tg["cpu_s"] / sk_["cpu_s"]
            cpu = (
                f"; CPU of the process and its workers: {tg['cpu_s']:.2f} s against {sk_['cpu_s']:.2f} s, "
                f"ratio {out[f'cpu_ratio_{mode}']:.2f}"
            )
        print(
            f"  GridSearchCV(cv=5, n_jobs={n_jobs}, 6 C) breast_cancer {mode}: torchglm "
            f"{tg['wall_s']:.2f} s, scikit-learn {sk_['wall_s']:.2f} s, ratio {out[f'ratio_{mode}']:.2f}{cpu}",
            flush=True,
        )
    return out


def run_sections(args, data) -> dict:
    out = {}
    if "small" in args.sections:
        out["small"] = small(data, args.C, args.repeats, args.long, all_threads=args.threads == "default")
    if "grid_jobs" in args.sections:
        out["grid_jobs"] = grid_jobs(2, args.repeats)
    return out


def _ratios(section: dict) -> dict:
    """``{row: torchglm/scikit-learn ratio}`` of a section's results."""
    if "ratio_cold" in section:
        return {"cold": section["ratio_cold"], "warm": section["ratio_warm"]}
    return {name: row["ratio"] for name, row in section.items()}


def compare(quiet: dict, loaded: dict) -> dict:
    """Ratios quiet vs loaded, and each side's slowdown loaded / quiet."""
    out = {}
    for section in quiet:
        rq, rl = _ratios(quiet[section]), _ratios(loaded[section])
        rows = {}
        for key in rq:
            if section == "small":
                q, l_ = quiet[section][key], loaded[section][key]
                slow = {w: l_[w]["fit_s"] / q[w]["fit_s"] for w in q if isinstance(q[w], dict)}
            else:
                slow = {
                    w: loaded[section][w][key]["wall_s"] / quiet[section][w][key]["wall_s"]
                    for w in ("torchglm", "scikit-learn")
                }
            rows[key] = {"ratio_quiet": rq[key], "ratio_loaded": rl[key], "slowdown": slow}
            slowdowns = ", ".join(f"{w} {v:.2f}x" for w, v in slow.items())
            print(f"  {section}/{key}: ratio quiet {rq[key]:.2f}, loaded {rl[key]:.2f}; slowdown {slowdowns}")
        out[section] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sections", default="small,grid_jobs")
    parser.add_argument("--problems", default="breast_cancer,digits,dense,tfidf_binary,tfidf_20")
    parser.add_argument("--C", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long", type=float, default=5.0, help="one repeat for fits slower than this (s)")
    parser.add_argument("--threads", default="1", help="threads of this process, or 'default'")
    parser.add_argument("--load", action="store_true", help="run again beside a busy process")
    parser.add_argument("--load-seconds", type=float, default=900.0, help="the busy process's bound")
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results", "sklearn_small.json")
    )
    args = parser.parse_args()
    args.sections = args.sections.split(",")
    warnings.simplefilter("ignore")  # convergence chatter of tiny CV folds: timings only
    limits = None
    if args.threads != "default":
        torch.set_num_threads(int(args.threads))
        limits = threadpool_limits(int(args.threads))
    data = problems(args.problems.split(","))
    result = {
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "threads": args.threads,
            "torch_threads": torch.get_num_threads(),
            "loadavg_start": os.getloadavg(),
            "torch": torch.__version__,
            "sklearn": sklearn.__version__,
            "numpy": np.__version__,
        },
        "C": args.C,
    }
    print("quiet" if args.load else "run", f"(load average {os.getloadavg()[0]:.2f})", flush=True)
    result["quiet"] = run_sections(args, data)
    if args.load:
        busy = subprocess.Popen([sys.executable, "-c", BUSY, str(args.load_seconds)])
        try:
            time.sleep(2.0)  # the busy loop running before the first timing
            print(f"loaded (load average {os.getloadavg()[0]:.2f})", flush=True)
            result["loaded"] = run_sections(args, data)
        finally:
            busy.terminate()
            busy.wait()
        result["quiet_vs_loaded"] = compare(result["quiet"], result["loaded"])
    result["machine"]["loadavg_end"] = os.getloadavg()
    if limits is not None:
        limits.restore_original_limits()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
