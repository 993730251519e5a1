"""A killed run resumes from its last complete checkpoint to the uninterrupted result."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _train(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "--config", TINY,
                           "--run_dir", str(run_dir), "--trainer.max_epochs", "6",
                           "--early_stopping.patience", "100", *extra],
                          capture_output=True, text=True, env=env, cwd=run_dir.parent)


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("model.")}


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["sgd", "newton"])
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, solver):
    extra = ["--model.solver", solver] + (["--model.model.init_args.l2", "0.01", "--trainer.max_epochs", "30"]
                                          if solver == "newton" else [])
    full = _train(tmp_path / "full", *extra)
    assert full.returncode == 0, full.stderr[-2000:]

    killed = _train(tmp_path / "killed", *extra, "--trainer.callbacks+=killer.KillAtEpoch",
                    "--trainer.callbacks.epoch", "3")
    assert killed.returncode == -9  # SIGKILL: no cleanup ran
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    assert torch.load(last, map_location="cpu", weights_only=False)["epoch"] == 2  # loadable

    resumed = _train(tmp_path / "killed", *extra, "--resume", str(last))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # The fitted model each run reports (SGD: best validation epoch; Newton: the final iterate).
    ckpts = [json.loads((tmp_path / r / "metrics.json").read_text())["checkpoint"] for r in ("full", "killed")]
    want, got = _weights(Path(ckpts[0])), _weights(Path(ckpts[1]))
    assert want.keys() == got.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=1e-12, msg=k)
    fits = [json.loads((tmp_path / r / "metrics.json").read_text())["fit"] for r in ("full", "killed")]
    assert fits[0]["n_iter"] == fits[1]["n_iter"] and fits[0]["converged"] == fits[1]["converged"]


def test_resume_from_a_missing_checkpoint_is_an_error(tmp_path):
    run = _train(tmp_path / "run", "--resume", str(tmp_path / "nope.ckpt"))
    assert run.returncode != 0
    assert "resume: expected an existing checkpoint file" in run.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
