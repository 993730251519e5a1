"""A test-only Lightning callback that kills its own process (SIGKILL, no cleanup)
at the start of a given epoch, after the previous epoch's checkpoint was written."""

import os
import signal

import pytorch_lightning as pl


class KillAtEpoch(pl.Callback):
    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)
