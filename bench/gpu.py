"""The GPU benchmark (issue 15): the matmul roofline, one pass against the
hand-written GEMM, SGD throughput against hand loops, and whole fits against
scikit-learn, all measured in one run.

    python bench/gpu.py                       # CUDA if present, else the CPU
    python bench/gpu.py --quick               # small sizes (a CPU smoke test: seconds)
    python bench/gpu.py --device cpu --quick --threads 1 --out /tmp/gpu.json
    python bench/gpu.py --sections crossover  # one section (bench/results/gpu[_cpu]_crossover.json)

Sections of the JSON (every number; times are synchronized wall seconds, best of
``--repeats`` after a warm-up unless stated):

* ``machine``: device name (``torch.cuda.get_device_name`` or the CPU model and
  core count), torch / Lightning / scikit-learn versions, threads, quick, the
  command line.
* ``matmul``: the measured dense ``torch.mm`` rate in float32 and float64 (on
  CUDA also float32 with TF32 allowed, reported separately; everything else runs
  with TF32 off): the roofline of the Hessian assembly, one weighted product.
* ``passes``: logistic n=4M d=100 and softmax K=10 n=1M d=100 (quick / CPU:
  much smaller), float32 and float64, the data on the device: one
  :class:`~torchglm.solvers.pass_sums.PassSums` pass with the full Hessian
  against the hand-written one-GEMM reference ``X~^T (h X~)`` (softmax: one
  product over all class pairs) timed in the same run, their ratio, the
  achieved TFLOP/s (``2 n d~^2 P`` flops, ``P`` class pairs) and its fraction of
  the measured matmul rate of the same dtype, and the largest relative
  difference of the pass's Hessian to the reference's (checked here). The pass
  and the reference are ``bench/gpu_passes.py``'s (imported, one home).
* ``sgd``: logistic regression, d=256, batch 1024, plain SGD lr 0.1, float32,
  2^20 training rows (CPU 2^17, quick 2^14), samples/s of the fastest epoch
  after the first: (a) an eager hand loop over device-resident tensors
  (``randperm``, ``index_select`` per batch, forward, backward, step); (b) the same step captured once as a CUDA graph (the
  whole-network capture of the torch docs "CUDA Graphs": static index buffer,
  warm-up on a side stream, ``torch.cuda.graph``; per step the batch's indices
  are copied into the static buffer and the graph replayed; CUDA only); (c)
  the Lightning task ``GLMTask(LogisticRegression, optimizer=SGD(lr=0.1),
  train_metrics=False)`` + ``GLMDataModule`` under ``pl.Trainer`` (no logger,
  no checkpoints, no validation), epochs timed by a callback, at the default
  ``steps_per_block`` and, on CUDA, with
  ``cuda_graphs=True`` (its row keeps the task's warning, ``uncaptured``, if
  the blocks ran uncaptured after all). Ratios are to (b), or to (a) where (b) is absent. Each
  row also records the objective after training on the first rows (a check
  that it trained).
* ``fits``: logistic 1M x 100 (quick / CPU: smaller), float64 data:
  ``torchglm.solvers.fit`` with ``auto``, ``lbfgs`` and ``newton`` on the device
  (``tol=1e-10``) against scikit-learn ``LogisticRegression(solver="lbfgs")`` and
  ``"newton-cholesky"`` (``tol=1e-8``) on this machine's CPU with the same L2
  penalty (objective mean NLL + (l2/2)||w||^2, intercept unpenalized: sklearn
  ``C = 1 / (l2 n)``): time, iterations, converged, the objective of every fit
  evaluated here in float64, its relative difference to scikit-learn's best, and
  time ratios.

* ``crossover``: where ``auto`` should switch from exact Newton to L-BFGS on this
  device. Logistic regression (float64 data on the device) at growing width ``d``:
  ``fit(solver="newton")`` (in float32 with the float64 polish where ``auto`` would be,
  ``n d~^2 >= AUTO_FLOAT32_MIN_FLOPS``) against ``fit(solver="lbfgs")`` (its Newton-CG
  or exact finish included), best of ``--repeats``; per width the faster one, what
  ``choose_solver`` picks (Newton up to ``NEWTON_MAX_COST``, the same on every device:
  on one H200 Newton took 1.4x L-BFGS's time at cost 257, docs/solvers.md), whether
  that was the faster, and both objectives: the data for moving that bound per device.

Writes ``bench/results/gpu.json`` on CUDA and ``bench/results/gpu_cpu.json`` on the
CPU (``--out`` to change), and prints a table. Exits 0 (also when ``--device
cuda`` is asked for on a machine without CUDA: then nothing is measured).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
sys.path.insert(0, str(BENCH))

import gpu_passes  # noqa: E402  (bench/ is not a package)

L2 = 1e-4  # the fits' penalty (gpu_passes' models use the same)
TORCHGLM_TOL = 1e-10
SKLEARN_TOL = 1e-8
SGD_BATCH, SGD_D, SGD_LR = 1024, 256, 0.1
VAL_FRACTION = TEST_FRACTION = 0.01


# -- sizes ------------------------------------------------------------------------
def sizes(device: torch.device, quick: bool) -> dict:
    """Problem sizes: the issue's on CUDA, smaller on the CPU, small with ``--quick``."""
    if quick:
        return dict(
            matmul=4096 if device.type == "cuda" else 1024,
            passes=[("logit", 20_000, 100, None), ("softmax", 5_000, 100, 10)],
            sgd_n=16 * SGD_BATCH,
            sgd_epochs=3,
            fit=(20_000, 20),
            crossover=(5_000, [16, 64, 256]),
        )
    if device.type == "cuda":
        return dict(
            matmul=8192,
            passes=[("logit", 4_000_000, 100, None), ("softmax", 1_000_000, 100, 10)],
            sgd_n=1024 * SGD_BATCH,
            sgd_epochs=4,
            fit=(1_000_000, 100),
            crossover=(1_000_000, [64, 128, 256, 512, 1024]),
        )
    return dict(
        matmul=2048,
        passes=[("logit", 100_000, 100, None), ("softmax", 50_000, 100, 10)],
        sgd_n=128 * SGD_BATCH,
        sgd_epochs=4,
        fit=(200_000, 100),
        crossover=(50_000, [32, 64, 128, 256, 512]),
    )


