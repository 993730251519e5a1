"""bench/gpu.py, the GPU benchmark, runs on the CPU with small sizes (``--quick``)
and checks what it measures: the pass's Hessian against the hand-written GEMM,
torchglm's fits against scikit-learn's objective, SGD throughput, and the
CUDA-graph rows marked absent (with a reason) without CUDA."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_gpu") / "gpu.json"
    argv = ["--device", "cpu", "--quick", "--out", str(out), "--threads", "1"]
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out.parent,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "passes (full Hessian)" in run.stdout and "wrote" in run.stdout
    return json.loads(out.read_text())


def test_sections_and_machine(report):
    assert {"machine", "matmul", "passes", "sgd", "fits", "crossover"} <= set(report)
    m = report["machine"]
    assert m["device_type"] == "cpu" and m["quick"] is True and m["threads"] == 1
    assert m["device"] and m["torch"] and "--quick" in m["command"]
    assert set(report["matmul"]) == {"float32", "float64"}  # TF32: CUDA only
    assert all(r["tflops"] > 0 for r in report["matmul"].values())


def test_pass_hessian_matches_the_reference(report):
    keys = set(report["passes"])
    assert {k.split()[0] for k in keys} == {"logit", "softmax"}
    assert {k.split()[-1] for k in keys} == {"float32", "float64"}
    for key, r in report["passes"].items():
        bound = 1e-4 if r["dtype"] == "float32" else 1e-10
        assert 0 <= r["max_rel_diff_full_to_reference"] < bound, key
        assert r["pass[full]_s"] > 0 and r["reference_full_s"] > 0
        assert r["ratio_full_to_reference"] == pytest.approx(r["pass[full]_s"] / r["reference_full_s"])
        if r["dtype"] == "float32":
            # TF32 is CUDA's: on a CPU the float32 products; bfloat16 good to its 8 bits
            assert r["max_rel_diff_full_tf32_to_reference"] == r["max_rel_diff_full_to_reference"], key
            assert 1e-6 < r["max_rel_diff_full_bf16_to_reference"] < 2e-2, key
            assert r["pass[full,tf32]_s"] > 0 and r["pass[full,bf16]_s"] > 0
        else:
            assert "pass[full,bf16]_s" not in r
        rate = report["matmul"][r["dtype"]]["tflops"]
        assert r["full_pass_fraction_of_matmul"] == pytest.approx(r["full_pass_tflops"] / rate)


def test_sgd_rows(report):
    s = report["sgd"]
    rows = s["rows"]
    for name in ("hand loop (CUDA graph)", "GLMTask (cuda_graphs=True)"):
        assert isinstance(rows[name]["absent"], str) and rows[name]["absent"], name
    assert s["baseline"] == "hand loop (eager)"
    measured = [r for r in rows.values() if "absent" not in r]
    assert {"hand loop (eager)", "GLMTask (default steps_per_block)"} <= set(rows)
    assert len(measured) == 2
    for r in measured:
        assert r["samples_per_s"] > 0 and math.isfinite(r["samples_per_s"])
        assert r["ratio_to_baseline"] > 0
        assert r["loss_after"] < s["loss_at_start"]  # it trained
    assert rows["hand loop (eager)"]["ratio_to_baseline"] == 1.0


def test_fits_reach_sklearns_objective(report):
    f = report["fits"]
    rows = f["rows"]
    assert f["sklearn_C"] == pytest.approx(1 / (f["l2"] * f["n"]))
    sk = min(rows[k]["objective"] for k in ("sklearn lbfgs", "sklearn newton-cholesky"))
    for solver in ("auto", "lbfgs", "newton", "auto hessian_precision=tf32", "auto hessian_precision=bf16"):
        r = rows[f"torchglm {solver}"]
        assert r["converged"], (solver, r["message"])
        assert r["objective"] <= sk + 1e-6 * abs(sk), solver
        assert r["time_s"] > 0 and r["time_ratio_to_sklearn_lbfgs"] > 0


def test_crossover_rows(report):
    """auto's Newton/L-BFGS switch measured at growing width: what choose_solver picks
    on this device (Newton up to cost 128 on a CPU), both fits at the same optimum."""
    c = report["crossover"]
    assert c["device"] == "cpu" and c["newton_max_cost"] == 128
    assert [r["d"] for r in c["rows"]] == [16, 64, 256]
    for r in c["rows"]:
        assert r["auto_picks"] == ("newton" if r["hessian_cost"] <= 128 else "lbfgs")
        assert r["newton_s"] > 0 and r["lbfgs_s"] > 0
        assert r["faster"] == ("newton" if r["newton_s"] <= r["lbfgs_s"] else "lbfgs")
        assert r["auto_picked_the_faster"] == (r["auto_picks"] == r["faster"])
        assert r["newton_converged"] and r["lbfgs_converged"]
        assert r["newton_objective"] == pytest.approx(r["lbfgs_objective"], rel=1e-9)
