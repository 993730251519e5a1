"""train.py end to end: outputs, predict mode, config handling and every bad input
(one error line, exit status 2, and no run directory left behind)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from torchglm.training.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


pytestmark = pytest.mark.usefixtures("quiet_one_thread")


class FailAtEpoch(pl.Callback):
    """Raises the library's InputError after ``epoch`` epochs (a checkpoint exists by then)."""

    def __init__(self, epoch: int = 1):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        from torchglm import InputError

        if trainer.current_epoch >= self.epoch:
            raise InputError("fitter: expected a finite Hessian, got NaN (raised by the test callback)")


class Recorder(pl.Callback):
    """Records what a config-declared callback can reach."""

    seen: dict = {}

    def __init__(self, tag: str = "x"):
        self.tag = tag

    def on_fit_end(self, trainer, pl_module):
        Recorder.seen = {
            "tag": self.tag,
            "n_train": sum(b.x.shape[0] for b in trainer.datamodule.train_batches()),
            "fit_result": pl_module.fit_result,
            "threads": torch.get_num_threads(),
        }


def _outputs(run_dir: Path) -> list[str]:
    if not run_dir.exists():
        return []
    return sorted(p.name for p in run_dir.rglob("*") if p.suffix in (".ckpt", ".json", ".tmp"))


def test_end_to_end_subprocess_and_predict(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--config", TINY, "--run_dir", str(run_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "accuracy" in proc.stdout and "run directory" in proc.stdout
    assert list(run_dir.glob("events.out.tfevents.*"))
    # one reported model, the resume state, and no other checkpoint name
    ckpt = run_dir / "model.ckpt"
    assert ckpt.is_file() and (run_dir / "config.yaml").is_file()
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*.ckpt")) == [
        "checkpoints/last.ckpt",
        "model.ckpt",
    ]
    assert not (run_dir / ".lock").exists()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["checkpoint"] == str(ckpt) and metrics["fit"]["epochs"] == 3
    for split in ("train", "val", "test"):
        assert {"loss", "nll", "accuracy", "auroc", "ece"} <= set(metrics[split])
    assert metrics["data"]["n_train"] == 120

    # predict: raw rows of the tiny dataset -> probabilities of the saved weights,
    # recomputed here from the checkpoint's state_dict and the training split's moments
    from torchglm.data import load_dataset
    from torchglm.training import GLMDataModule

    ds = load_dataset("gaussians2", n_samples=200)
    data = tmp_path / "in.csv"
    data.write_text("x0,x1\n" + "\n".join(f"{float(a)!r},{float(b)!r}" for a, b in ds.x))
    out = tmp_path / "pred.csv"
    assert main(["predict", "--run_dir", str(run_dir), "--input", str(data), "--output", str(out)]) == 0
    pred = np.genfromtxt(out, delimiter=",", names=True)
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    dm = GLMDataModule("gaussians2", dataset_options={"n_samples": 200})
    dm.setup()
    z = dm.transform(torch.as_tensor(ds.x))
    p1 = torch.sigmoid(z @ state["model.linear.weight"][0] + state["model.linear.bias"][0]).numpy()
    np.testing.assert_allclose(pred["p_1"], p1, rtol=1e-12)
    np.testing.assert_allclose(pred["p_0"], 1 - p1, rtol=1e-12)
    np.testing.assert_array_equal(pred["label"], (p1 > 0.5).astype(float))
    out_npz = tmp_path / "pred.npz"
    assert main(["predict", "--ckpt_path", str(ckpt), "--input", str(data), "--output", str(out_npz)]) == 0
    np.testing.assert_allclose(np.load(out_npz)["proba"][:, 1], p1, rtol=1e-12)


