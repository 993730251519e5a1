"""The failure paths of train.py / torchglm: each gives one ``error: ...`` line,
exit status 2, and leaves the run directory exactly as it was before the command."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl

from torchglm.training.cli import main
from torchglm.training.rundir import RunDir
from run_util import one_error, snapshot

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent)]),
}

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run (sgd) and a finished Newton run of the same data."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["--config", TINY, "--run_dir", str(root / "sgd"), "--trainer.max_epochs", "2"]) == 0
    assert (
        main(
            [
                "--config",
                TINY,
                "--run_dir",
                str(root / "newton"),
                "--model.solver",
                "newton",
                "--model.model.init_args.l2",
                "0.01",
                "--trainer.max_epochs",
                "50",
            ]
        )
        == 0
    )
    return root


def _bad_checkpoints(tmp_path: Path, good: Path) -> dict[str, Path]:
    made = {
        "empty": tmp_path / "empty.ckpt",
        "garbage": tmp_path / "garbage.ckpt",
        "truncated": tmp_path / "t.ckpt",
    }
    made["empty"].write_bytes(b"")
    made["garbage"].write_bytes(bytes(range(256)) * 4)
    made["truncated"].write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    made["directory"] = tmp_path
    np.save(tmp_path / "array.npy", np.zeros(3))
    made["not_a_checkpoint"] = tmp_path / "array.npy"
    return made


@pytest.mark.parametrize("kind", ["empty", "garbage", "truncated", "directory", "not_a_checkpoint"])
def test_bad_checkpoint_to_predict(tmp_path, capsys, finished, kind):
    ckpt = _bad_checkpoints(tmp_path, finished / "sgd" / "model.ckpt")[kind]
    data = tmp_path / "in.csv"
    data.write_text("x0,x1\n0.5,1.5\n")
    code = main(
        ["predict", "--ckpt_path", str(ckpt), "--input", str(data), "--output", str(tmp_path / "o.csv")]
    )
    one_error(capsys, code, "ckpt_path: expected a checkpoint")
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize(
    "kind", ["empty", "garbage", "truncated", "other_shape", "other_solver", "newton_to_lbfgs"]
)
def test_bad_checkpoint_to_resume_leaves_the_run_dir(tmp_path, capsys, finished, kind):
    bad = _bad_checkpoints(tmp_path, finished / "sgd" / "model.ckpt")
    # the run directory of an earlier run, resumed with the wrong checkpoint
    run = tmp_path / "run"
    assert main(["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "1"]) == 0
    capsys.readouterr()
    before = snapshot(run)
    args = ["--config", TINY, "--run_dir", str(run)]
    if kind in bad:
        args += ["--resume", str(bad[kind])]
        message = "resume: expected a checkpoint written by train.py"
    elif kind == "other_shape":
        # the binary logistic checkpoint (one row of weights) into a two-class softmax
        # (two rows) on the same data: a 3-class softmax would be refused first, for its
        # class without samples
        args += [
            "--resume",
            str(finished / "sgd" / "checkpoints" / "last.ckpt"),
            "--model.model.class_path",
            "torchglm.SoftmaxRegression",
            "--model.model.init_args.n_classes",
            "2",
            "--data.n_classes",
            "2",
        ]
        message = "resume: expected a checkpoint of this config's model"
    elif kind == "other_solver":
        args += ["--resume", str(finished / "newton" / "checkpoints" / "last.ckpt")]
        message = "resume: expected a checkpoint of a 'sgd' fit (this config's solver), got"
    else:
        args += [
            "--resume",
            str(finished / "newton" / "checkpoints" / "last.ckpt"),
            "--model.solver",
            "lbfgs",
        ]
        message = "a 'newton' fit"
    one_error(capsys, main(args), message)
    assert snapshot(run) == before


def test_run_dir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("keep me\n")
    one_error(capsys, main(["--config", TINY, "--run_dir", str(target)]), "run_dir: expected a directory")
    assert target.read_text() == "keep me\n"


def test_predict_output_under_a_file(tmp_path, capsys, finished):
    data = tmp_path / "in.csv"
    data.write_text("x0,x1\n0.5,1.5\n")
    (tmp_path / "file").write_text("x")
    code = main(
        [
            "predict",
            "--run_dir",
            str(finished / "sgd"),
            "--input",
            str(data),
            "--output",
            str(tmp_path / "file" / "out.csv"),
        ]
    )
    one_error(capsys, code, "output: expected a writable file path")
    assert (tmp_path / "file").read_text() == "x"


def _regression_csv(path: Path, n: int, scale: float = 1.0) -> Path:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 2))
    y = x @ [1.0, -2.0] + 0.1 * rng.normal(size=n)
    path.write_text(
        "a,b,y\n"
        + "".join(f"{float(a) * scale!r},{float(b) * scale!r},{float(t)!r}\n" for (a, b), t in zip(x, y))
    )
    return path


GAUSSIAN = [
    "--config",
    str(ROOT / "configs" / "glm_poisson.yaml"),
    "--model.model.init_args.family",
    "gaussian",
    "--model.model.init_args.link",
    "identity",
    "--data.target",
    "y",
    "--data.dataset_options",
    "null",
]


def test_regression_split_with_one_row(tmp_path, capsys):
    data = _regression_csv(tmp_path / "few.csv", 4)
    run = tmp_path / "run"
    code = main(
        [
            *GAUSSIAN,
            "--data.source",
            str(data),
            "--run_dir",
            str(run),
            "--data.val_fraction",
            "0.25",
            "--data.test_fraction",
            "0.25",
        ]
    )
    one_error(capsys, code, "data (val split): expected at least 2 rows for a regression model")
    assert not run.exists()


def test_huge_unstandardized_features(tmp_path, capsys):
    data = _regression_csv(tmp_path / "huge.csv", 60, scale=1e300)
    run = tmp_path / "run"
    code = main(
        [
            *GAUSSIAN,
            "--data.source",
            str(data),
            "--run_dir",
            str(run),
            "--data.standardize",
            "false",
            "--trainer.callbacks",
            "[]",
        ]
    )
    one_error(capsys, code, "standardize the features (data.standardize: true) or rescale them")
    assert not run.exists()


def test_summary_without_residual_degrees_of_freedom(tmp_path, capsys):
    """InferenceSummary on a fit with as many parameters as training rows: a note, not a crash."""
    data = _regression_csv(tmp_path / "df0.csv", 7)
    run = tmp_path / "run"
    code = main(
        [
            *GAUSSIAN,
            "--data.source",
            str(data),
            "--run_dir",
            str(run),
            "--data.val_fraction",
            "0.3",
            "--data.test_fraction",
            "0.3",
        ]
    )
    assert code == 0
    assert "no residual degrees of freedom" in (run / "summary.txt").read_text()


class FailAtEpoch(pl.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        from torchglm import InputError

        if trainer.current_epoch >= 1:
            raise InputError("fitter: expected a finite Hessian, got NaN (raised by the test callback)")


def test_failed_rerun_restores_an_existing_run_dir(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "2"]) == 0
    capsys.readouterr()
    # the backup of an earlier rerun that was killed outright: removed by the next run
    (tmp_path / ".run.backup-999999").mkdir()
    before = snapshot(run)
    code = main(
        [
            "--config",
            TINY,
            "--run_dir",
            str(run),
            "--trainer.max_epochs",
            "3",
            "--trainer.callbacks+=test_runs_failures.FailAtEpoch",
        ]
    )
    one_error(capsys, code, "fitter: expected a finite Hessian")
    # config.yaml, hparams.yaml, events, last.ckpt and metrics.json: all as they were
    assert snapshot(run) == before
    assert not list(tmp_path.glob(".run.backup-*"))


def test_lock_held_by_another_process(tmp_path, capsys):
    run = tmp_path / "run"
    held = RunDir(run)  # this process holds the lock, as a running train.py does
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), "--config", TINY, "--run_dir", str(run)],
            check=False,
            capture_output=True,
            text=True,
            env=ENV,
            cwd=tmp_path,
            timeout=300,
        )
    finally:
        held.rollback()
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"in use by process {os.getpid()}" in lines[0], lines
    assert not run.exists()  # rollback of the run dir the holder created


class Slow(pl.Callback):
    """Holds the run after its first epoch until the file named by $RELEASE exists (at
    most 120 s): the second run's start-up (importing torch and Lightning, 5-10 s on a
    loaded 2-core machine) then cannot outlast the first run, which fixed sleeps raced."""

    def on_train_epoch_end(self, trainer, pl_module):
        release = Path(os.environ["RELEASE"])
        deadline = time.time() + 120
        while trainer.current_epoch >= 1 and not release.exists() and time.time() < deadline:
            time.sleep(0.1)


def test_two_concurrent_runs(tmp_path):
    """Two train.py on one --run_dir: the second fails at once, the first finishes with its own outputs."""
    run = tmp_path / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--config",
            TINY,
            "--run_dir",
            str(run),
            "--trainer.max_epochs",
            "12",
            "--early_stopping.patience",
            "100",
            "--trainer.callbacks+=test_runs_failures.Slow",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "RELEASE": str(tmp_path / "release")},
        cwd=tmp_path,
    )
    deadline = time.time() + 120
    while not (run / "checkpoints" / "last.ckpt").exists() and time.time() < deadline:
        time.sleep(0.2)
    second = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--config",
            TINY,
            "--run_dir",
            str(run),
            "--trainer.max_epochs",
            "1",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    (tmp_path / "release").touch()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 2 and "in use by process" in second.stderr, second.stderr[-2000:]
    assert "max_epochs: 12" in (run / "config.yaml").read_text()
    assert sorted(p.name for p in run.rglob("*.ckpt")) == ["last.ckpt", "model.ckpt"]


# -- predict trusts only a fitted, finite model; no unfitted model.ckpt -----------------------


def _predict_edited(tmp_path, ckpt: dict) -> tuple[int, Path, Path]:
    """Save an edited checkpoint and run ``predict`` with it on one row: ``(exit
    status, the checkpoint, the output path)``."""
    import torch

    edited = tmp_path / "edited.ckpt"
    torch.save(ckpt, edited)
    data = tmp_path / "in.csv"
    data.write_text("x0,x1\n0.5,1.5\n")
    out = tmp_path / "o.csv"
    code = main(["predict", "--ckpt_path", str(edited), "--input", str(data), "--output", str(out)])
    return code, edited, out


@pytest.mark.parametrize(
    "key, value",
    [
        ("model.linear.weight", float("nan")),
        ("model.linear.bias", float("inf")),
        ("feature_scale", float("nan")),
    ],
)
def test_predict_refuses_a_non_finite_model(tmp_path, capsys, finished, key, value):
    import torch

    ckpt = torch.load(finished / "newton" / "model.ckpt", weights_only=True)
    ckpt["state_dict"][key].view(-1)[0] = value
    code, edited, out = _predict_edited(tmp_path, ckpt)
    one_error(
        capsys,
        code,
        f"ckpt_path: expected a model with finite parameters and statistics, got '{edited}' ({key}",
    )
    assert not out.exists()


@pytest.mark.parametrize("value", [0.0, -2.0])
def test_predict_refuses_a_feature_scale_that_was_never_fitted(tmp_path, capsys, finished, value):
    """Standardization divides by the scale: 0 wrote NaN probabilities with exit 0."""
    import torch

    ckpt = torch.load(finished / "newton" / "model.ckpt", weights_only=True)
    ckpt["state_dict"]["feature_scale"][0] = value
    code, _, out = _predict_edited(tmp_path, ckpt)
    one_error(capsys, code, "ckpt_path: expected positive feature scales")
    assert not out.exists()


def test_negative_epoch_count_is_one_error_line(tmp_path, capsys):
    """Lightning's own Trainer checks (max_epochs=-5) were a raw traceback, exit 1."""
    code = main(["--config", TINY, "--run_dir", str(tmp_path / "run"), "--trainer.max_epochs", "-5"])
    one_error(capsys, code, "trainer: expected arguments the Lightning Trainer accepts, got")
    assert not (tmp_path / "run").exists()


