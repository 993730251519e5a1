"""One pass of sums on an accelerator against the hand-written matrix product, and
whole fits per solver (issue 15's table, rerun).

    python bench/gpu_passes.py                 # CUDA if present, else the CPU (small sizes)
    python bench/gpu_passes.py --device cpu --quick

Per problem and dtype it times (synchronized, best of ``--repeats``):

* ``pass[curvature]``: one :class:`~torchglm.solvers.pass_sums.PassSums` pass over
  the data held on the device (``None``: E and g; ``full``: + the exact Hessian;
  ``hvp``: + the diagonal and the kept curvature) and one Hessian-vector product;
* ``reference``: the same Hessian as one hand-written product ``X~^T (h X~)``
  (binary) or one product over all class pairs ``X~^T [h_kl X~]`` (softmax), with
  ``h`` from ``torch.sigmoid``/``torch.softmax``: the floor a pass can reach;
* whole fits with ``fit(model, x, y, solver=...)``: seconds, iterations, converged,
  and the largest coefficient difference to the float64 CPU fit of the same data.

Writes ``bench/results/gpu_passes.json`` (device name, torch version, every number).
``bench/gpu.py`` (the GPU benchmark) imports the pass, the reference and the fit
from here, and checks the pass's Hessian against the reference.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats: int) -> float:
    fn()  # warm-up (kernels, allocator)
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def problem(kind: str, n: int, d: int, K: int | None, dtype, device, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    if kind == "softmax":
        w = torch.randn(d, K, generator=g, dtype=torch.float64) / d**0.5
        y = torch.distributions.Categorical(logits=x @ w).sample()
    else:
        w = torch.randn(d, generator=g, dtype=torch.float64) / d**0.5
        y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(x @ w)).long()
    return x.to(device, dtype), y.to(device)


def _glm(kind, d, K, dtype, device, l2=1e-4):
    from torchglm.models import GeneralizedLinearModel

    fam, link = ("categorical", "softmax") if kind == "softmax" else ("bernoulli", "logit")
    return GeneralizedLinearModel(d, fam, link, n_classes=K, l2=l2, dtype=dtype).to(device)


def reference_hessian(kind, x, model, K):
    """The hand-written Hessian sum as a callable: ``X~^T (h X~)`` (binary, (d~, d~)) or
    one product over all class pairs ``k <= l``, ``X~^T [h_kl X~]`` ((d~, P d~), in row
    chunks: the (n, P d~) operand does not fit at once), ``X~ = [x, 1]``, ``h`` from
    ``torch.sigmoid``/``torch.softmax`` at the model's parameters: the floor a pass can
    reach. Unnormalized, without the penalty (:func:`reference_in_theta_order` maps it)."""
    n, d = x.shape
    xt = torch.cat([x, torch.ones_like(x[:, :1])], 1)
    W = model.coef
    b = model.intercept
    if kind != "softmax":

        def reference():
            p = torch.sigmoid(x @ W[0] + b)
            return xt.T @ (xt * (p * (1 - p)).unsqueeze(-1))

        return reference
    pairs = torch.triu_indices(K, K, device=x.device)
    rows = max(1, 2**27 // (pairs.shape[1] * (d + 1)))

    def reference_chunked():
        total = 0
        for i in range(0, n, rows):
            xi, ti = x[i : i + rows], xt[i : i + rows]
            p = torch.softmax(xi @ W.T + b, -1)
            h = p[:, pairs[0]] * ((pairs[0] == pairs[1]).to(p.dtype) - p[:, pairs[1]])
            total = total + ti.T @ (ti.unsqueeze(1) * h.unsqueeze(-1)).reshape(ti.shape[0], -1)
        return total

    return reference_chunked


def reference_in_theta_order(ref, model, n):
    """The reference sum of :func:`reference_hessian` as the (p, p) Hessian of the mean
    objective in the flat parameter order ``[vec W, b]``: divided by ``n`` and with the
    penalty ``l2`` on the weights (not the bias), as ``PassSums.finish`` returns it."""
    from torchglm.solvers.layout import penalty_mask

    m, d = model.n_outputs, model.n_features
    dt = d + 1
    pairs = torch.triu_indices(m, m)
    H = torch.zeros(m * d + m, m * d + m, dtype=ref.dtype, device=ref.device)
    for q, (k, j) in enumerate(pairs.T.tolist()):
        block = ref[:, q * dt : (q + 1) * dt]  # classes k <= j: rows w_k then b_k, columns w_j, b_j
        ik = torch.cat([torch.arange(k * d, (k + 1) * d), torch.tensor([m * d + k])]).to(ref.device)
        ij = torch.cat([torch.arange(j * d, (j + 1) * d), torch.tensor([m * d + j])]).to(ref.device)
        H[ik[:, None], ij[None, :]] = block
        H[ij[:, None], ik[None, :]] = block.T
    mask = penalty_mask(model, dtype=ref.dtype, device=ref.device)
    return H / n + torch.diag(model.l2 * mask)


def pass_times(kind, x, y, K, repeats, check=False, precisions=()):
    """Seconds of one pass per curvature and of the hand-written reference (best of
    ``repeats``); with ``check``, also ``max_rel_diff_full_to_reference``: the largest
    entry of ``|H_pass - H_ref|`` over the largest of ``|H_ref|`` (both in float64).
    ``precisions``: also the full pass with these ``hessian_precision`` values
    (``pass[full,<p>]_s``, and with ``check`` ``max_rel_diff_full_<p>_to_reference``)."""
    from torchglm.data import TensorBatches
    from torchglm.solvers.layout import flat_parameters
    from torchglm.solvers.pass_sums import PassSums

    n, d = x.shape
    model = _glm(kind, d, K, x.dtype, x.device)
    with torch.no_grad():
        model.linear.weight.normal_(0, 0.1)
    theta = flat_parameters(model).to(x.device)
    batches = list(TensorBatches(x, y))
    out = {}
    sums = {}
    for curvature in (None, "full", "hvp"):

        def one(curvature=curvature):
            s = PassSums(model, theta, curvature)
            for b in batches:
                s.add(b)
            sums[curvature] = s.finish()

        out[f"pass[{curvature}]_s"] = timed(one, x.device, repeats)
    for precision in precisions:

        def low(precision=precision):
            s = PassSums(model, theta, "full", hessian_precision=precision)
            for b in batches:
                s.add(b)
            sums[precision] = s.finish()

        out[f"pass[full,{precision}]_s"] = timed(low, x.device, repeats)
    v = torch.randn_like(theta)
    out["hvp_s"] = timed(lambda: sums["hvp"].hvp(v), x.device, repeats)

    reference = reference_hessian(kind, x, model, K)
    out["reference_full_s"] = timed(reference, x.device, repeats)
    P = 1 if K is None else K * (K + 1) // 2
    flops = 2 * n * (d + 1) ** 2 * P
    out["full_pass_tflops"] = flops / out["pass[full]_s"] / 1e12
    out["ratio_full_to_reference"] = out["pass[full]_s"] / out["reference_full_s"]
    if check:
        with torch.no_grad():
            H_ref = reference_in_theta_order(reference().double(), model, n)
            for key, name in (("full", "full"), *((p, f"full_{p}") for p in precisions)):
                diff = (sums[key].hess.double() - H_ref).abs().max() / H_ref.abs().max()
                out[f"max_rel_diff_{name}_to_reference"] = float(diff)
    return out


def fit_one(kind, x, y, K, solver, l2=1e-4, tol=1e-10, **options):
    """One synchronized ``fit(model, x, y, solver=..., **options)`` from a fresh model:
    ``(row, model)`` with the row's seconds, iterations, converged, passes and message."""
    from torchglm.solvers import fit

    m = _glm(kind, x.shape[1], K, x.dtype, x.device, l2)
    _sync(x.device)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit(m, x, y, solver=solver, tol=tol, **options)
    _sync(x.device)
    row = {
        "time_s": time.perf_counter() - t0,
        "n_iter": r.n_iter,
        "converged": r.converged,
        "passes": r.extra.get("passes"),
        "message": r.message[:160],
    }
    return row, m