def test_overrides_config_callbacks_and_fit_result(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(
        [
            "--config",
            TINY,
            "--run_dir",
            str(run_dir),
            "--trainer.max_epochs",
            "2",
            "--trainer.callbacks+=test_train_cli.Recorder",
            "--trainer.callbacks.tag",
            "seen",
            "--data.batch_size",
            "50",
        ]
    )
    assert code == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["fit"]["epochs"] == 2
    assert Recorder.seen["tag"] == "seen" and Recorder.seen["n_train"] == 120
    assert Recorder.seen["fit_result"].n_iter == 2
    assert "metric" in capsys.readouterr().out


def test_threads_set_by_the_option_or_capped_by_the_idle_cpus(tmp_path, monkeypatch):
    import torchglm.threads

    monkeypatch.setattr(torchglm.threads, "idle_cpus", lambda: 1)  # a busy machine
    before = torch.get_num_threads()
    try:
        for extra, expected in (([], 1), (["--threads", "2"], 2)):
            torch.set_num_threads(2)
            run = tmp_path / f"run{len(extra)}"
            args = ["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "1"]
            assert main([*args, "--trainer.callbacks+=test_train_cli.Recorder", *extra]) == 0
            assert Recorder.seen["threads"] == expected
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("solver", ["newton", "irls"])
def test_pass_based_solver_writes_checkpoint_and_predicts(tmp_path, solver):
    run_dir = tmp_path / "run"
    # the tiny training split is separable: a small L2 penalty makes the optimum finite
    assert (
        main(
            [
                "--config",
                TINY,
                "--run_dir",
                str(run_dir),
                "--model.solver",
                solver,
                "--model.model.init_args.l2",
                "0.01",
                "--trainer.max_epochs",
                "50",
            ]
        )
        == 0
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["fit"]["converged"] and metrics["fit"]["solver"] == solver
    ckpt = run_dir / "model.ckpt"
    assert metrics["checkpoint"] == str(ckpt)
    # no "best epoch" checkpoint of an intermediate iterate exists
    assert sorted(p.name for p in run_dir.rglob("*.ckpt")) == ["last.ckpt", "model.ckpt"]
    # the checkpoint holds the solver's optimum: same weights as solvers.fit on the training split
    from torchglm import LogisticRegression
    from torchglm.training import GLMDataModule
    from torchglm.solvers import fit

    dm = GLMDataModule("gaussians2", batch_size=32, dataset_options={"n_samples": 200})
    dm.setup()
    ref = LogisticRegression(2, l2=0.01)
    fit(ref, *dm.split("train"), solver=solver)
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    torch.testing.assert_close(state["model.linear.weight"], ref.linear.weight.detach(), rtol=1e-6, atol=1e-8)
    assert bool(state["model._fitted"])
    # metrics.json reports that model: its validation NLL recomputed from the checkpoint's weights
    xv, yv = dm.split("val")
    eta = xv @ state["model.linear.weight"][0] + state["model.linear.bias"][0]
    nll = torch.nn.functional.binary_cross_entropy_with_logits(eta, yv.double()).item()
    assert metrics["val"]["nll"] == pytest.approx(nll, rel=1e-6)


def test_help_all_and_print_config(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])  # the full LightningCLI help (torchglm --help-all)
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--model.solver",
        "--model.optimizer",
        "--data.batch_size",
        "--data.source",
        "--run_dir",
        "--trainer.max_epochs",
        "--early_stopping.patience",
        "--checkpoint.monitor",
        "--print_config",
    ):
        assert option in text
    with pytest.raises(SystemExit):
        main(["--config", TINY, "--print_config"])
    printed = capsys.readouterr().out
    assert "class_path: torchglm.LogisticRegression" in printed and "batch_size: 32" in printed


def _csv(path, x, y):
    path.write_text(
        "a,b,y\n" + "\n".join(f"{float(r[0])!r},{float(r[1])!r},{float(t)!r}" for r, t in zip(x, y)) + "\n"
    )
    return path


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 2))
    y = (x[:, 0] > 0).astype(float)
    made = {}
    xn = x.copy()
    xn[5, 1] = np.nan
    made["nan"] = _csv(tmp_path / "nan.csv", xn, y)
    xi = x.copy()
    xi[7, 0] = np.inf
    made["inf"] = _csv(tmp_path / "inf.csv", xi, y)
    y3 = y.copy()
    y3[::10] = 2
    made["outside"] = _csv(tmp_path / "outside.csv", x, y3)
    made["single"] = _csv(tmp_path / "single.csv", x, np.ones_like(y))
    np.savez(tmp_path / "lengths.npz", X=x, y=y[:-3])
    made["lengths"] = tmp_path / "lengths.npz"
    made["missing"] = tmp_path / "absent.csv"
    bad = tmp_path / "malformed.csv"
    bad.write_text("a,b,y\n1.0,2.0,1\n3.0,oops,0\n")
    made["malformed"] = bad
    return made


