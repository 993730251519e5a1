"""Every ``torchglm`` / ``train.py`` command in a bash block of README.md and docs/*.md
runs as written, from a checkout's root, and exits 0.

The commands run in a scratch directory laid out like a checkout (``configs/`` and
``train.py``), one file's blocks in document order, through the installed ``torchglm``
script and this interpreter for ``python``/``python3``. What a command needs that the
documentation leaves to the reader is made here: the main job's run
(``runs/quickstart/version_0``, what ``bash scripts/quickstart.sh`` leaves), the rows to
predict (the first rows of breast_cancer, the quickstart's data, without a header) and
the user's callback package of docs/training.md. The commands that are not run are listed in NOT_RUN with
the reason and the test that covers them instead.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: command prefix -> why it is not run here (and what covers it)
NOT_RUN = {
    "python3 -m venv": "set-up (the environment this suite runs in)",
    "bash scripts/": "set-up and the suite itself (tests/docs/test_install_commands.py pins them to .ci/run)",
    "torchglm train --config configs/NAME.yaml": "a template (every shipped config runs: tests/training/test_*_configs.py)",
    "tensorboard --logdir": "a server (its event files: tests/training/test_tensorboard_events.py)",
    "python bench/": "a benchmark (minutes; its numbers are committed under bench/results/)",
}

CALLBACK = '''
import pytorch_lightning as pl


class MyCallback(pl.Callback):
    """The docs' example callback: counts the epochs it saw every ``every_n_epochs``."""

    def __init__(self, every_n_epochs: int = 1):
        self.every_n_epochs = every_n_epochs
        self.seen = 0

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch % self.every_n_epochs == 0:
            self.seen += 1
'''


def documented_commands(path: Path) -> list[str]:
    """The command lines of ``path``'s bash blocks, continuation lines joined, comments cut."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", path.read_text(), re.DOTALL | re.MULTILINE):
        for line in block.replace("\\\n", " ").splitlines():
            command = " ".join(line.split("#")[0].split())
            if command:
                commands.append(command)
    return commands


def _skipped(command: str) -> bool:
    return command.startswith(tuple(NOT_RUN))


def _argv(command: str) -> list[str]:
    argv = shlex.split(command)
    if argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    if argv[0] == "torchglm":
        script = Path(sys.executable).parent / "torchglm"
        assert script.is_file(), "the torchglm command is not installed beside this interpreter"
        return [str(script), *argv[1:]]
    raise AssertionError(f"a documented command this test does not know how to run: {command}")


def _checkout(tmp_path: Path) -> Path:
    from sklearn.datasets import load_breast_cancer

    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "train.py").symlink_to(ROOT / "train.py")
    rows = load_breast_cancer().data[:5]
    for name in ("rows.csv", "new_rows.csv"):
        np.savetxt(tmp_path / name, rows, delimiter=",")
    (tmp_path / "my_package").mkdir()
    (tmp_path / "my_package" / "__init__.py").write_text(CALLBACK)
    return tmp_path


def test_every_documented_command_is_run_or_listed():
    commands = [c for path in FILES for c in documented_commands(path)]
    assert any(c.startswith("torchglm predict") for c in commands)
    for command in commands:
        assert _skipped(command) or command.split()[0] in ("torchglm", "python", "python3"), command
    # every NOT_RUN entry still names a documented command
    for prefix in NOT_RUN:
        assert any(c.startswith(prefix) for c in commands), f"NOT_RUN entry {prefix!r} matches no command"


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", [p for p in FILES if any(not _skipped(c) for c in documented_commands(p))], ids=lambda p: p.name
)
def test_documented_commands_run_as_written(path, tmp_path):
    cwd = _checkout(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(cwd)}
    # the main job first (scripts/quickstart.sh's last line): predict reads its run
    commands = ["python train.py --config configs/quickstart.yaml"]
    commands += [c for c in documented_commands(path) if not _skipped(c)]
    for command in commands:
        proc = subprocess.run(_argv(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}"
        if "--output" in command:
            assert (cwd / shlex.split(command)[-1]).stat().st_size > 0, command