def _sync(device: torch.device) -> None:
    gpu_passes._sync(device)


# -- machine ----------------------------------------------------------------------
def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: torch.device, quick: bool, argv: list[str]) -> dict:
    import numpy as np
    import pytorch_lightning as pl

    try:
        import sklearn

        sk = sklearn.__version__
    except ImportError:
        sk = None
    info = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "device_type": device.type,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "lightning": pl.__version__,
        "sklearn": sk,
        "numpy": np.__version__,
        "threads": torch.get_num_threads(),
        "quick": quick,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "command": shlex.join(["python", "bench/gpu.py", *argv]),
    }
    return info


# -- 1. matmul --------------------------------------------------------------------
def matmul_rate(
    dtype: torch.dtype, size: int, device: torch.device, repeats: int, tf32: bool = False
) -> dict:
    """FLOP/s of ``torch.mm`` of two ``size x size`` matrices (best of ``repeats``)."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    reps = 5 if device.type == "cuda" else 1
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:

        def mm():
            for _ in range(reps):
                torch.mm(a, b)

        seconds = gpu_passes.timed(mm, device, repeats)
    finally:
        torch.set_float32_matmul_precision(before)
    return {"size": size, "seconds": seconds / reps, "tflops": 2 * size**3 * reps / seconds / 1e12}


# -- 2. passes --------------------------------------------------------------------
def passes(problems, device, repeats, rates: dict) -> dict:
    out = {}
    for kind, n, d, K in problems:
        x64, y = gpu_passes.problem(kind, n, d, K, torch.float64, device)
        for dtype in (torch.float32, torch.float64):
            x = x64.to(dtype)  # the same data in both dtypes
            key = f"{kind} n={n} d={d}" + (f" K={K}" if K else "") + f" {str(dtype)[6:]}"
            # float32: also the Hessian products in TF32 (CUDA) and bfloat16 (hessian_precision)
            low = ("tf32", "bf16") if dtype == torch.float32 else ()
            r = gpu_passes.pass_times(kind, x, y, K, repeats, check=True, precisions=low)
            P = 1 if K is None else K * (K + 1) // 2
            flops = 2 * n * (d + 1) ** 2 * P
            rate = rates[str(dtype)[6:]]["tflops"]
            r.update(
                kind=kind,
                n=n,
                d=d,
                K=K,
                dtype=str(dtype)[6:],
                flops=flops,
                reference_tflops=flops / r["reference_full_s"] / 1e12,
                matmul_tflops=rate,
                full_pass_fraction_of_matmul=r["full_pass_tflops"] / rate,
                reference_fraction_of_matmul=flops / r["reference_full_s"] / 1e12 / rate,
            )
            out[key] = r
            del x
        del x64, y
    return out


# -- 3. sgd -----------------------------------------------------------------------
def sgd_data(n_train: int, d: int, seed: int = 0):
    """A logistic-model dataset whose 98/1/1 split leaves exactly ``n_train`` training
    rows (the Lightning data module's split), float32 on the CPU."""
    n_total = int(n_train / (1 - VAL_FRACTION - TEST_FRACTION))
    while n_total - 2 * round(VAL_FRACTION * n_total) != n_train:
        n_total += 1
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_total, d, generator=g, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64) / d**0.5
    y = torch.bernoulli(torch.sigmoid(x @ w), generator=g)
    return x.float(), y.float()


