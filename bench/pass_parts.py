"""Benchmark: one pass of ``auto``'s Newton fits split into its parts, against its floor.

For each named problem of bench/newton.py (default: probit 200k x 50 and Poisson
500k x 30), in float32 (``auto``'s stage) and float64 (its polish), CPU time, one thread,
the least of ``--repeats`` runs:

* whole passes through :class:`~torchglm.solvers.pass_sums.PassSums`: first order
  (an L-BFGS pass), ``"hvp"`` (a Newton-CG pass keeping the curvature, without the
  diagonal: the polish's), ``"diag"`` (the Jacobi start's), one Hessian-vector product
  from the kept curvature, sketched Hessian (stride 39 / 161 as the stage takes them)
  and full Hessian;
* their parts summed over the pass's slabs: ``eta = X w`` (reads ``X``), the family's
  derivatives (order 1 and 2), ``r^T X`` and the chunked Hessian product ``X^T [h X]``;
  ``eta`` and ``r^T X`` also as the pass runs them on rows of 64+ features, OpenBLAS's
  gemv through scipy (:func:`torchglm.solvers.products.mv`, ``add_rt_v``; ``None`` where
  the pass keeps torch's products);
* the floor: reading ``X`` once (``X.sum()``, its bytes over that time is the bandwidth)
  and ``2 n d~^2`` flops at the chunked product's rate in cache.

    OMP_NUM_THREADS=1 python bench/pass_parts.py            # writes bench/results/pass_parts.json
    OMP_NUM_THREADS=1 python bench/pass_parts.py --problems probit --repeats 10
    OMP_NUM_THREADS=1 python bench/pass_parts.py --problems 50k --out bench/results/pass_parts_50k.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

# This checkout's torchglm (not an installed copy), bench/newton.py's problems.
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(__file__)]

import newton as B  # noqa: E402
from torchglm.data.batches import TensorBatches  # noqa: E402
from torchglm.models import GeneralizedLinearModel  # noqa: E402
from torchglm.solvers import products  # noqa: E402
from torchglm.solvers.eta_derivatives import eta_derivatives  # noqa: E402
from torchglm.solvers.layout import flat_parameters  # noqa: E402
from torchglm.solvers.pass_sums import PassSums  # noqa: E402

STRIDES = {"probit": 39, "poisson": 161}


def least(fn, repeats, clock=time.process_time):
    """The least of ``repeats`` times of ``fn()`` after one warm-up call, by ``clock``
    (this process's CPU time; ``time.perf_counter`` for wall time)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        c = clock()
        fn()
        best = min(best, clock() - c)
    return best


def gemv_parts(slabs, w, b, rs, repeats) -> dict:
    """``eta`` and ``r^T X`` over the slabs through scipy's gemv, as a pass runs them
    (OpenBLAS on one thread), or ``None`` each where the pass keeps torch's."""
    if not products.gemv_applies(slabs[0][0]):
        return dict(eta_gemv_s=None, gradient_gemv_s=None)
    g = torch.zeros_like(w)
    with products.blas_threads(slabs[0][0]):
        eta = least(lambda: [products.mv(xs, w, b) for xs, _ in slabs], repeats)
        grad = least(lambda: [products.add_rt_v(g, xs, r[:, 0]) for r, (xs, _) in zip(rs, slabs)], repeats)
    return dict(eta_gemv_s=eta, gradient_gemv_s=grad)


def problem(name, dtype, repeats):
    spec = next(v for k, v in B.PROBLEMS.items() if name in k)
    X, y = B.make_problem(spec["kind"], spec["n"], spec["d"])
    fam, link = B.FAMILY_LINK[spec["kind"]]
    m = GeneralizedLinearModel(X.shape[1], fam, link, l2=B.ALPHA, dtype=torch.float64)
    with torch.no_grad():
        m.linear.weight.normal_(0, 0.5 / X.shape[1] ** 0.5, generator=torch.Generator().manual_seed(0))
    x, t = torch.from_numpy(X).to(dtype), torch.from_numpy(y).to(dtype)
    theta = flat_parameters(m, dtype)
    family, n, d = m.family, x.shape[0], x.shape[1]
    cache: dict = {}
    sat = 1e-10 if family.separable else 0.0

    def one_pass(curvature, stride=1, diagonal=True):
        def run():
            s = PassSums(
                m,
                theta,
                curvature,
                saturation=sat,
                hessian_stride=stride,
                target_cache=cache,
                diagonal=diagonal,
            )
            for b in TensorBatches(x, t):
                s.add(b)
            return s.finish()

        return run

    rows = products.fused_rows(x) or n
    w, b = theta[:d].view(1, d), theta[d:]
    slabs = [(x[i : i + rows], t[i : i + rows]) for i in range(0, n, rows)]
    etas = [torch.addmm(b, xs, w.T)[:, 0] for xs, _ in slabs]
    yts = [family.nll_y_term(ys) for _, ys in slabs]
    rs = [torch.rand(xs.shape[0], 1, dtype=dtype) for xs, _ in slabs]
    H = torch.zeros(d, d, dtype=dtype)
    crow = products.chunk_rows(x, d + 1)

    def hessian_products():
        for xs, _ in slabs:
            h = torch.rand(xs.shape[0], 1, dtype=dtype)
            for i in range(0, xs.shape[0], crow):
                H.addmm_(xs[i : i + crow].T, xs[i : i + crow] * h[i : i + crow])

    parts = dict(
        eta_s=least(lambda: [torch.addmm(b, xs, w.T) for xs, _ in slabs], repeats),
        derivatives_order1_s=least(
            lambda: [
                eta_derivatives(family, e, ys, 1, y_term=yt) for e, (_, ys), yt in zip(etas, slabs, yts)
            ],
            repeats,
        ),
        derivatives_order2_s=least(
            lambda: [
                eta_derivatives(family, e, ys, 2, family.is_canonical, y_term=yt)
                for e, (_, ys), yt in zip(etas, slabs, yts)
            ],
            repeats,
        ),
        gradient_product_s=least(lambda: [r.T @ xs for r, (xs, _) in zip(rs, slabs)], repeats),
        hessian_products_s=least(hessian_products, repeats),
        **gemv_parts(slabs, w[0], b, rs, repeats),
    )
    read = least(lambda: x.sum(), repeats)
    xc = x[:crow]
    hc = torch.rand(crow, 1, dtype=dtype)
    gemm = least(lambda: H.addmm_(xc.T, xc * hc), repeats * 20)
    flops = 2 * n * (d + 1) ** 2
    floor = dict(
        read_x_s=read,
        bandwidth_gb_s=x.numel() * x.element_size() / read / 1e9,
        gemm_gflop_s=2 * crow * d * d / gemm / 1e9,
        hessian_floor_s=flops / (2 * crow * d * d / gemm),
    )
    kept = one_pass("hvp", diagonal=False)()
    v = torch.randn(theta.shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
    passes = dict(
        first_order_s=least(one_pass(None), repeats),
        hvp_pass_s=least(one_pass("hvp", diagonal=False), repeats),
        jacobi_pass_s=least(one_pass("diag"), repeats),
        hessian_vector_product_s=least(lambda: kept.hvp(v), repeats),
        sketched_hessian_s=least(one_pass("full", STRIDES.get(spec["kind"], 1)), repeats),
        full_hessian_s=least(one_pass("full"), repeats),
    )
    return dict(n=n, d=d, dtype=str(dtype), slab_rows=rows, passes=passes, parts=parts, floor=floor)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=["probit", "poisson"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "pass_parts.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = dict(load=os.getloadavg(), threads=1, problems={})
    for name in args.problems:
        for dtype in (torch.float32, torch.float64):
            rec = problem(name, dtype, args.repeats)
            out["problems"][f"{name} {dtype}"] = rec
            ms = {
                k: v if v is None else round(v * 1e3, 2) for k, v in {**rec["passes"], **rec["parts"]}.items()
            }
            fl = rec["floor"]
            print(
                f"{name} {dtype}: {ms}  floor: read X {fl['read_x_s'] * 1e3:.2f} ms "
                f"({fl['bandwidth_gb_s']:.1f} GB/s), Hessian {fl['hessian_floor_s'] * 1e3:.2f} ms "
                f"({fl['gemm_gflop_s']:.0f} GFLOP/s)",
                flush=True,
            )
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
