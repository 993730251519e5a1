"""Peak resident memory of an out-of-core Newton fit of an ``n x d`` float32 ``.npy``:
from Python (``NpyBatches`` + ``run_passes``) against ``train.py`` with a
``data.memory_budget`` below the file's size (streamed) and above it (loaded).

Each fit runs in its own process, which reports its own peak RSS (``VmHWM`` of
``/proc/self/status``, the interpreter and its imports included; not
``getrusage``'s ``ru_maxrss``, which a process started by ``fork`` + ``exec``
inherits from its parent)::

    python bench/cli_memory.py --rows 2000000 --cols 50
    python bench/cli_memory.py --rows 200000 --cols 50 --skip-loaded   # a smaller check

Prints one line per path: peak RSS in MB, wall seconds, and the ratio to the Python
path, and writes them to ``bench/results/cli_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

HWM = """
def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
"""

PYTHON_PATH = (
    HWM
    + """
import sys, torch
from torchglm import LogisticRegression
from torchglm.data.out_of_core import NpyBatches
from torchglm.passes import run_passes
d = int(sys.argv[3])
batches = NpyBatches(sys.argv[1], sys.argv[2], batch_size=65536, dtype=torch.float32)
result = run_passes(LogisticRegression(d, dtype=torch.float32).make_fitter("newton"), batches, 20)
print(result.converged, hwm())
"""
)

CLI_PATH = (
    HWM
    + """
import sys
from torchglm.training.entry import main
code = main(sys.argv[1:])
print(code, hwm())
"""
)

CONFIG = """model:
  model:
    class_path: torchglm.LogisticRegression
  solver: newton
data:
  source: {source}
  batch_size: 65536
  dtype: float32
  memory_budget: {budget}
  val_fraction: 0.2
  test_fraction: 0.2
trainer:
  max_epochs: 20
"""


def _run(code: str, *args: str) -> tuple[float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True
    )
    seconds = time.perf_counter() - start
    first, kb = out.stdout.strip().splitlines()[-1].split()
    return int(kb) / 1024, seconds, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--cols", type=int, default=50)
    parser.add_argument("--skip-loaded", action="store_true", help="skip the in-memory train.py run")
    args = parser.parse_args()
    n, d = args.rows, args.cols
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # written by another process, so this one stays small
        subprocess.run([sys.executable, __file__, "--write", str(tmp), str(n), str(d)], check=True)
        size = (tmp / "xy.npy").stat().st_size
        rows = {}
        rows["python (NpyBatches + run_passes)"] = _run(
            PYTHON_PATH, str(tmp / "x.npy"), str(tmp / "y.npy"), str(d)
        )
        budgets = {"train.py streamed": size // 2}
        if not args.skip_loaded:
            budgets["train.py loaded"] = size * 2
        for name, budget in budgets.items():
            cfg = tmp / f"{budget}.yaml"
            cfg.write_text(CONFIG.format(source=tmp / "xy.npy", budget=budget))
            rows[name] = _run(CLI_PATH, "--config", str(cfg), "--run_dir", str(tmp / f"run_{budget}"))
            metrics = json.loads((tmp / f"run_{budget}" / "metrics.json").read_text())
            assert metrics["fit"]["converged"], metrics["fit"]
        base = rows["python (NpyBatches + run_passes)"][0]
        print(f"{n} x {d} float32 .npy ({size / 1e6:.0f} MB)")
        for name, (mb, seconds, first) in rows.items():
            print(f"{name:<34} peak RSS {mb:8.0f} MB  {seconds:7.1f} s  x{mb / base:.2f}  ({first})")
        out = ROOT / "bench" / "results" / "cli_memory.json"
        out.parent.mkdir(exist_ok=True)
        result = {
            "rows": n,
            "cols": d,
            "load": os.getloadavg(),
            "paths": {
                k: {"peak_rss_mb": mb, "seconds": s, "ratio": mb / base} for k, (mb, s, _) in rows.items()
            },
        }
        out.write_text(json.dumps(result, indent=1) + "\n")


def write(tmp: Path, n: int, d: int) -> None:
    """x.npy, y.npy and xy.npy (features then the label) of a logistic model."""
    rng = np.random.default_rng(0)
    x = np.lib.format.open_memmap(tmp / "x.npy", mode="w+", dtype=np.float32, shape=(n, d))
    xy = np.lib.format.open_memmap(tmp / "xy.npy", mode="w+", dtype=np.float32, shape=(n, d + 1))
    y = np.lib.format.open_memmap(tmp / "y.npy", mode="w+", dtype=np.float32, shape=(n,))
    w = rng.normal(size=d) / np.sqrt(d)
    for i in range(0, n, 100_000):
        j = min(i + 100_000, n)
        block = rng.normal(size=(j - i, d)).astype(np.float32)
        label = (rng.random(j - i) < 1 / (1 + np.exp(-(block @ w)))).astype(np.float32)
        x[i:j], y[i:j], xy[i:j, :d], xy[i:j, d] = block, label, block, label
    del x, y, xy


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
