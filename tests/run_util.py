"""Helpers of the tests that run ``train.py`` or a Trainer: its one ``error:`` line, the
files a run directory holds (the rule: a failure leaves the directory as it was), the
tiny config run as a subprocess, and the state a fit leaves for its continuation."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
#: A seconds-long run: logistic regression on 200 samples, 3 epochs.
TINY = str(ROOT / "configs" / "tiny.yaml")


def python_stdout(code: str) -> str:
    """The stripped stdout of ``python -c code`` in a fresh interpreter (what an import
    loads, what a warning is caught as, with nothing of this process's state)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def record_each_stage(monkeypatch, read) -> list:
    """What ``read()`` returns as each stage of :func:`torchglm.solvers.fit` begins its
    passes (``api.run_passes`` wrapped): the thread count, the inference mode, ..."""
    import torchglm.solvers.api as api

    seen = []
    run_passes = api.run_passes

    def recording(fitter, batches, limit):
        seen.append(read())
        return run_passes(fitter, batches, limit)

    monkeypatch.setattr(api, "run_passes", recording)
    return seen


def quiet_trainer(**kw):
    """A Lightning ``Trainer`` that writes and prints nothing of its own (no logger,
    checkpoint, progress bar or model summary, no sanity validation) unless ``kw``
    says otherwise."""
    import pytorch_lightning as pl

    quiet = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    return pl.Trainer(**{**quiet, **kw})


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` (dot files included) with a hash of its bytes."""
    if not path.exists():
        return {}
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def one_error(capsys, code: int, contains: str = "") -> str:
    """The command exited 2 with one ``error: ...`` line on stderr (containing ``contains``)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and contains in err[0], err
    return err[0]


def run_train_py(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=cwd,
        timeout=300,
    )


def train_tiny(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1")
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--config",
            TINY,
            "--run_dir",
            str(run_dir),
            "--trainer.max_epochs",
            "6",
            "--early_stopping.patience",
            "100",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=run_dir.parent,
    )


def checkpoint_weights(ckpt: Path) -> dict[str, torch.Tensor]:
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("model.")}


def fit_state(task, trainer):
    """Everything a fit leaves that its continuation depends on."""
    state = {f"param/{k}": v for k, v in task.model.state_dict().items()}
    opt = trainer.optimizers[0].state_dict()
    for i, s in opt["state"].items():
        for name, v in s.items():
            for j, t in enumerate(v if isinstance(v, list) else [v]):  # L-BFGS keeps lists and None
                state[f"opt/{i}/{name}/{j}"] = torch.tensor(float("nan")) if t is None else torch.as_tensor(t)
    state["opt/lr"] = torch.tensor([g["lr"] for g in opt["param_groups"]])
    for j, c in enumerate(trainer.lr_scheduler_configs):
        for name, v in c.scheduler.state_dict().items():
            if isinstance(v, (int, float)):
                state[f"sched{j}/{name}"] = torch.tensor(v)
    state["epoch_losses"] = torch.tensor([h["loss"] for h in task.driver.history])
    state["shuffle"] = trainer.datamodule.state_dict()["shuffle_generator"]
    state["global_step"] = torch.tensor(trainer.global_step)
    state["logger_step"] = torch.tensor(trainer.fit_loop.epoch_loop._batches_that_stepped)
    return state
