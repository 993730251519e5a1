"""The life of a ``train.py`` run outside the happy path: runs in which no epoch runs
(``max_epochs 0``, ``--resume`` of a run whose fit had ended or that was killed while
its result was validated), SIGTERM and Ctrl-C (an exit status that says so and the
command that resumes), a full disk (one ``error:`` line, the run directory as it
was), and ``--resume`` with another config or other data (refused)."""

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl

from torchglm.training.cli import main
from run_util import one_error, snapshot

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent)]),
}
NEWTON = ["--model.solver", "newton", "--model.model.init_args.l2", "0.01", "--trainer.max_epochs", "50"]

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _train(*args: str, cwd: Path, preexec_fn=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        cwd=cwd,
        timeout=300,
        preexec_fn=preexec_fn,
    )


def _report(run: Path) -> dict:
    """metrics.json without what differs between a run and its resumption."""
    metrics = json.loads((run / "metrics.json").read_text())
    for key in ("resumed_from", "seconds"):
        metrics["fit"].pop(key)
    return metrics


# -- runs in which no epoch runs --------------------------------------------------------
@pytest.mark.parametrize("key", ["max_epochs", "max_steps"])
def test_nothing_to_fit_is_an_error(tmp_path, capsys, key):
    run = tmp_path / "run"
    code = main(["--config", TINY, "--run_dir", str(run), f"--trainer.{key}", "0"])
    one_error(capsys, code, f"trainer.{key}: expected at least 1")
    assert not run.exists()


@pytest.mark.parametrize("solver", ["sgd", "newton"])
def test_resume_of_a_finished_run_reports_it_again(tmp_path, capsys, solver):
    """No epoch is left (sgd: max_epochs reached; Newton: converged): the resumed run
    trains nothing and reports the same model with the same metrics."""
    run = tmp_path / "run"
    args = ["--config", TINY, "--run_dir", str(run), *(NEWTON if solver == "newton" else [])]
    assert main(args) == 0
    before = _report(run)
    weights = (run / "model.ckpt").read_bytes()
    last = run / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    assert main([*args, "--resume", str(last)]) == 0
    assert "run directory" in capsys.readouterr().out
    # sgd: the best epoch had been moved to model.ckpt; Newton: no extra pass (n_iter, epochs)
    assert _report(run) == before
    if solver == "sgd":
        assert (run / "model.ckpt").read_bytes() == weights
    assert json.loads((run / "metrics.json").read_text())["fit"]["resumed_from"] == str(last)


class KillInReport(pl.Callback):
    """SIGKILL while the finished fit's reported model is validated (``validate``) or
    tested (``test``), once: the file $KILLED marks that it happened."""

    def __init__(self, stage: str):
        self.stage = stage

    def _maybe_kill(self, trainer, stage):
        if stage == self.stage and not trainer.training and not Path(os.environ["KILLED"]).exists():
            Path(os.environ["KILLED"]).touch()
            os.kill(os.getpid(), signal.SIGKILL)

    def on_validation_start(self, trainer, pl_module):
        self._maybe_kill(trainer, "validate" if trainer.state.fn == "validate" else "")

    def on_test_start(self, trainer, pl_module):
        self._maybe_kill(trainer, "test")


