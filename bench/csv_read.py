"""Reading a numeric CSV: ``torchglm.data.read_table`` against ``pandas.read_csv``.

The training reader (and ``torchglm predict``) parse CSVs with pandas' C parser
(:func:`torchglm.data.files.iter_csv`); this measures what that layer costs on top:
the header read, the NaN check, the feature/target split. Each reader runs in its own
subprocess (``--repeats`` times), which reports its wall time and its peak resident
memory (``ru_maxrss``) above what the process held after its imports. Run::

    python bench/csv_read.py                 # ~100 MB file (700,000 rows x 8 columns)
    python bench/csv_read.py --rows 1500000  # ~200 MB
    python bench/csv_read.py --before /path/to/old/checkout  # also the reader of another commit

Writes ``bench/results/csv_read.json``.
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

CHILD = r"""
import json, resource, sys, time
import numpy as np
import pandas as pd
from torchglm.data import read_table
path, which = sys.argv[1], sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if which == "pandas":
    x = pd.read_csv(path).to_numpy()
else:
    x = read_table(path, "y").x
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import torchglm
assert torchglm.__file__.startswith(sys.argv[3]), torchglm.__file__
print(json.dumps({"seconds": seconds, "peak_mb_above_imports": (peak - base) / 1024, "shape": list(x.shape)}))
"""


def write_csv(path: Path, rows: int, cols: int, seed: int = 0) -> None:
    """``cols - 1`` float features printed with full precision (``repr``) and an integer ``y``."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        fh.write(",".join([f"x{j}" for j in range(cols - 1)] + ["y"]) + "\n")
        block = 100_000
        for start in range(0, rows, block):
            m = min(block, rows - start)
            x = rng.normal(size=(m, cols - 1))
            y = rng.integers(0, 2, size=m)
            fh.writelines(",".join(map(repr, r.tolist())) + f",{t}\n" for r, t in zip(x, y))


def run(path: Path, which: str, root: Path = ROOT) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), which, str(root)],
        cwd=root,  # python -c puts the working directory first on sys.path
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PATH": ""},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=700_000)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--before", type=Path, default=None, help="also time read_table of another checkout (its root)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.csv"
        write_csv(path, args.rows, args.cols)
        size_mb = path.stat().st_size / 1e6
        results = {"rows": args.rows, "cols": args.cols, "file_mb": round(size_mb, 1)}
        for which in ("pandas", "torchglm"):
            runs = [run(path, which) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["seconds"])
            results[which] = {
                "seconds": round(best["seconds"], 3),
                "peak_mb_above_imports": round(max(r["peak_mb_above_imports"] for r in runs), 1),
            }
            print(f"{which:9s} {best['seconds']:7.3f} s  {results[which]['peak_mb_above_imports']:8.1f} MB")
        if args.before is not None:
            runs = [run(path, "torchglm", args.before) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["seconds"])
            results["torchglm_before"] = {
                "root": str(args.before),
                "seconds": round(best["seconds"], 3),
                "peak_mb_above_imports": round(max(r["peak_mb_above_imports"] for r in runs), 1),
            }
            print(
                f"before    {best['seconds']:7.3f} s  {results['torchglm_before']['peak_mb_above_imports']:8.1f} MB"
            )
        results["time_ratio"] = round(results["torchglm"]["seconds"] / results["pandas"]["seconds"], 2)
        results["memory_ratio"] = round(
            results["torchglm"]["peak_mb_above_imports"] / results["pandas"]["peak_mb_above_imports"], 2
        )
        print(
            f"file {size_mb:.1f} MB; torchglm / pandas: time {results['time_ratio']}x, "
            f"peak memory {results['memory_ratio']}x"
        )
    out = ROOT / "bench" / "results" / "csv_read.json"
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
