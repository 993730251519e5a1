"""What a fit's driver does for :class:`~torchglm.training.task.GLMTask`.

The task is a thin ``LightningModule``: hyper-parameters, the model and its
preprocessing, metrics and checkpoint metadata. How its training steps fit the
model is the driver's, chosen once from the solver name
(:func:`~torchglm.training.task.driver_for`): :class:`~.pass_driver.PassDriver`
(one epoch is one pass of a pass-based fitter) or :class:`~.sgd_driver.SGDDriver`
(mini-batch optimization with a torch optimizer).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Driver"]


class Driver:
    """The hooks a task delegates to (defaults: nothing to do).

    Attributes:
        task: the :class:`~torchglm.training.task.GLMTask` driven.
        fitter: the pass-based fitter (``None`` for mini-batch optimization).
        reports_best_epoch: whether the run reports the epoch with the lowest
            validation loss (mini-batch optimization) rather than the last iterate
            (a pass-based solver's estimate is its final iterate).
        reads_streamed_files: whether the fit can read a file streamed from disk in
            order, a batch at a time (a pass is a sum over batches in any order;
            mini-batch optimization draws shuffled batches every epoch).
    """

    fitter = None
    reports_best_epoch = False
    reads_streamed_files = True
    #: whether a resumed fit's solver had met its own stopping rule (its checkpoint says).
    resumed_done = False

    def __init__(self, task) -> None:
        self.task = task

    @property
    def automatic_optimization(self) -> bool:
        """Lightning's automatic optimization (see ``GLMTask.automatic_optimization``)."""
        return False

    @property
    def history(self) -> list[dict[str, Any]]:
        """The per-epoch record of the fit so far."""
        return []

    def block_size(self) -> int:
        """Optimizer steps per Lightning training step."""
        return 1

    def prepare(self, datamodule, model) -> None:
        """Check the fit's settings against the built model (``GLMTask.build``)."""

    def configure_optimizers(self):
        raise NotImplementedError

    def on_train_start(self) -> None:
        """The fit's start, after Lightning has set up the optimizers."""

    def on_train_epoch_start(self) -> None:
        """An epoch's start."""

    def training_step(self, batch, batch_idx: int):
        raise NotImplementedError

    def on_train_epoch_end(self) -> None:
        """An epoch's end, before the task logs its training metrics."""

    def after_train_metrics(self) -> None:
        """An epoch's end, after the task has logged its training metrics."""

    def on_train_end(self) -> bool:
        """The fit's end; returns whether the solver met its own stopping rule."""
        return True

    def conclude(self, done: bool):
        """The :class:`~torchglm.passes.FitResult` of the fit (``done``: the
        solver met its own stopping rule)."""
        raise NotImplementedError

    def save(self, record: dict[str, Any]) -> None:
        """Add the driver's state to a checkpoint's ``torchglm`` record."""

    def load(self, checkpoint: dict[str, Any]) -> None:
        """Read the driver's state back from a checkpoint (``on_load_checkpoint``)."""
