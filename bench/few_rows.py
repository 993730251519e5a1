"""Benchmark: float64 products of few rows, torch's (MKL) against OpenBLAS's dgemm
(:func:`torchglm.solvers.products.addmm_few_rows`), and the digits fit they speed up.

* the two products of a small softmax batch's Hessian-vector product, ``V x^T``
  (K x d by d x n) and ``H x`` (K x n by n x d), at digits' size (1,797 x 64, K = 10)
  and a few others, each way, one thread, the least of ``--repeats`` CPU times;
* ``torchglm.sklearn.LogisticRegression(C=10)`` on digits (standardized) with the dgemm
  path and with torch's products (``FEW_ROWS_MAX = 0``), in alternating rounds, CPU
  time, the least of ``--repeats`` fits a round; and the same with torch on two threads
  (``n_jobs=2``), the dgemm path forced (``FEW_ROWS_MAX_THREADS = 2``; OpenBLAS held at
  one thread) against MKL's products on both threads, in wall time: why the path is
  taken at one thread only.

    OMP_NUM_THREADS=1 python bench/few_rows.py          # ~30 s; writes bench/results/few_rows.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

# This checkout's torchglm (not an installed copy), bench/pass_parts.py's timer.
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(__file__)]

import torchglm.sklearn as tgs  # noqa: E402
from pass_parts import least  # noqa: E402
from torchglm.solvers import products  # noqa: E402

SHAPES = [(1797, 64, 10), (1797, 64, 3), (5000, 100, 5), (3000, 40, 20)]


def product_times(repeats: int) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    for n, d, k in SHAPES:
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        xt, v, h = (
            x.T.contiguous(),
            torch.randn(k, d, dtype=torch.float64),
            torch.randn(k, n, dtype=torch.float64),
        )
        out_t, out_w = torch.zeros(k, n, dtype=torch.float64), torch.zeros(k, d, dtype=torch.float64)
        assert products.few_rows_applies(v, xt) and products.few_rows_applies(h, x)
        row = dict(n=n, d=d, outputs=k)
        for name, a, b, out in (("v_xt", v, xt, out_t), ("h_x", h, x, out_w)):
            row[f"{name}_torch_us"] = least(lambda a=a, b=b, out=out: out.addmm_(a, b), repeats) * 1e6
            row[f"{name}_dgemm_us"] = (
                least(lambda a=a, b=b, out=out: products.addmm_few_rows(out, a, b), repeats) * 1e6
            )
        rows.append(row)
        print(
            f"  {n} x {d}, K = {k}: V x^T {row['v_xt_torch_us']:.0f} -> {row['v_xt_dgemm_us']:.0f} us, "
            f"H x {row['h_x_torch_us']:.0f} -> {row['h_x_dgemm_us']:.0f} us",
            flush=True,
        )
    return rows


def digits_times(repeats: int, rounds: int, threads: int = 1) -> dict:
    x, y = load_digits(return_X_y=True)
    x = StandardScaler().fit_transform(x)
    default = products.FEW_ROWS_MAX
    clock = time.process_time if threads == 1 else time.perf_counter
    out = {"dgemm": [], "torch": []}
    steps = {}
    torch.set_num_threads(threads)
    products.FEW_ROWS_MAX_THREADS = threads
    for _ in range(rounds):
        for name, rows in (("torch", 0), ("dgemm", default)):
            products.FEW_ROWS_MAX = rows
            try:
                est = tgs.LogisticRegression(C=10.0, n_jobs=threads).fit(x, y)
                out[name].append(
                    least(lambda: tgs.LogisticRegression(C=10.0, n_jobs=threads).fit(x, y), repeats, clock)
                )
            finally:
                products.FEW_ROWS_MAX = default
            r = est.fit_result_
            steps[name] = dict(n_iter=r.n_iter, hessian_vector_products=int(sum(r.extra.cg_iterations or [])))
    products.FEW_ROWS_MAX_THREADS = 1
    torch.set_num_threads(1)
    kind = "cpu" if threads == 1 else "wall"
    res = {k: {f"{kind}_s_per_round": v, f"{kind}_s": min(v), **steps[k]} for k, v in out.items()}
    res["threads"] = threads
    res["ratio"] = res["dgemm"][f"{kind}_s"] / res["torch"][f"{kind}_s"]
    print(
        f"  digits fit, {threads} thread(s), {kind} time: torch's products "
        f"{res['torch'][f'{kind}_s'] * 1e3:.1f} ms, dgemm {res['dgemm'][f'{kind}_s'] * 1e3:.1f} ms "
        f"({res['ratio']:.2f}x; {steps['dgemm']})",
        flush=True,
    )
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "few_rows.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    threadpool_limits(1)
    if products._openblas() is None:
        sys.exit("scipy's BLAS is not OpenBLAS here: addmm_few_rows keeps torch's products")
    result = dict(load=os.getloadavg(), threads=1, torch=torch.__version__, numpy=np.__version__)
    result["products"] = product_times(args.repeats * 30)
    result["digits"] = digits_times(args.repeats, args.rounds)
    if os.cpu_count() >= 2:
        result["digits_two_threads"] = digits_times(args.repeats, args.rounds, threads=2)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