@pytest.mark.parametrize(
    "case, extra, message",
    [
        ("nan", [], "X: expected finite values (no NaN or inf), got 1 non-finite entries (1 NaN, 0 inf)"),
        ("inf", [], "X: expected finite values (no NaN or inf), got 1 non-finite entries (0 NaN, 1 inf)"),
        ("outside", [], "y: expected labels in {0, ..., 1}, got label 2"),
        ("single", [], "y: expected at least two classes, got a single class 1"),
        ("lengths", [], "X and the target with the same number of rows, got X=60, y=57"),
        ("missing", [], "data file: expected an existing file"),
        ("malformed", [], "column 'b': expected numeric values, got 'oops'"),
        (None, ["--model.optimizer.init_args.lr", "-0.1"], "Invalid learning rate: -0.1"),
        (None, ["--model.optimizer.init_args.lr", "0"], "optimizer lr: expected a positive number, got 0.0"),
        (None, ["--data.batch_size", "0"], "batch_size: expected a positive number, got 0"),
        (None, ["--data.batch_size", "-4"], "batch_size: expected a positive number, got -4"),
        (None, ["--model.learning_rate", "0.1"], "learning_rate"),
        ("config_key", [], "bogus_key"),
        ("fit_error", [], "fitter: expected a finite Hessian, got NaN"),
    ],
)
def test_bad_input(tmp_path, files, capsys, case, extra, message):
    run_dir = tmp_path / "run"
    args = ["--config", TINY, "--run_dir", str(run_dir), *extra]
    if case in files:
        args += ["--data.source", str(files[case]), "--data.target", "y", "--data.dataset_options", "null"]
    elif case == "config_key":
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(Path(TINY).read_text().replace("  batch_size: 32", "  batch_size: 32\n  bogus_key: 1"))
        args[1] = str(cfg)
    elif case == "fit_error":
        args += ["--trainer.callbacks+=test_train_cli.FailAtEpoch", "--trainer.max_epochs", "3"]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    # nothing was left behind: the run directory did not exist before
    assert _outputs(run_dir) == [] and not run_dir.exists()


@pytest.mark.slow
def test_readme_multi_process_command_without_run_dir(tmp_path):
    """The README's multi-process command as written (three epochs, for time): rank 1
    took the next free version_N beside rank 0's, waited there for a checkpoint that
    never came (FileNotFoundError, then a hang or a crash), and each rank printed
    Lightning's sync_dist advice for every metric."""
    readme = (ROOT / "README.md").read_text()
    command = "python train.py --config configs/logistic.yaml --trainer.strategy ddp --trainer.devices 2 --trainer.accelerator cpu"
    assert command in readme
    argv = command.split()[2:]
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # run from a checkout's root, as written
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *argv, "--trainer.max_epochs", "3"],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PossibleUserWarning" not in proc.stderr, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "runs" / "logistic").iterdir()) == ["version_0"]
    run = tmp_path / "runs" / "logistic" / "version_0"
    assert (run / "metrics.json").is_file() and (run / "model.ckpt").is_file()
    assert proc.stdout.count("run directory: runs/logistic/version_0") == 1


@pytest.mark.slow
def test_two_process_ddp_equals_one_process(tmp_path):
    """Each rank holds half of the rows; Newton's all-reduced sums give the
    single-process iterates."""
    args = [
        "--config",
        str(ROOT / "configs" / "quickstart.yaml"),
        "--model.solver",
        "newton",
        "--trainer.enable_progress_bar",
        "false",
    ]
    assert main([*args, "--run_dir", str(tmp_path / "one")]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            *args,
            "--run_dir",
            str(tmp_path / "two"),
            "--trainer.strategy",
            "ddp",
            "--trainer.devices",
            "2",
            "--trainer.accelerator",
            "cpu",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("run directory") == 1  # only rank 0 reports
    one, two = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert one["fit"]["n_iter"] == two["fit"]["n_iter"] and two["fit"]["converged"]
    for split in ("train", "val", "test"):
        for k, v in one[split].items():
            assert two[split][k] == pytest.approx(v, rel=1e-6, abs=1e-7), (split, k)
    w1, w2 = (
        torch.load(tmp_path / d / "model.ckpt", weights_only=True)["state_dict"] for d in ("one", "two")
    )
    torch.testing.assert_close(w1["model.linear.weight"], w2["model.linear.weight"], rtol=1e-9, atol=1e-10)


class LastSeen(pl.Callback):
    """At each epoch's start, the epoch stored in checkpoints/last.ckpt (None if absent)."""

    seen: ClassVar[list] = []

    def on_train_epoch_start(self, trainer, pl_module):
        path = Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt"
        LastSeen.seen.append(torch.load(path, weights_only=False)["epoch"] if path.is_file() else None)


@pytest.mark.parametrize("solver", ["sgd", "newton"])
def test_last_ckpt_after_every_epoch(tmp_path, solver):
    # Adam with lr=2 makes the validation loss go up and down, so "only with a new best"
    # (Lightning 2.6's ModelCheckpoint save_last) would skip epochs.
    LastSeen.seen = []
    extra = (
        ["--model.optimizer.init_args.lr", "2.0"]
        if solver == "sgd"
        else ["--model.solver", "newton", "--model.model.init_args.l2", "0.01"]
    )
    assert (
        main(
            [
                "--config",
                TINY,
                "--run_dir",
                str(tmp_path / "run"),
                "--trainer.max_epochs",
                "8",
                "--early_stopping.patience",
                "100",
                "--trainer.callbacks+=test_train_cli.LastSeen",
                *extra,
            ]
        )
        == 0
    )
    n = len(LastSeen.seen)
    assert n >= 3 and LastSeen.seen == [None, *range(n - 1)]
    # and once more at the end of the fit (then holding what other callbacks added)
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["epoch"] == n
