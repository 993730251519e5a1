"""Peak memory of ``torchglm predict`` against the number of input rows.

Trains a small logistic regression once (``train.py``, 5 features), writes prediction
inputs of ``--rows`` rows (CSV), and runs ``train.py predict`` on each in a fresh
subprocess; an intermediate process reports the peak resident memory of its one child
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``) and the wall time. ``predict``
reads and predicts in blocks of ``CHUNK_ROWS`` rows and appends to its output, so
the peak should not grow with the rows. Run::

    python bench/predict_memory.py                          # 1M rows
    python bench/predict_memory.py --rows 1000000 5000000
    python bench/predict_memory.py --before /path/to/old/checkout   # also another commit's predict

Writes ``bench/results/predict_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
D = 5

MEASURE = r"""
import resource, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
seconds = time.perf_counter() - t0
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, seconds)
"""


def write_csv(path: Path, rows: int, with_target: bool, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    names = [f"x{j}" for j in range(D)] + (["y"] if with_target else [])
    with open(path, "w") as fh:
        fh.write(",".join(names) + "\n")
        for start in range(0, rows, 200_000):
            m = min(200_000, rows - start)
            x = rng.normal(size=(m, D))
            if with_target:
                y = (x[:, 0] - 0.5 * x[:, 1] + rng.normal(size=m) > 0).astype(float)
                x = np.column_stack([x, y])
            np.savetxt(fh, x, delimiter=",", fmt="%.17g")


def _env(root: Path) -> dict:
    return {"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PATH": ""}


def train(tmp: Path) -> Path:
    data = tmp / "train.csv"
    write_csv(data, 2000, with_target=True)
    run = tmp / "run"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--config",
            str(ROOT / "configs" / "tiny.yaml"),
            "--data.source",
            str(data),
            "--data.target",
            "y",
            "--data.dataset_options",
            "null",
            "--model.solver",
            "newton",
            "--trainer.max_epochs",
            "10",
            "--run_dir",
            str(run),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env=_env(ROOT),
    )
    return run / "model.ckpt"


def measure(root: Path, ckpt: Path, data: Path, out: Path) -> dict:
    cmd = [sys.executable, str(root / "train.py"), "predict"]
    cmd += ["--ckpt_path", str(ckpt), "--input", str(data), "--output", str(out)]
    res = subprocess.run(
        [sys.executable, "-c", MEASURE, *cmd],
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
        env=_env(root),
    )
    peak_mb, seconds = map(float, res.stdout.split())
    return {"peak_rss_mb": round(peak_mb, 1), "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--before", type=Path, default=None, help="also measure another checkout's predict")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ckpt = train(tmp)
        for rows in args.rows:
            data = tmp / f"in_{rows}.csv"
            write_csv(data, rows, with_target=False, seed=rows)
            entry = {"rows": rows, "file_mb": round(data.stat().st_size / 1e6, 1)}
            entry["torchglm"] = measure(ROOT, ckpt, data, tmp / "out.csv")
            if args.before is not None:
                entry["before"] = measure(args.before, ckpt, data, tmp / "out_before.csv")
                same = (tmp / "out.csv").read_bytes() == (tmp / "out_before.csv").read_bytes()
                entry["before"]["same_output_bytes"] = same
            data.unlink()
            print(json.dumps(entry))
            results.append(entry)
    out = ROOT / "bench" / "results" / "predict_memory.json"
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
