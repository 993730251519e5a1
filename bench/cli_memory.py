"""Peak resident memory of an out-of-core Newton fit of an ``n x d`` float32 ``.npy``:
from Python (``NpyBatches`` + ``run_passes``) against ``train.py`` with a
``data.memory_budget`` below the file's size (streamed) and above it (loaded).
With ``--format csv`` (or ``tsv``, ``parquet``) the data are a table instead: ``d``
numeric columns with empty cells (``data.missing: mean``), a text category
(``data.categorical``) and labels {1, 2}, and ``train.py`` streamed is compared with
``train.py`` loaded (there is no Python path for a text table).

Each fit runs in its own process, which reports its own peak RSS (``VmHWM`` of
``/proc/self/status``, the interpreter and its imports included; not
``getrusage``'s ``ru_maxrss``, which a process started by ``fork`` + ``exec``
inherits from its parent)::

    python bench/cli_memory.py --rows 2000000 --cols 50 --repeat 3   # every path 3 times
    python bench/cli_memory.py --rows 200000 --cols 50 --skip-loaded   # a smaller check
    python bench/cli_memory.py --format csv --rows 1000000 --cols 20

Prints one line per path and repeat: peak RSS in MB, wall seconds, and the ratio to
the first path of the same repeat (the Python path; ``train.py`` streamed for a
table), and writes them (a list per path, one entry per repeat) to
``bench/results/cli_memory.json`` (``.npy``) or ``cli_memory_<format>.json`` (a table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

TABLE_CONFIG = CONFIG.replace(
    "  source: {source}\n", "  source: {source}\n  target: label\n  categorical: [site]\n  missing: mean\n"
)


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
    parser.add_argument("--format", choices=["npy", "csv", "tsv", "parquet"], default="npy")
    parser.add_argument("--skip-loaded", action="store_true", help="skip the in-memory train.py run")
    parser.add_argument("--repeat", type=int, default=1, help="run every path this many times (one file)")
    args = parser.parse_args()
    n, d, fmt = args.rows, args.cols, args.format
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # written by another process, so this one stays small
        subprocess.run([sys.executable, __file__, "--write", str(tmp), str(n), str(d), fmt], check=True)
        source = tmp / ("xy.npy" if fmt == "npy" else f"table.{fmt}")
        size = _file_bytes(source)
        budgets = {"train.py streamed": size // 2}
        if not args.skip_loaded:
            budgets["train.py loaded"] = size * 2
        repeats, loads = [], []
        for _ in range(args.repeat):
            loads.append(os.getloadavg()[0])
            repeats.append(_paths(fmt, tmp, source, d, budgets))
        base = [next(iter(rows.values()))[0] for rows in repeats]
        what = f"{n} x {d} float32 .npy" if fmt == "npy" else f"{n} x ({d} numeric + category + label) .{fmt}"
        print(f"{what} ({source.stat().st_size / 1e6:.0f} MB on disk, {size / 1e6:.0f} MB of values)")
        for rows, b, load in zip(repeats, base, loads):
            for name, (mb, seconds, first) in rows.items():
                print(
                    f"{name:<34} peak RSS {mb:8.0f} MB  {seconds:7.1f} s  x{mb / b:.2f}  ({first}; load {load:.1f})"
                )
        result = {
            "data": what,
            "rows": n,
            "cols": d,
            "file_mb": source.stat().st_size / 1e6,
            "load": os.getloadavg(),
            "load_before_each_repeat": loads,
            "threads": os.environ.get("OMP_NUM_THREADS", "1"),
            # one entry per repeat in each list; ratio: to the first path of the same repeat
            "runs": {
                name: {
                    "peak_rss_mb": [rows[name][0] for rows in repeats],
                    "seconds": [rows[name][1] for rows in repeats],
                    "ratio": [rows[name][0] / b for rows, b in zip(repeats, base)],
                }
                for name in repeats[0]
            },
        }
        out = ROOT / "bench" / "results" / ("cli_memory.json" if fmt == "npy" else f"cli_memory_{fmt}.json")
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


def _paths(fmt: str, tmp: Path, source: Path, d: int, budgets: dict[str, int]) -> dict[str, tuple]:
    """One run of every path: ``{name: (peak MB, seconds, first output word)}``."""
    rows = {}
    if fmt == "npy":
        rows["python (NpyBatches + run_passes)"] = _run(
            PYTHON_PATH, str(tmp / "x.npy"), str(tmp / "y.npy"), str(d)
        )
    for name, budget in budgets.items():
        cfg = tmp / f"{budget}.yaml"
        cfg.write_text((CONFIG if fmt == "npy" else TABLE_CONFIG).format(source=source, budget=budget))
        run = tmp / f"run_{budget}"
        shutil.rmtree(run, ignore_errors=True)
        rows[name] = _run(CLI_PATH, "--config", str(cfg), "--run_dir", str(run))
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["fit"]["converged"], metrics["fit"]
        assert bool(metrics["data"].get("streamed")) == (name == "train.py streamed"), metrics["data"]
    return rows


def _file_bytes(path: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from torchglm.data.out_of_core import file_bytes

    return file_bytes(path)


def write_table(tmp: Path, n: int, d: int, fmt: str) -> None:
    """table.<fmt>: d numeric columns (every 29th cell of each empty), a category
    ``site`` of four levels and a label in {1, 2} of a logistic model, written a
    block of rows at a time."""
    import pandas as pd

    rng = np.random.default_rng(0)
    w = rng.normal(size=d) / np.sqrt(d)
    path = tmp / f"table.{fmt}"
    writer = None
    with open(path, "w", encoding="utf-8") if fmt != "parquet" else open(os.devnull) as fh:
        for i in range(0, n, 100_000):
            m = min(100_000, n - i)
            x = rng.normal(size=(m, d))
            site = rng.choice(np.array(["north", "south", "east", "west"]), size=m)
            eta = x @ w + 0.5 * (site == "east")
            frame = pd.DataFrame({f"x{j}": x[:, j] for j in range(d)})
            for j in range(d):
                frame.iloc[(np.arange(m) + j) % 29 == 0, j] = np.nan
            frame["site"] = site
            frame["label"] = np.where(rng.random(m) < 1 / (1 + np.exp(-eta)), 2, 1)
            if fmt == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq

                table = pa.Table.from_pandas(frame, preserve_index=False)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
            else:
                sep = "\t" if fmt == "tsv" else ","
                frame.to_csv(fh, sep=sep, index=False, header=i == 0, float_format="%.6g", na_rep="")
    if writer is not None:
        writer.close()


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
        if sys.argv[5] == "npy":
            write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        else:
            write_table(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
