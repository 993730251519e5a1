"""The checkpoints of a ``train.py`` run and how they are read back.

A run directory holds two:

* ``model.ckpt``: **the reported model**, the one ``metrics.json`` describes and
  ``train.py predict --run_dir RUN`` uses: for ``sgd`` the epoch with the lowest
  validation loss, for pass-based solvers (Newton, IRLS, L-BFGS, closed forms) the
  solver's final estimate. It is written once, when the run has succeeded.
* ``checkpoints/last.ckpt``: the state after the last completed epoch (weights,
  optimizer or solver state, loops), written after **every** epoch by
  :class:`LastCheckpoint`, for ``--resume``. It is a training state, not a result.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint

from .._validation import fail

__all__ = ["MODEL_CKPT", "LastCheckpoint", "load_checkpoint", "model_checkpoint_of"]

#: The reported model's file name in the run directory.
MODEL_CKPT = "model.ckpt"


class LastCheckpoint(Checkpoint):
    """Write ``dirpath/last.ckpt`` after every training epoch (atomically: a
    temporary file renamed into place, so a kill leaves the previous one whole).

    Lightning's ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` only in
    some versions and configurations (2.6 only together with a new best), so the
    resume state is written here explicitly. As a :class:`Checkpoint` it runs after
    the task's own ``on_train_epoch_end``, so the epoch's history is included.

    Args:
        dirpath: directory of ``last.ckpt``.
    """

    def __init__(self, dirpath: str | Path):
        self.dirpath = Path(dirpath)

    @property
    def path(self) -> Path:
        return self.dirpath / "last.ckpt"

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Once more after the other callbacks' on_fit_end (Checkpoint callbacks run
        # last): what they add to a checkpoint (e.g. a posterior) is in last.ckpt too.
        if not trainer.interrupted:
            self._save(trainer)

    def _save(self, trainer: pl.Trainer) -> None:
        tmp = self.dirpath / f".last.ckpt.tmp-{os.getpid()}"
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("last_checkpoint")


def model_checkpoint_of(run_dir: str | Path) -> Path:
    """The reported model of a run directory (``RUN/model.ckpt``).

    Raises:
        InputError: ``run_dir`` is not a finished run's directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise fail("run_dir", "the directory of a finished train.py run", f"'{run_dir}' (not a directory)")
    path = run_dir / MODEL_CKPT
    if not path.is_file():
        raise fail(
            "run_dir", f"a finished run's directory (with {MODEL_CKPT})", f"'{run_dir}' without {MODEL_CKPT}"
        )
    return path


def load_checkpoint(path: str | Path, name: str = "ckpt_path") -> dict[str, Any]:
    """Read a checkpoint written by ``train.py`` on the CPU.

    Raises:
        InputError: the file is missing, a directory, truncated, not a checkpoint,
            or a checkpoint not written by ``train.py``.
    """
    path = Path(path)
    if path.is_dir():
        raise fail(name, "a checkpoint file", f"'{path}' (a directory)")
    if not path.is_file():
        raise fail(name, "an existing checkpoint file", f"'{path}' (not found)")
    try:
        # weights_only=False: a train.py checkpoint holds its config (dicts, strings)
        # and the fit record besides tensors, as Lightning's own resume reads it.
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        TypeError,
    ) as err:
        what = "empty" if path.stat().st_size == 0 else f"unreadable: {type(err).__name__}"
        raise fail(name, "a checkpoint written by train.py", f"'{path}' ({what})") from None
    if not isinstance(ckpt, dict) or "torchglm" not in ckpt or "state_dict" not in ckpt:
        raise fail(name, "a checkpoint written by train.py", f"'{path}' (another kind of file)")
    return ckpt