def fits(kind, x, y, K, solvers, x_cpu=None):
    from torchglm.solvers import fit

    d = x.shape[1]
    ref = None
    if x_cpu is not None:
        ref = _glm(kind, d, K, torch.float64, "cpu")
        fit(ref, x_cpu.double(), y.cpu(), solver="newton", tol=1e-14)
    rows = {}
    for solver in solvers:
        row, m = fit_one(kind, x, y, K, solver)
        if ref is not None:
            row["max_coef_diff_to_cpu_f64"] = float((m.coef.cpu().double() - ref.coef).abs().max())
        rows[solver] = row
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "gpu_passes.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    small = args.quick or device.type == "cpu"
    info = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "quick": small,
    }
    problems = (
        [("logit", 100_000, 100, None), ("softmax", 50_000, 100, 10)]
        if small
        else [("logit", 4_000_000, 100, None), ("softmax", 1_000_000, 100, 10)]
    )
    report = {"machine": info, "passes": {}, "fits": {}}
    for kind, n, d, K in problems:
        for dtype in (torch.float32, torch.float64):
            x, y = problem(kind, n, d, K, dtype, device)
            key = f"{kind} n={n} d={d}" + (f" K={K}" if K else "") + f" {str(dtype)[6:]}"
            report["passes"][key] = pass_times(kind, x, y, K, args.repeats)
            print(key, json.dumps(report["passes"][key]), flush=True)
            del x, y
    fit_problems = (
        [("logit", 100_000, 50, None), ("softmax", 50_000, 50, 10)]
        if small
        else [("logit", 2_000_000, 256, None), ("softmax", 1_000_000, 100, 10)]
    )
    for kind, n, d, K in fit_problems:
        for dtype in (torch.float32, torch.float64):
            x, y = problem(kind, n, d, K, dtype, device)
            key = f"{kind} n={n} d={d}" + (f" K={K}" if K else "") + f" {str(dtype)[6:]}"
            solvers = ["auto", "newton", "lbfgs", "newton-cg"]
            report["fits"][key] = fits(
                kind, x, y, K, solvers, x_cpu=x.cpu() if dtype == torch.float64 and n <= 1_000_000 else None
            )
            print(key, json.dumps(report["fits"][key]), flush=True)
            del x, y
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
