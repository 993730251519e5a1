"""A heartbeat for long fits without a progress bar (no terminal, or a config
that turns it off): one line on stderr at most every ``every`` seconds."""

from __future__ import annotations

import sys
import time

import pytorch_lightning as pl

__all__ = ["Heartbeat"]


class Heartbeat(pl.Callback):
    """After an epoch, print ``epoch N: <the solver's last history entry>`` if
    ``every`` seconds passed since the fit started or the last line; a fit
    shorter than that prints nothing.

    Args:
        every: seconds between lines.
    """

    def __init__(self, every: float = 10.0):
        self.every = every
        self._last = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter()
        if now - self._last < self.every or not trainer.is_global_zero:
            return
        self._last = now
        history = getattr(getattr(pl_module, "driver", None), "history", None)
        last = history[-1] if history else {}
        shown = ", ".join(f"{k} {v:.6g}" for k, v in last.items() if isinstance(v, float))
        print(
            f"epoch {trainer.current_epoch}: {shown or 'no accepted step yet'}", file=sys.stderr, flush=True
        )