def _check_loss(model, x, y) -> float:
    with torch.no_grad():
        return float(model.objective(x[:65536], y[:65536]))


def _sgd_model(d, device):
    from torchglm import LogisticRegression

    torch.manual_seed(0)
    model = LogisticRegression(d, dtype=torch.float32).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=SGD_LR)


def _row(n_train, epochs_s, loss, **extra) -> dict:
    best = min(epochs_s[1:]) if len(epochs_s) > 1 else epochs_s[0]
    return {
        "epoch_s": best,
        "samples_per_s": n_train / best,
        "epochs_s": epochs_s,
        "loss_after": loss,
        **extra,
    }


def sgd_hand_loop(x, y, epochs: int) -> dict:
    """(a) Eager steps over device-resident tensors."""
    device, (n, d) = x.device, x.shape
    model, opt = _sgd_model(d, device)
    g = torch.Generator(device=device).manual_seed(0)
    times = []
    for _ in range(epochs):
        _sync(device)
        t0 = time.perf_counter()
        perm = torch.randperm(n, device=device, generator=g)
        for idx in perm.split(SGD_BATCH):
            xb, yb = torch.index_select(x, 0, idx), torch.index_select(y, 0, idx)
            opt.zero_grad(set_to_none=True)
            loss = model.objective(xb, yb)
            loss.backward()
            opt.step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return _row(n, times, _check_loss(model, x, y))


def sgd_cuda_graph(x, y, epochs: int) -> dict:
    """(b) The step of (a) captured as one CUDA graph (whole-network capture)."""
    device, (n, d) = x.device, x.shape
    assert n % SGD_BATCH == 0, "a graph replays one batch shape"
    model, opt = _sgd_model(d, device)
    g = torch.Generator(device=device).manual_seed(0)
    static_idx = torch.randperm(n, device=device, generator=g)[:SGD_BATCH].clone()

    def step():
        loss = model.objective(torch.index_select(x, 0, static_idx), torch.index_select(y, 0, static_idx))
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as the docs do
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # backward in the capture allocates .grad from its pool
    with torch.cuda.graph(graph):
        step()
    _sync(device)
    capture_s = time.perf_counter() - t0
    times = []
    for _ in range(epochs):
        _sync(device)
        t0 = time.perf_counter()
        perm = torch.randperm(n, device=device, generator=g)
        for idx in perm.split(SGD_BATCH):
            static_idx.copy_(idx)
            graph.replay()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return _row(n, times, _check_loss(model, x, y), warmup_and_capture_s=capture_s)


