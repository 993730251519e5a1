"""The core fit beside a busy process (issue 26, loaded machines): ``model.fit`` with its
default threads against scikit-learn's ``LogisticRegression`` with its defaults, on a
quiet machine and beside ``--busy`` processes that each keep one CPU busy (a Python
spin loop).

Each problem is fitted by

- ``torchglm``: ``torchglm.LogisticRegression`` / ``SoftmaxRegression`` ``.fit(x, y)``
  (solver ``auto``, ``n_jobs=None``: torch's threads capped at the CPUs left idle when
  the fit starts, :mod:`torchglm.threads`);
- ``torchglm n_jobs=-1``: the same fit on one thread per CPU whatever the load (the
  core fit's default before the cap);
- ``scikit-learn``: ``LogisticRegression(C, max_iter=1000)`` (lbfgs, its own threads),
  and at ``tol=1e-8`` (the optimum torchglm certifies),

best of ``--repeats`` in wall time (load stretches wall time: it is what a user waits),
with ``C = 1 / (n l2)`` on both sides, the same objective. The report gives each ratio
torchglm / scikit-learn quiet and loaded, and each fit's slowdown loaded / quiet: the
goal is a loaded ratio no worse than the quiet one.

    python bench/loaded_fit.py                 # ~2 minutes; one busy process
    python bench/loaded_fit.py --busy 2 --problems dense

Writes bench/results/loaded_fit.json (``--out``).
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
import sklearn
import torch
from sklearn.linear_model import LogisticRegression as SkLogistic

import torchglm

SPIN = "while True:\n    pass\n"
L2 = 1e-4


def problems(names):
    rng = np.random.default_rng(0)
    out = {}
    if "dense" in names:  # 50,000 x 100, binary: products torch runs on several threads
        x = rng.standard_normal((50_000, 100))
        eta = x @ (rng.standard_normal(100) / 10) + 0.3
        out["dense"] = (x, (rng.random(50_000) < 1 / (1 + np.exp(-eta))).astype(np.int64), 2)
    if "softmax" in names:  # 20,000 x 50, 10 classes
        x = rng.standard_normal((20_000, 50))
        eta = x @ (rng.standard_normal((50, 10)) / 5)
        p = np.exp(eta - eta.max(1, keepdims=True))
        u = rng.random((20_000, 1))
        y = (p.cumsum(1) / p.sum(1, keepdims=True) < u).sum(1)
        out["softmax"] = (x, y.astype(np.int64), 10)
    return out


def _core(x, y, k, n_jobs):
    model = (
        torchglm.LogisticRegression(x.shape[1], l2=L2)
        if k == 2
        else torchglm.SoftmaxRegression(x.shape[1], k, l2=L2)
    )
    return model.fit(x, y, n_jobs=n_jobs)


def _makers(x, y, k) -> dict:
    C = 1.0 / (L2 * x.shape[0])
    return {
        "torchglm": lambda: _core(x, y, k, None),
        "torchglm n_jobs=-1": lambda: _core(x, y, k, -1),
        "scikit-learn": lambda: SkLogistic(C=C, max_iter=1000).fit(x, y),
        "scikit-learn tol=1e-8": lambda: SkLogistic(C=C, tol=1e-8, max_iter=10_000).fit(x, y),
    }


def fits(data: dict, repeats: int) -> dict:
    rows = {}
    for name, (x, y, k) in data.items():
        row = {}
        for who, make in _makers(x, y, k).items():
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                make()
                times.append(time.perf_counter() - t)
            row[who] = {"wall_s": min(times), "wall_s_all": times}
        for who in ("torchglm", "torchglm n_jobs=-1"):
            row[f"ratio {who}"] = row[who]["wall_s"] / row["scikit-learn"]["wall_s"]
            row[f"ratio_tight {who}"] = row[who]["wall_s"] / row["scikit-learn tol=1e-8"]["wall_s"]
        rows[name] = row
        print(
            f"  {name:8s} "
            + ", ".join(f"{w} {r['wall_s']:.3f} s" for w, r in row.items() if isinstance(r, dict))
            + f" | torchglm / scikit-learn {row['ratio torchglm']:.2f} (n_jobs=-1: "
            f"{row['ratio torchglm n_jobs=-1']:.2f})",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", default="dense,softmax")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside the loaded run")
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results", "loaded_fit.json")
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    data = problems(args.problems.split(","))
    result = {
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "sklearn": sklearn.__version__,
            "busy_processes": args.busy,
            "loadavg_quiet": os.getloadavg(),
        },
        "l2": L2,
    }
    print(f"quiet (load average {os.getloadavg()[0]:.2f})", flush=True)
    result["quiet"] = fits(data, args.repeats)
    busy = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.busy)]
    try:
        time.sleep(1.0)
        result["machine"]["loadavg_loaded"] = os.getloadavg()
        print(f"beside {args.busy} busy process(es) (load average {os.getloadavg()[0]:.2f})", flush=True)
        result["loaded"] = fits(data, args.repeats)
    finally:
        for p in busy:
            p.terminate()
            p.wait()
    summary = {}
    for name in data:
        q, l_ = result["quiet"][name], result["loaded"][name]
        summary[name] = {
            "ratio_quiet": q["ratio torchglm"],
            "ratio_loaded": l_["ratio torchglm"],
            "ratio_quiet n_jobs=-1": q["ratio torchglm n_jobs=-1"],
            "ratio_loaded n_jobs=-1": l_["ratio torchglm n_jobs=-1"],
            "slowdown": {w: l_[w]["wall_s"] / q[w]["wall_s"] for w in q if isinstance(q[w], dict)},
        }
        s = summary[name]
        print(
            f"  {name}: torchglm / scikit-learn quiet {s['ratio_quiet']:.2f}, loaded {s['ratio_loaded']:.2f} "
            f"(n_jobs=-1: {s['ratio_quiet n_jobs=-1']:.2f}, {s['ratio_loaded n_jobs=-1']:.2f}); slowdown "
            + ", ".join(f"{w} {v:.2f}x" for w, v in s["slowdown"].items())
        )
    result["quiet_vs_loaded"] = summary
    result["machine"]["loadavg_end"] = os.getloadavg()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
