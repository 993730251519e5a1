"""Test-only Lightning callbacks that kill their own process (SIGKILL, no cleanup): at the
start of a given epoch, after the previous epoch's checkpoint was written, or in the middle
of one (``--trainer.callbacks+=killer.KillMidEpoch``, with ``tests/`` on ``PYTHONPATH``)."""

import os
import signal

import pytorch_lightning as pl


class KillAtEpoch(pl.Callback):
    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


class KillMidEpoch(pl.Callback):
    """SIGKILL (no cleanup) after Lightning batch ``batch`` of epoch ``epoch``: mid-pass
    for pass-based fits; for sgd in step blocks (tiny.yaml: the epoch's four
    mini-batches in one block) after the block's steps, before the epoch's
    validation and checkpoint."""

    def __init__(self, epoch: int, batch: int = 0):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)