def test_a_fit_that_never_trained_saves_an_unfitted_model(tmp_path):
    """A checkpoint saved before any training step holds the initial weights: its
    model is not marked fitted (it was, and predicted 0.5 for every row)."""
    from functools import partial

    import torch

    from torchglm import LogisticRegression
    from torchglm.training import GLMDataModule, GLMTask

    task = GLMTask(partial(LogisticRegression), optimizer=partial(torch.optim.Adam, lr=0.1))
    trainer = pl.Trainer(max_epochs=0, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(task, datamodule=GLMDataModule("gaussians2", dataset_options={"n_samples": 200}))
    path = tmp_path / "never_trained.ckpt"
    trainer.save_checkpoint(path)
    assert not bool(torch.load(path, weights_only=True)["state_dict"]["model._fitted"])
    assert not GLMTask.load_from_checkpoint(path, model=partial(LogisticRegression)).model.is_fitted


def test_predict_refuses_an_unfitted_model(tmp_path, capsys, finished):
    import torch

    ckpt = torch.load(finished / "sgd" / "model.ckpt", weights_only=True)
    ckpt["state_dict"]["model._fitted"] = torch.tensor(False)
    code, _, out = _predict_edited(tmp_path, ckpt)
    one_error(capsys, code, "ckpt_path: expected a fitted model")
    assert not out.exists()


def test_a_run_that_never_trained_leaves_no_model_ckpt(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "0"])
    one_error(capsys, code, "")
    assert not run.exists()


def test_a_run_that_crashes_after_fitting_leaves_no_model_ckpt(tmp_path, monkeypatch):
    """model.ckpt is the model metrics.json describes: a run that crashes after the
    fit (here in trainer.test) keeps last.ckpt for --resume, but no model.ckpt."""

    def crash(*args, **kwargs):
        raise RuntimeError("crash in test (raised by the test)")

    monkeypatch.setattr(pl.Trainer, "test", crash)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="raised by the test"):
        main(["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "2"])
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert not (run / "model.ckpt").exists() and not (run / "metrics.json").exists()
    assert not [p.name for p in run.rglob("*.tmp*")]
