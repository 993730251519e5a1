"""GPU benchmark: Newton and SGD throughput, and the fraction of the matmul roofline.

    python bench/gpu.py            # needs a CUDA device; exits 0 with a note otherwise
    python bench/gpu.py --quick

For each dtype (float32, float64) it measures:

* the device's dense matmul rate (a large ``torch.mm``, the roofline for the
  Hessian assembly ``X~^T diag(h) X~``, which is one weighted matrix product);
* exact Newton on logistic regression (n x d, all data on the GPU): seconds per
  iteration and achieved FLOP/s of the Hessian + gradient pass
  (``2 n d~^2 + 4 n d~`` flops), as a fraction of the measured matmul rate;
* mini-batch SGD (batch 1024, Adam) throughput in samples/s, in float32 and with
  bf16 autocast (mixed precision).

Writes ``bench/results/gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def _sync() -> None:
    torch.cuda.synchronize()


def matmul_rate(dtype: torch.dtype, size: int = 8192, reps: int = 10) -> float:
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    torch.mm(a, b)
    _sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b)
    _sync()
    return 2 * size**3 * reps / (time.perf_counter() - t0)


def newton(n: int, d: int, dtype: torch.dtype) -> dict:
    from torchglm import LogisticRegression
    from torchglm.data import TensorBatches
    from torchglm.solvers import run_passes

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, d, device="cuda", dtype=dtype, generator=g)
    w = torch.randn(d, device="cuda", dtype=dtype, generator=g) / d**0.5
    y = (torch.rand(n, device="cuda", dtype=dtype, generator=g) < torch.sigmoid(x @ w)).long()
    batches = TensorBatches(x, y)  # one batch: the whole design on the device
    model = LogisticRegression(d, l2=1e-4, dtype=dtype).cuda()
    run_passes(model.make_fitter("newton", dtype=dtype), batches, 2)  # warm-up
    model = LogisticRegression(d, l2=1e-4, dtype=dtype).cuda()
    fitter = model.make_fitter("newton", dtype=dtype)
    _sync()
    t0 = time.perf_counter()
    result = run_passes(fitter, batches, 100)
    _sync()
    seconds = time.perf_counter() - t0
    passes = result.extra.get("passes", result.n_iter + 1)
    dt = d + 1
    flops = passes * (2 * n * dt * dt + 4 * n * dt)
    return {
        "n": n,
        "d": d,
        "seconds": seconds,
        "n_iter": result.n_iter,
        "passes": passes,
        "converged": result.converged,
        "flops_per_s": flops / seconds,
        "device": str(model.linear.weight.device),
    }


def sgd(n: int, d: int, batch: int, autocast: bool) -> dict:
    from torchglm import LogisticRegression
    from torchglm.data import TensorBatches

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, d, device="cuda", generator=g)
    y = (x[:, 0] > 0).long()
    model = LogisticRegression(d).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = TensorBatches(x, y, batch_size=batch)

    def epoch():
        for b in batches:
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = model.objective(b.x, b.y)
            loss.backward()
            opt.step()

    epoch()
    _sync()
    t0 = time.perf_counter()
    epoch()
    _sync()
    seconds = time.perf_counter() - t0
    return {
        "n": n,
        "d": d,
        "batch": batch,
        "autocast_bf16": autocast,
        "seconds": seconds,
        "samples_per_s": n / seconds,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA device on this machine; nothing measured (skipped).")
        return 0
    n, d = (200_000, 64) if args.quick else (2_000_000, 256)
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "newton": {}, "sgd": []}
    for dtype in (torch.float32, torch.float64):
        peak = matmul_rate(dtype)
        r = newton(n, d, dtype)
        r["matmul_flops_per_s"] = peak
        r["fraction_of_matmul_roofline"] = r["flops_per_s"] / peak
        report["newton"][str(dtype)] = r
        print(
            f"Newton {dtype}: {r['seconds']:.3f} s, {r['n_iter']} it, "
            f"{r['flops_per_s'] / 1e12:.2f} TFLOP/s = {100 * r['fraction_of_matmul_roofline']:.1f}% "
            f"of mm ({peak / 1e12:.1f} TFLOP/s)"
        )
    for autocast in (False, True):
        r = sgd(n, d, 1024, autocast)
        report["sgd"].append(r)
        print(
            f"SGD batch 1024 {'bf16 autocast' if autocast else 'float32'}: "
            f"{r['samples_per_s'] / 1e6:.2f} M samples/s"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gpu.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
