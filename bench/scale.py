"""Scaling benchmark: 1 vs 2 processes, and out-of-core vs in-memory.

    python bench/scale.py            # full sizes (a few minutes on 2 cores)
    python bench/scale.py --quick    # small sizes, for a smoke run

Parts (each timed in fresh processes, so peak RSS is per run):

1. Newton (logistic, float64) on n x d synthetic data: one process with 2
   threads vs two gloo processes with 1 thread each, each holding only its
   shard; the per-pass sums are all-reduced, so both take identical steps.
2. Mini-batch SGD (Adam, one epoch per run, several epochs) under the Lightning
   Trainer: ``devices=1`` vs ``strategy=ddp, devices=2`` on CPU.
3. Out-of-core: Newton and SGD fits reading an ``.npy`` file a chunk at a time
   (``NpyBatches``) vs the same fits on in-memory tensors; peak resident memory
   (``ru_maxrss``) of each run next to the file's size.

Writes ``bench/results/scale.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def make_data(path: Path, n: int, d: int, seed: int = 0, chunk: int = 200_000) -> None:
    """Write x.npy (n, d) float64 and y.npy (n,) int64 from a logistic model, by chunks."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d) / np.sqrt(d)
    x_mm = np.lib.format.open_memmap(path / "x.npy", mode="w+", dtype=np.float64, shape=(n, d))
    y_mm = np.lib.format.open_memmap(path / "y.npy", mode="w+", dtype=np.int64, shape=(n,))
    for i in range(0, n, chunk):
        j = min(i + chunk, n)
        x = rng.normal(size=(j - i, d))
        x_mm[i:j] = x
        y_mm[i:j] = rng.random(j - i) < 1 / (1 + np.exp(-(x @ w + 0.3)))
    x_mm.flush()
    y_mm.flush()
    del x_mm, y_mm


def _peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM). Not ``ru_maxrss``: Linux carries
    that over ``fork``/``exec`` from the parent, which held the generated data."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- workers (run in child processes: `python bench/scale.py --worker NAME ...`) --------
def worker_newton(path: str, rank: int, world: int, threads: int, source: str, batch: int) -> dict:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group(
            "gloo", init_method=f"file://{path}/rendezvous_newton", rank=rank, world_size=world
        )
    from torchglm import LogisticRegression
    from torchglm.data import TensorBatches
    from torchglm.data.out_of_core import NpyBatches
    from torchglm.distributed import shard_range
    from torchglm.passes import run_passes

    rss0 = _peak_rss_mb()
    if source == "file":
        batches = NpyBatches(Path(path) / "x.npy", Path(path) / "y.npy", batch_size=batch)
        d = batches.n_features
    else:
        x = np.load(Path(path) / "x.npy", mmap_mode="r")
        lo, hi = shard_range(x.shape[0], rank, world)
        xt = torch.from_numpy(np.array(x[lo:hi]))
        yt = torch.from_numpy(np.array(np.load(Path(path) / "y.npy", mmap_mode="r")[lo:hi]))
        batches = TensorBatches(xt, yt, batch_size=batch)
        d = xt.shape[1]
    model = LogisticRegression(d, l2=1e-4, dtype=torch.float64)
    fitter = model.make_fitter("newton")
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    result = run_passes(fitter, batches, 100)
    seconds = time.perf_counter() - t0
    out = {
        "seconds": seconds,
        "n_iter": result.n_iter,
        "converged": result.converged,
        "loss": result.history[-1]["loss"],
        "peak_rss_mb": _peak_rss_mb(),
        "rss_before_data_mb": rss0,
        "coef": model.linear.weight.detach().flatten()[:3].tolist(),
    }
    if world > 1:
        dist.destroy_process_group()
    return out


def worker_sgd(
    path: str, rank: int, world: int, threads: int, source: str, batch: int, epochs: int = 3
) -> dict:
    import torch

    torch.set_num_threads(threads)
    from torchglm import LogisticRegression
    from torchglm.data import TensorBatches
    from torchglm.data.out_of_core import NpyBatches

    rss0 = _peak_rss_mb()
    if source == "file":
        batches = NpyBatches(
            Path(path) / "x.npy", Path(path) / "y.npy", batch_size=batch, dtype=torch.float32
        )
        d = batches.n_features
    else:
        xt = torch.from_numpy(np.load(Path(path) / "x.npy")).float()
        yt = torch.from_numpy(np.load(Path(path) / "y.npy"))
        batches = TensorBatches(xt, yt, batch_size=batch)
        d = xt.shape[1]
    model = LogisticRegression(d, l2=1e-4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    t0 = time.perf_counter()
    for _ in range(epochs):
        for b in batches:
            opt.zero_grad(set_to_none=True)
            loss = model.objective(b.x, b.y)
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "epochs": epochs,
        "loss": float(loss.detach()),
        "peak_rss_mb": _peak_rss_mb(),
        "rss_before_data_mb": rss0,
    }


WORKERS = {"newton": worker_newton, "sgd": worker_sgd}