def _epoch_timer(device: torch.device):
    from sgd_epoch import EpochTimer  # bench/sgd_epoch.py's callback

    class SyncedEpochTimer(EpochTimer):
        """``EpochTimer`` that waits for the device at both ends of an epoch."""

        def on_train_epoch_start(self, trainer, pl_module):
            _sync(device)
            super().on_train_epoch_start(trainer, pl_module)

        def on_train_epoch_end(self, trainer, pl_module):
            _sync(device)
            super().on_train_epoch_end(trainer, pl_module)

    return SyncedEpochTimer(time.perf_counter())


def sgd_lightning(x, y, n_train: int, epochs: int, device: torch.device, **task_options) -> dict:
    """(c) ``GLMTask`` + ``GLMDataModule`` under a Trainer; ``x, y`` on the CPU (the
    data module's own loading path: a temporary built-in dataset)."""
    import pytorch_lightning as pl

    from torchglm import LogisticRegression
    from torchglm.data import DATASETS, Dataset
    from torchglm.training import GLMDataModule, GLMTask

    name = "_bench_gpu_sgd"
    root = tempfile.mkdtemp(prefix="bench_gpu_")  # Lightning's root dir: nothing lands in the checkout
    DATASETS[name] = lambda: Dataset(x.double().numpy(), y.long().numpy(), "classification", 2)
    try:
        dm = GLMDataModule(
            name,
            val_fraction=VAL_FRACTION,
            test_fraction=TEST_FRACTION,
            batch_size=SGD_BATCH,
            standardize=False,
            dtype="float32",
        )
        torch.manual_seed(0)
        task = GLMTask(
            LogisticRegression,
            optimizer=partial(torch.optim.SGD, lr=SGD_LR),
            train_metrics=False,
            **task_options,
        )
        timer = _epoch_timer(device)
        trainer = pl.Trainer(
            default_root_dir=root,
            accelerator=device.type,
            devices=1,
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            callbacks=[timer],
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(task, datamodule=dm)
        assert dm.summary()["n_train"] == n_train
    finally:
        del DATASETS[name]
        shutil.rmtree(root, ignore_errors=True)
    model = task.model.to(device)
    row = _row(
        n_train,
        [t[0] for t in timer.epochs],
        _check_loss(model, x[:65536].to(device), y[:65536].to(device)),
        trainer_startup_s=timer.startup,
        steps_per_block=task.steps_per_block,
    )
    row.update(task_options)
    if task_options.get("cuda_graphs"):
        # GLMTask says why when its blocks run uncaptured (one warning): then this row is eager.
        said = [str(w.message) for w in caught if "cuda_graphs" in str(w.message)]
        row["uncaptured"] = said[0] if said else None
    return row


def sgd(n_train: int, epochs: int, device: torch.device) -> dict:

    x, y = sgd_data(n_train, SGD_D)
    x_dev, y_dev = x[:n_train].to(device), y[:n_train].to(device)
    rows = {"hand loop (eager)": sgd_hand_loop(x_dev, y_dev, epochs)}
    if device.type == "cuda":
        rows["hand loop (CUDA graph)"] = sgd_cuda_graph(x_dev, y_dev, epochs)
    else:
        rows["hand loop (CUDA graph)"] = {"absent": "CUDA graphs need a CUDA device (this run: cpu)"}
    del x_dev, y_dev
    rows["GLMTask (default steps_per_block)"] = sgd_lightning(x, y, n_train, epochs, device)
    if device.type != "cuda":
        rows["GLMTask (cuda_graphs=True)"] = {"absent": "CUDA graphs need a CUDA device (this run: cpu)"}
    else:
        rows["GLMTask (cuda_graphs=True)"] = sgd_lightning(x, y, n_train, epochs, device, cuda_graphs=True)
    base_name = (
        "hand loop (CUDA graph)" if "absent" not in rows["hand loop (CUDA graph)"] else "hand loop (eager)"
    )
    base = rows[base_name]["samples_per_s"]
    for row in rows.values():
        if "samples_per_s" in row:
            row["ratio_to_baseline"] = row["samples_per_s"] / base
    return {
        "n_train": n_train,
        "d": SGD_D,
        "batch": SGD_BATCH,
        "lr": SGD_LR,
        "dtype": "float32",
        "epochs": epochs,
        "loss_at_start": math.log(2.0),
        "baseline": base_name,
        "rows": rows,
    }


# -- 4. fits ----------------------------------------------------------------------
def logistic_objective(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> float:
    """Mean NLL + (L2/2)||w||^2 in float64 on the CPU, independent of either library."""
    x, y = x.double().cpu(), y.double().cpu()
    w, b = w.double().cpu().reshape(-1), b.double().cpu().reshape(-1)
    eta = x @ w + b
    return float((torch.logaddexp(torch.zeros_like(eta), eta) - y * eta).mean() + 0.5 * L2 * (w @ w))


def _fastest_fit(x, y, solver: str, repeats: int, warm: int, **options):
    """A warm-up fit on the first ``warm`` rows, then the fastest of ``repeats`` logistic
    fits (``gpu_passes.fit_one``): ``(row, model)``."""
    gpu_passes.fit_one("logit", x[:warm], y[:warm], None, solver, L2, TORCHGLM_TOL, **options)
    best = None
    for _ in range(repeats):
        row, model = gpu_passes.fit_one("logit", x, y, None, solver, L2, TORCHGLM_TOL, **options)
        if best is None or row["time_s"] < best[0]["time_s"]:
            best = (row, model)
    return best


def fits(n: int, d: int, device: torch.device, repeats: int) -> dict:
    import numpy as np

    x, y = gpu_passes.problem("logit", n, d, None, torch.float64, device)
    x_cpu, y_cpu = x.cpu(), y.cpu()
    rows = {}
    warm = min(n, 10_000)
    runs = [(solver, {}) for solver in ("auto", "lbfgs", "newton")]
    # auto works in float32 here (then the float64 polish): its Hessian products in TF32/bf16
    runs += [("auto", {"hessian_precision": p}) for p in ("tf32", "bf16")]
    for solver, options in runs:
        row, model = _fastest_fit(x, y, solver, repeats, warm, **options)
        row["objective"] = logistic_objective(x_cpu, y_cpu, model.coef, model.intercept)
        name = f"torchglm {solver}" + "".join(f" {k}={v}" for k, v in options.items())
        rows[name] = row
    del x, y
    try:
        from sklearn.linear_model import LogisticRegression as SkLogistic
    except ImportError:
        sk_rows = {}
        note = "scikit-learn not installed"
    else:
        note = None
        sk_rows = {}
        X, t = x_cpu.numpy(), y_cpu.numpy()
        for solver in ("lbfgs", "newton-cholesky"):
            best = None
            for _ in range(repeats):
                clf = SkLogistic(C=1.0 / (L2 * n), solver=solver, tol=SKLEARN_TOL, max_iter=10_000)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    clf.fit(X, t)
                seconds = time.perf_counter() - t0
                if best is None or seconds < best[0]:
                    best = (seconds, clf)
            seconds, clf = best
            sk_rows[f"sklearn {solver}"] = {
                "time_s": seconds,
                "n_iter": int(np.max(clf.n_iter_)),
                "converged": bool(np.max(clf.n_iter_) < 10_000),
                "objective": logistic_objective(
                    x_cpu, y_cpu, torch.from_numpy(clf.coef_), torch.from_numpy(clf.intercept_)
                ),
            }
        rows.update(sk_rows)
    out = {
        "n": n,
        "d": d,
        "l2": L2,
        "sklearn_C": 1.0 / (L2 * n),
        "torchglm_tol": TORCHGLM_TOL,
        "sklearn_tol": SKLEARN_TOL,
        "torchglm_device": device.type,
        "sklearn_threads": _blas_threads(),
        "rows": rows,
    }
    if note:
        out["sklearn"] = note
        return out
    sk_best = min(r["objective"] for r in sk_rows.values())
    out["sklearn_best_objective"] = sk_best
    for name, row in rows.items():
        row["objective_rel_diff_to_sklearn_best"] = (row["objective"] - sk_best) / abs(sk_best)
        if name.startswith("torchglm"):
            for sk_name, sk_row in sk_rows.items():
                row[f"time_ratio_to_{sk_name.replace(' ', '_')}"] = row["time_s"] / sk_row["time_s"]
    return out


# -- 5. auto's crossover ------------------------------------------------------------
def crossover(n: int, widths: list[int], device: torch.device, repeats: int) -> dict:
    from torchglm.solvers import choose_solver
    from torchglm.solvers.api import AUTO_FLOAT32_MIN_FLOPS
    from torchglm.solvers.finish import NEWTON_MAX_COST

    rows = []
    for d in widths:
        x, y = gpu_passes.problem("logit", n, d, None, torch.float64, device)
        choice = choose_solver(gpu_passes._glm("logit", d, None, torch.float64, device))
        row = {"d": d, "hessian_cost": d + 1, "auto_picks": choice}
        for solver in ("newton", "lbfgs"):
            options = {}
            if solver == "newton" and n * (d + 1) ** 2 >= AUTO_FLOAT32_MIN_FLOPS:
                options["dtype"] = torch.float32  # as auto runs Newton (then the float64 polish)
            r, model = _fastest_fit(x, y, solver, repeats, min(n, 2_000), **options)
            row[f"{solver}_s"] = r["time_s"]
            row[f"{solver}_converged"] = r["converged"]
            row[f"{solver}_dtype"] = str(options.get("dtype", torch.float64)).replace("torch.", "")
            row[f"{solver}_objective"] = logistic_objective(x, y, model.coef, model.intercept)
        del x, y
        row["faster"] = "newton" if row["newton_s"] <= row["lbfgs_s"] else "lbfgs"
        row["newton_to_lbfgs"] = row["newton_s"] / row["lbfgs_s"]
        row["auto_picked_the_faster"] = choice == row["faster"]
        rows.append(row)
    return {"n": n, "newton_max_cost": NEWTON_MAX_COST, "device": device.type, "rows": rows}


def _blas_threads():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return sorted({i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"})


# -- the table --------------------------------------------------------------------
def print_report(report: dict) -> None:
    m = report["machine"]
    print(
        f"{m['device']} ({m['device_type']}), torch {m['torch']}, {m['threads']} thread(s), quick={m['quick']}"
    )
    print("\nmatmul (torch.mm, TFLOP/s):")
    for name, r in report["matmul"].items():
        print(f"  {name:<16} n={r['size']:<6} {r['tflops']:>9.3f}")


def print_passes(passes: dict) -> None:
    print("\npasses (full Hessian):")
    print(
        f"  {'problem':<36}{'pass s':>10}{'ref s':>10}{'pass/ref':>9}{'TFLOP/s':>9}"
        f"{'of mm':>8}{'ref of mm':>10}{'max rel diff':>14}"
    )
    for key, r in passes.items():
        print(
            f"  {key:<36}{r['pass[full]_s']:>10.5f}{r['reference_full_s']:>10.5f}"
            f"{r['ratio_full_to_reference']:>9.2f}{r['full_pass_tflops']:>9.3f}"
            f"{r['full_pass_fraction_of_matmul']:>8.1%}{r['reference_fraction_of_matmul']:>10.1%}"
            f"{r['max_rel_diff_full_to_reference']:>14.2e}"
        )
        for p in ("tf32", "bf16"):
            if f"pass[full,{p}]_s" in r:
                print(
                    f"  {'  hessian_precision=' + p:<36}{r[f'pass[full,{p}]_s']:>10.5f}{'':>10}"
                    f"{r[f'pass[full,{p}]_s'] / r['reference_full_s']:>9.2f}{'':>27}"
                    f"{r[f'max_rel_diff_full_{p}_to_reference']:>14.2e}"
                )


def print_sgd(s: dict) -> None:
    print(
        f"\nSGD (n={s['n_train']}, d={s['d']}, batch {s['batch']}, lr {s['lr']}; ratio to {s['baseline']}):"
    )
    print(f"  {'path':<36}{'samples/s':>14}{'ratio':>8}{'epoch s':>10}{'loss after':>12}")
    for name, r in s["rows"].items():
        if "absent" in r:
            print(f"  {name:<36}  absent: {r['absent']}")
        else:
            print(
                f"  {name:<36}{r['samples_per_s']:>14,.0f}{r['ratio_to_baseline']:>8.2f}"
                f"{r['epoch_s']:>10.4f}{r['loss_after']:>12.5f}"
            )


def print_fits(f: dict) -> None:
    print(
        f"\nfits (logistic n={f['n']} d={f['d']}, l2={f['l2']}, float64; torchglm on {f['torchglm_device']}):"
    )
    print(f"  {'method':<40}{'time s':>10}{'iter':>6}{'conv':>6}{'objective':>20}{'rel diff':>11}  ratios")
    for name, r in f["rows"].items():
        ratios = " ".join(f"{k[14:]}={v:.2f}" for k, v in r.items() if k.startswith("time_ratio_to_"))
        rel = r.get("objective_rel_diff_to_sklearn_best")
        print(
            f"  {name:<40}{r['time_s']:>10.4f}{r['n_iter']:>6}{r['converged']!s:>6}"
            f"{r['objective']:>20.14f}{'' if rel is None else f'{rel:>11.1e}'}  {ratios}"
        )


def print_crossover(c: dict) -> None:
    print(
        f"\ncrossover (logistic n={c['n']}, auto: Newton up to cost {c['newton_max_cost']} on {c['device']}):"
    )
    print(
        f"  {'d':>6}{'cost':>6}{'newton s':>10}{'lbfgs s':>10}{'ratio':>8}{'faster':>8}{'auto':>8}{'right':>7}"
    )
    for r in c["rows"]:
        print(
            f"  {r['d']:>6}{r['hessian_cost']:>6}{r['newton_s']:>10.4f}{r['lbfgs_s']:>10.4f}"
            f"{r['newton_to_lbfgs']:>8.2f}{r['faster']:>8}{r['auto_picks']:>8}{r['auto_picked_the_faster']!s:>7}"
        )


SECTIONS = ("passes", "sgd", "fits", "crossover")  # after machine and matmul, always measured
PRINTERS = {"passes": print_passes, "sgd": print_sgd, "fits": print_fits, "crossover": print_crossover}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (best reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch and BLAS (threadpoolctl) threads")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/gpu[_cpu].json)")
    ap.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="what to measure (default all)",
    )
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu.py: --device cuda but no CUDA device on this machine; nothing measured.")
        return 0
    device = torch.device(args.device)
    if args.threads:
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(args.threads)
        threadpool_limits(args.threads)
    stem = "gpu" if device.type == "cuda" else "gpu_cpu"
    if list(args.sections) != list(SECTIONS):  # a partial run does not overwrite the whole one
        stem += "_" + "+".join(args.sections)
    out_path = Path(args.out or RESULTS / f"{stem}.json")
    import pytorch_lightning  # noqa: F401  (imported first: it sets its loggers' level on import)

    warnings.filterwarnings("ignore", module="pytorch_lightning")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

    cfg = sizes(device, args.quick)
    report = {"machine": machine(device, args.quick, argv)}
    rates = {
        "float32": matmul_rate(torch.float32, cfg["matmul"], device, args.repeats),
        "float64": matmul_rate(torch.float64, cfg["matmul"], device, args.repeats),
    }
    if device.type == "cuda":
        rates["float32 (TF32)"] = matmul_rate(torch.float32, cfg["matmul"], device, args.repeats, tf32=True)
    report["matmul"] = rates
    run = {
        "passes": lambda: passes(cfg["passes"], device, args.repeats, rates),
        "sgd": lambda: sgd(cfg["sgd_n"], cfg["sgd_epochs"], device),
        "fits": lambda: fits(*cfg["fit"], device, args.repeats),
        "crossover": lambda: crossover(*cfg["crossover"], device, args.repeats),
    }
    for name in SECTIONS:
        if name in args.sections:
            report[name] = run[name]()
    print_report(report)
    for name in SECTIONS:
        if name in report:
            PRINTERS[name](report[name])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