@pytest.mark.parametrize(("solver", "stage"), [("sgd", "validate"), ("newton", "test")])
def test_killed_while_reporting_resumes_to_the_report(tmp_path, solver, stage):
    extra = NEWTON if solver == "newton" else []
    full = tmp_path / "full"  # uninterrupted, in a process like the killed one's
    proc = _train("--config", TINY, "--run_dir", "full", *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    args = [
        "--config",
        TINY,
        "--run_dir",
        "run",
        *extra,
        "--trainer.callbacks+=test_run_lifecycle.KillInReport",
    ]
    args += ["--trainer.callbacks.stage", stage]
    env = {"KILLED": str(tmp_path / "killed")}
    killed = _train(*args, cwd=tmp_path, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (tmp_path / "run" / "metrics.json").exists()
    resumed = _train(*args, "--resume", "run/checkpoints/last.ckpt", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    got, want = _report(tmp_path / "run"), _report(full)
    for d in (got, want):
        d.pop("run_dir"), d.pop("checkpoint")
    assert got == want
    assert sorted(p.name for p in (tmp_path / "run").rglob("*.ckpt")) == ["last.ckpt", "model.ckpt"]


# -- SIGTERM and Ctrl-C -------------------------------------------------------------------
class SignalAt(pl.Callback):
    """Send this process ``signum`` at the start of training epoch ``epoch`` (or, with
    ``epoch=-1``, when the reported model is tested), once: $SIGNALLED marks it."""

    def __init__(self, epoch: int, signum: int = signal.SIGTERM):
        self.epoch, self.signum = epoch, signum

    def _send(self):
        mark = Path(os.environ["SIGNALLED"])
        if not mark.exists():
            mark.touch()
            os.kill(os.getpid(), self.signum)

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            self._send()

    def on_test_start(self, trainer, pl_module):
        if self.epoch == -1:
            self._send()


def _signalled(tmp_path: Path, epoch: int, signum: int, *extra: str):
    args = [
        "--config",
        TINY,
        "--run_dir",
        "run",
        "--trainer.max_epochs",
        "4",
        *extra,
        "--trainer.callbacks+=test_run_lifecycle.SignalAt",
        "--trainer.callbacks.epoch",
        str(epoch),
        "--trainer.callbacks.signum",
        str(int(signum)),
    ]
    env = {"SIGNALLED": str(tmp_path / "signalled")}
    return _train(*args, cwd=tmp_path, env=env), env


def _no_temporaries(run: Path) -> None:
    assert not [p.name for p in run.rglob("*") if ".tmp" in p.name or ".backup" in p.name]
    assert not [p.name for p in run.parent.iterdir() if p.name.startswith(".run.backup")]


@pytest.mark.parametrize(
    ("signum", "status", "epoch", "extra"),
    [
        (signal.SIGTERM, 143, 2, []),
        (signal.SIGINT, 130, 1, []),
        (signal.SIGTERM, 143, -1, NEWTON),  # while the finished fit's model is tested
    ],
    ids=["sigterm", "ctrl-c", "sigterm-in-report"],
)
def test_interrupted_run_says_how_to_resume_and_resumes(tmp_path, signum, status, epoch, extra):
    proc, env = _signalled(tmp_path, epoch, signum, *extra)
    name = signal.Signals(signum).name
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == status, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {name}: "), lines
    assert "--resume run/checkpoints/last.ckpt" in lines[0]
    run = tmp_path / "run"
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "metrics.json").exists()
    _no_temporaries(run)
    # the printed command, as printed, goes on to the finished run
    command = shlex.split(lines[0].split("resume it with: ", 1)[1])
    assert command[:2] == ["python3", str(ROOT / "train.py")]
    resumed = subprocess.run(
        [sys.executable, *command[1:]],
        capture_output=True,
        text=True,
        env={**ENV, **env},
        cwd=tmp_path,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (
        json.loads((run / "metrics.json").read_text())["fit"]["resumed_from"] == "run/checkpoints/last.ckpt"
    )


def test_interrupted_in_the_first_epoch_leaves_nothing(tmp_path):
    proc, _ = _signalled(tmp_path, 0, signal.SIGTERM)
    assert proc.returncode == 143, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "before its first epoch ended: nothing to resume" in lines[0], lines
    assert "--resume" not in lines[0] and "--run_dir run" in lines[0]
    assert not (tmp_path / "run").exists()


class Hold(pl.Callback):
    """After the first epoch, wait (at most 120 s) to be terminated from outside."""

    def on_train_epoch_end(self, trainer, pl_module):
        import time

        deadline = time.time() + 120
        while trainer.current_epoch >= 1 and time.time() < deadline:
            time.sleep(0.05)


def test_sigterm_from_outside(tmp_path):
    """``kill PID`` (SIGTERM from another process) mid-run: status 143, never 0."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--config",
            TINY,
            "--run_dir",
            "run",
            "--trainer.callbacks+=test_run_lifecycle.Hold",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=tmp_path,
    )
    import time

    deadline = time.time() + 120
    while not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "resume it with: " in err and "--resume run/checkpoints/last.ckpt" in err
    _no_temporaries(tmp_path / "run")


# -- a full disk ------------------------------------------------------------------------
def _file_size_limit(limit: int):
    """A child whose writes past ``limit`` bytes fail with EFBIG (``ulimit -f``)."""

    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an OSError, not death by signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return set_limit


# The tiny run's files: hparams.yaml 0.6 kB, config.yaml 2.6 kB, events up to 4 kB,
# checkpoints 13-15 kB: each limit stops the run at another write.
LIMITS = [300, 3000, 12000]


@pytest.mark.parametrize("limit", LIMITS)
def test_full_disk_new_run_dir(tmp_path, limit):
    proc = _train("--config", TINY, "--run_dir", "run", cwd=tmp_path, preexec_fn=_file_size_limit(limit))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert lines == [
        "error: run_dir: expected a writable directory with free space, got 'run' (File too large)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_full_disk_predict_leaves_no_partial_output(tmp_path, suffix):
    """The output's temporary file went on a full disk, but closing it flushed (and
    failed) again before its removal: a partial hidden file stayed beside the output
    (``ulimit -f 20``: where the limit falls inside the buffer's last write)."""
    run = tmp_path / "run"
    assert main(["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "1"]) == 0
    rows = np.random.default_rng(0).normal(size=(20_000, 2))
    np.savetxt(tmp_path / "in.csv", rows, delimiter=",", header="x0,x1", comments="")
    proc = _train(
        "predict", "--run_dir", "run", "--input", "in.csv", "--output", f"out{suffix}",
        cwd=tmp_path, preexec_fn=_file_size_limit(20 * 1024),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: output: expected a writable file path, got 'out{suffix}' (File too large)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "run"]


@pytest.mark.parametrize("how", ["resume", "rerun"])
def test_full_disk_existing_run_dir(tmp_path, how):
    run = tmp_path / "run"
    assert main(["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "2"]) == 0
    before = snapshot(run)
    args = ["--config", TINY, "--run_dir", "run", "--trainer.max_epochs", "4"]
    if how == "resume":
        # no room for the backup copy taken before the run writes anything
        args += ["--resume", "run/checkpoints/last.ckpt"]
        limit = 300
    else:
        # room for the backup copy, not for the checkpoints of a 40-feature model
        args += ["--data.dataset_options", "{n_samples: 200, n_features: 40}"]
        limit = max(p.stat().st_size for p in run.rglob("*") if p.is_file()) + 64
    proc = _train(*args, cwd=tmp_path, preexec_fn=_file_size_limit(limit))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "error: run_dir: expected a writable directory with free space, got 'run' (File too large)"
    ]
    assert snapshot(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# -- --resume with another config or other data -------------------------------------------
def _csv(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(80, 2))
    y = (x[:, 0] - x[:, 1] + 0.5 * rng.normal(size=80) > 0).astype(int)
    path.write_text("a,b,y\n" + "".join(f"{a!r},{b!r},{t}\n" for (a, b), t in zip(x.tolist(), y)))
    return path


def test_resume_refuses_another_config_or_other_data(tmp_path, capsys):
    data = _csv(tmp_path / "data.csv", 0)
    run = tmp_path / "run"
    args = ["--config", TINY, "--run_dir", str(run), "--data.target", "y", "--data.dataset_options", "null"]
    assert main([*args, "--data.source", str(data), "--trainer.max_epochs", "2"]) == 0
    capsys.readouterr()
    before = snapshot(run)
    resume = ["--resume", str(run / "checkpoints" / "last.ckpt")]

    other = _csv(tmp_path / "other.csv", 1)  # same columns and rows, other values
    code = main([*args, "--data.source", str(other), *resume])
    message = one_error(
        capsys, code, "resume: expected a checkpoint of a fit on this config's data (48/16/16"
    )
    assert "(a fit on other data: 48/16/16 train/val/test rows, 2 features, digest" in message
    code = main([*args, "--data.source", str(data), "--model.model.init_args.l2", "0.5", *resume])
    one_error(capsys, code, "(model.model.init_args.l2: 0.0 in the checkpoint, 0.5 here)")
    code = main([*args, "--data.source", str(data), "--data.split_seed", "1", *resume])
    one_error(capsys, code, "(data.split_seed: 0 in the checkpoint, 1 here)")
    assert snapshot(run) == before

    # the same rows from a copy of the file, with more epochs: the same fit, resumed
    copy = tmp_path / "copy.csv"
    copy.write_bytes(data.read_bytes())
    assert main([*args, "--data.source", str(copy), "--trainer.max_epochs", "3", *resume]) == 0
    assert json.loads((run / "metrics.json").read_text())["fit"]["epochs"] == 3


# -- signals outside the run: while importing, after the report ------------------------
_SLOW_TORCH_IMPORT = """
import importlib.abc, runpy, sys, time
from pathlib import Path

class SlowTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            Path("importing").write_text("")
            time.sleep(60)
        return None

sys.meta_path.insert(0, SlowTorch())
sys.argv = [sys.argv[1], "--config", sys.argv[2], "--run_dir", "run"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_importing_torch_is_one_line(tmp_path, signum):
    """Ctrl-C in the seconds ``train.py`` spends importing torch (before torchglm can
    install its handler): one line and 128 + the signal's number, not a traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_TORCH_IMPORT, str(ROOT / "train.py"), TINY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=tmp_path,
    )
    import time

    deadline = time.time() + 60
    while not (tmp_path / "importing").exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert err.strip().splitlines() == [
        f"interrupted by {signal.Signals(signum).name} before the run started: nothing was written"
    ]
    assert not (tmp_path / "run").exists()


def test_signal_after_the_report_keeps_status_zero(tmp_path):
    """A Ctrl-C that arrives once the run is reported (while the interpreter exits)
    leaves a finished run's status 0: its results are complete."""
    code = (
        "import os, signal, sys\n"
        "from torchglm.training.entry import main\n"
        f"sys.argv = ['train.py', '--config', {TINY!r}, '--run_dir', 'run']\n"
        "status = main()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "print('exiting with', status)\n"
        "sys.exit(status)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "exiting with 0" in res.stdout
    assert (tmp_path / "run" / "model.ckpt").is_file()