def spawn(name: str, path: Path, world: int, threads: int, source: str, batch: int) -> list[dict]:
    """Run a worker in ``world`` fresh processes; return each rank's result."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                name,
                "--path",
                str(path),
                "--rank",
                str(r),
                "--world",
                str(world),
                "--threads",
                str(threads),
                "--source",
                source,
                "--batch",
                str(batch),
            ],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for r in range(world)
    ]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"worker {name} failed: {outs}")
    for f in path.glob("rendezvous*"):
        f.unlink()
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def sgd_trainer(path: Path, devices: int, epochs: int, batch: int) -> dict:
    """One Lightning fit via train.py on the .npy file; fit seconds from metrics.json."""
    run_root = path / f"runs_{devices}"
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "--config",
        str(ROOT / "configs" / "quickstart.yaml"),
        "--data.source",
        str(path / "data.npz"),
        "--data.target",
        "y",
        "--data.batch_size",
        str(batch),
        "--data.dtype",
        "float32",
        "--trainer.max_epochs",
        str(epochs),
        "--trainer.devices",
        str(devices),
        "--trainer.accelerator",
        "cpu",
        "--trainer.enable_progress_bar",
        "false",
        "--early_stopping.patience",
        "1000",
        "--run_dir",
        str(run_root),
    ]
    if devices > 1:
        cmd += ["--trainer.strategy", "ddp"]
    env = dict(os.environ, OMP_NUM_THREADS=str(2 // devices), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=path)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    metrics = json.loads((run_root / "metrics.json").read_text())
    return {
        "fit_seconds": metrics["fit"]["seconds"],
        "wall_seconds": wall,
        "test_accuracy": metrics["test"]["accuracy"],
        "epochs": epochs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker")
    ap.add_argument("--path")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--source", default="memory")
    ap.add_argument("--batch", type=int, default=65536)
    args = ap.parse_args()
    if args.worker:
        print(
            json.dumps(
                WORKERS[args.worker](args.path, args.rank, args.world, args.threads, args.source, args.batch)
            )
        )
        return

    n, d = (200_000, 20) if args.quick else (2_000_000, 30)
    n_sgd = 100_000 if args.quick else 400_000
    report: dict = {"n": n, "d": d, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        make_data(path, n, d)
        file_mb = (path / "x.npy").stat().st_size / 2**20
        report["file_mb"] = file_mb

        one = spawn("newton", path, 1, 2, "memory", 16384)[0]
        two = spawn("newton", path, 2, 1, "memory", 16384)
        report["newton_1proc"] = one
        report["newton_2proc"] = two
        report["newton_speedup_2proc"] = one["seconds"] / max(r["seconds"] for r in two)
        report["newton_2proc_max_coef_diff"] = max(
            abs(a - b) for r in two for a, b in zip(r["coef"], one["coef"])
        )

        ooc = spawn("newton", path, 1, 2, "file", 16384)[0]
        report["newton_out_of_core"] = ooc
        report["newton_out_of_core_time_ratio"] = ooc["seconds"] / one["seconds"]
        report["newton_out_of_core_max_coef_diff"] = max(abs(a - b) for a, b in zip(ooc["coef"], one["coef"]))

        sgd_mem = spawn("sgd", path, 1, 2, "memory", 1024)[0]
        sgd_file = spawn("sgd", path, 1, 2, "file", 1024)[0]
        report["sgd_in_memory"] = sgd_mem
        report["sgd_out_of_core"] = sgd_file
        report["sgd_out_of_core_time_ratio"] = sgd_file["seconds"] / sgd_mem["seconds"]

        # Trainer SGD on 1 vs 2 processes (a smaller in-memory file: train.py loads it whole).
        x = np.load(path / "x.npy", mmap_mode="r")[:n_sgd]
        y = np.load(path / "y.npy", mmap_mode="r")[:n_sgd]
        np.savez(path / "data.npz", X=np.asarray(x), y=np.asarray(y))
        epochs = 2 if args.quick else 3
        t1 = sgd_trainer(path, 1, epochs, 1024)
        t2 = sgd_trainer(path, 2, epochs, 1024)
        report["sgd_trainer_n"] = n_sgd
        report["sgd_trainer_1proc"] = t1
        report["sgd_trainer_2proc_ddp"] = t2
        report["sgd_trainer_speedup_2proc"] = t1["fit_seconds"] / t2["fit_seconds"]

    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "scale_quick.json" if args.quick else "scale.json"
    (RESULTS / name).write_text(json.dumps(report, indent=2))
    rows = [
        (
            "Newton, 1 process (2 threads)",
            f"{one['seconds']:.2f} s",
            f"{one['n_iter']} it",
            f"{one['peak_rss_mb']:.0f} MB",
        ),
        (
            "Newton, 2 gloo processes (1 thread each)",
            f"{max(r['seconds'] for r in two):.2f} s",
            f"x{report['newton_speedup_2proc']:.2f}",
            f"{max(r['peak_rss_mb'] for r in two):.0f} MB each",
        ),
        (
            "Newton, out-of-core .npy",
            f"{ooc['seconds']:.2f} s",
            f"x{report['newton_out_of_core_time_ratio']:.2f} time",
            f"{ooc['peak_rss_mb']:.0f} MB",
        ),
        ("SGD 3 epochs, in memory", f"{sgd_mem['seconds']:.2f} s", "", f"{sgd_mem['peak_rss_mb']:.0f} MB"),
        (
            "SGD 3 epochs, out-of-core .npy",
            f"{sgd_file['seconds']:.2f} s",
            f"x{report['sgd_out_of_core_time_ratio']:.2f} time",
            f"{sgd_file['peak_rss_mb']:.0f} MB",
        ),
        (f"Trainer SGD n={n_sgd}, devices=1", f"{t1['fit_seconds']:.2f} s", "", ""),
        (
            f"Trainer SGD n={n_sgd}, ddp devices=2",
            f"{t2['fit_seconds']:.2f} s",
            f"x{report['sgd_trainer_speedup_2proc']:.2f}",
            "",
        ),
    ]
    print(f"data: n={n}, d={d}, x.npy = {file_mb:.0f} MB")
    for r in rows:
        print(f"{r[0]:<44}{r[1]:>10}{r[2]:>14}{r[3]:>16}")


if __name__ == "__main__":
    main()
