"""A killed run resumes from its last complete checkpoint to the uninterrupted result."""

import json
from pathlib import Path

import pytest
import torch

from run_util import checkpoint_weights, train_tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["sgd", "newton", "lbfgs"])
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, solver):
    # lbfgs: killed at pass 8, with stored pairs (its memory) to restore
    extra = ["--model.solver", solver] + (
        ["--model.model.init_args.l2", "0.01", "--trainer.max_epochs", "60"] if solver != "sgd" else []
    )
    full = train_tiny(tmp_path / "full", *extra)
    assert full.returncode == 0, full.stderr[-2000:]

    # tiny.yaml: 120 training rows in batches of 32, so batch 0 is mid-pass (a block
    # fit killed between blocks: tests/training/test_sgd_blocks.py)
    killed = train_tiny(
        tmp_path / "killed",
        *extra,
        "--trainer.callbacks+=killer.KillMidEpoch",
        "--trainer.callbacks.epoch",
        "8" if solver == "lbfgs" else "3",
    )
    assert killed.returncode == -9  # SIGKILL: no cleanup ran
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    state = torch.load(last, map_location="cpu", weights_only=False)  # loadable
    assert state["epoch"] == (7 if solver == "lbfgs" else 2)
    if solver == "lbfgs":
        assert state["torchglm"]["fitter_state"]["pairs"]  # the memory that resume restores

    resumed = train_tiny(tmp_path / "killed", *extra, "--resume", str(last))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # The fitted model each run reports (SGD: best validation epoch; Newton: the final iterate).
    ckpts = [
        json.loads((tmp_path / r / "metrics.json").read_text())["checkpoint"] for r in ("full", "killed")
    ]
    want, got = checkpoint_weights(Path(ckpts[0])), checkpoint_weights(Path(ckpts[1]))
    assert want.keys() == got.keys()
    for k in want:
        # Bit for bit: the fitter's checkpointed state holds its accepted point in its
        # own dtype, and pass-based fits read the rows in one fixed order (a new order
        # per epoch left the resumed iterates an ulp away, 5.6e-17).
        assert torch.equal(got[k], want[k]), (k, (got[k].double() - want[k].double()).abs().max())
    fits = [json.loads((tmp_path / r / "metrics.json").read_text())["fit"] for r in ("full", "killed")]
    assert fits[0]["n_iter"] == fits[1]["n_iter"] and fits[0]["converged"] == fits[1]["converged"]
    # the reported fit time covers the killed part too (up to its last checkpoint)
    assert fits[1]["resumed_from"] == str(last)
    assert fits[1]["seconds"] >= round(state["torchglm"]["fit_seconds"], 3) > 0


def test_resume_from_a_missing_checkpoint_is_an_error(tmp_path):
    run = train_tiny(tmp_path / "run", "--resume", str(tmp_path / "nope.ckpt"))
    assert run.returncode != 0
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "resume: expected an existing checkpoint file" in run.stderr
    assert "run once without --resume first" in run.stderr
    assert not (tmp_path / "run").exists()
