"""Mini-batch optimization under Lightning (``solver="sgd"``).

``model.objective(x, y)`` is minimized with any torch optimizer (closure-based
ones such as LBFGS included) and an optional LR scheduler, ``steps_per_block``
optimizer steps per Lightning step: one step per batch under Lightning's automatic
optimization (``steps_per_block=1``, or a trainer setting counted in mini-batches),
or blocks of batches stepped inside ``training_step`` (manual optimization,
:mod:`.sgd_blocks`) with the same weights, bit for bit. A GLM's steps take its
closed-form gradient instead of autograd's (:mod:`.step_gradient`).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.strategies import SingleDeviceStrategy
from pytorch_lightning.utilities.exceptions import MisconfigurationException
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch.optim.lr_scheduler import ReduceLROnPlateau

from .._validation import PerformanceWarning, check_positive, fail, warn
from ..data.batches import Batch, BatchBlock
from ..passes import FitResult
from ._lightning_private import attached_trainer, carry_global_step
from .data_module import GLMDataModule
from .driver import Driver
from .graphs import BlockGraph, capturable_optimizer
from .sgd_blocks import StepBlocks
from .step_gradient import StepGradient

__all__ = ["SGDDriver"]

# The hooks Lightning's automatic optimization calls around one optimizer step. A
# block of steps calls them in the same order, or, where nothing overrides them
# (and precision and strategy add nothing), skips the dispatch.
_CALLBACK_STEP_HOOKS = (
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
)
_MODULE_STEP_HOOKS = (*_CALLBACK_STEP_HOOKS, "optimizer_zero_grad", "optimizer_step", "backward")


class SGDDriver(Driver):
    """``task.optimizer_factory(params)`` steps on mini-batches (see ``GLMTask``'s
    ``steps_per_block``, ``lr_scheduler_interval`` and ``cuda_graphs``).

    Attributes:
        history: ``[{"loss": mean mini-batch loss}]`` per epoch, over resumed runs.
        gradient: how the steps differentiate the objective
            (:class:`~.step_gradient.StepGradient`: the model's closed form where it applies).
        blocks: the step blocks (:class:`~.sgd_blocks.StepBlocks`).
    """

    reports_best_epoch = True
    reads_streamed_files = False

    def __init__(self, task) -> None:
        super().__init__(task)
        # Running sums of the epoch's mini-batch losses and the epoch's optimizer
        # steps, mutated in place (no attribute assignment per step).
        self.epoch_loss: dict[str, Any] = {}
        self._history: list[dict[str, float]] = []
        self.gradient = StepGradient(task)
        self.blocks = StepBlocks(task, self.epoch_loss, self.gradient)

    @property
    def history(self) -> list[dict[str, float]]:
        return self._history

    @property
    def automatic_optimization(self) -> bool:
        return self.block_size() == 1

    def block_size(self) -> int:
        """``steps_per_block`` under a trainer whose settings count no mini-batches,
        otherwise 1."""
        task = self.task
        trainer = attached_trainer(task)
        if task.steps_per_block == 1 or trainer is None:
            return 1
        counts_batches = (
            bool(trainer.gradient_clip_val)
            or trainer.accumulate_grad_batches != 1
            # limit_train_batches/val_check_interval: 1.0 (a float) is the whole epoch, an
            # int a number of batches; overfit_batches and fast_dev_run set both.
            or not (isinstance(trainer.limit_train_batches, float) and trainer.limit_train_batches == 1.0)
            or not (isinstance(trainer.val_check_interval, float) and trainer.val_check_interval == 1.0)
        )
        # Precision plugins that only wrap the forward in autocast (or nothing): a block
        # runs its backward passes and steps outside autocast, as Lightning does.
        exact_precision = type(trainer.precision_plugin) in (Precision, MixedPrecision)
        return 1 if counts_batches or not exact_precision else task.steps_per_block

    def prepare(self, datamodule, model) -> None:
        """Check the optimizer's and scheduler's arguments (once, before any output)."""
        task = self.task
        try:
            opt = task.optimizer_factory(model.parameters())
        except (ValueError, TypeError) as err:
            raise fail("optimizer", "valid optimizer arguments", str(err)) from None
        if "lr" in opt.defaults:
            check_positive("optimizer lr", float(opt.defaults["lr"]))
        if task.lr_scheduler_factory is not None and task.lr_scheduler_interval == "step":
            if isinstance(task.lr_scheduler_factory(opt), ReduceLROnPlateau):
                raise fail(
                    "lr_scheduler_interval",
                    "'epoch' for ReduceLROnPlateau (it watches val/loss, computed once per epoch)",
                    "'step'",
                )

    def configure_optimizers(self):
        task = self.task
        opt = task.optimizer_factory(task.parameters())
        if task.lr_scheduler_factory is None:
            return opt
        sched = task.lr_scheduler_factory(opt)
        config = {"scheduler": sched, "interval": task.lr_scheduler_interval}
        if isinstance(sched, ReduceLROnPlateau) and self.automatic_optimization:
            # In step blocks the driver steps it itself on val/loss (_step_plateau).
            config["monitor"] = "val/loss"
        return {"optimizer": opt, "lr_scheduler": config}

    def on_train_start(self) -> None:
        task, blocks = self.task, self.blocks
        self.gradient.start()
        if not self.automatic_optimization:
            blocks.plain_steps = self._no_step_hooks()
        blocks.graph, blocks.graph_warm = None, False
        if not task.cuda_graphs:
            return
        reason = self._graph_obstacle()
        if reason is not None:
            warn(f"cuda_graphs: the SGD blocks run uncaptured: {reason}", PerformanceWarning)
            return
        blocks.graph = BlockGraph(
            self.block_size(),
            task.trainer.datamodule.batch_size,
            task.trainer.strategy.root_device,
            task.feature_mean.dtype,
            task.graph_backend,
        )

    def _no_step_hooks(self) -> bool:
        """Whether Lightning's path around an optimizer step does nothing but the step:
        full precision, one device, and no callback or override of the step hooks."""
        task = self.task
        trainer = task.trainer
        if (
            type(trainer.precision_plugin) is not Precision
            or type(trainer.strategy) is not SingleDeviceStrategy
        ):
            return False
        if any(is_overridden(h, task, pl.LightningModule) for h in _MODULE_STEP_HOOKS):
            return False
        return not any(
            is_overridden(h, cb, pl.Callback) for cb in trainer.callbacks for h in _CALLBACK_STEP_HOOKS
        )

    def _graph_obstacle(self) -> str | None:
        """Why this fit's step blocks cannot be recorded (``cuda_graphs``), or ``None``."""
        task = self.task
        trainer = task.trainer
        device = trainer.strategy.root_device
        if task.graph_backend is None and device.type != "cuda":
            return f"they need a CUDA device (this fit runs on {device})"
        if self.automatic_optimization:
            return "the fit takes one mini-batch per Lightning step (steps_per_block=1, or a trainer setting counted in mini-batches)"
        if not self.blocks.plain_steps:
            return (
                "Lightning's step hooks do work here (a callback or override of a step hook, a precision "
                "other than 32-true, or several devices)"
            )
        dm = trainer.datamodule
        if not isinstance(dm, GLMDataModule) or not task.data_resident:
            return "the training data are not kept on the device (they take more than half its free memory)"
        if not dm.shuffle or dm.batch_size is None:
            return "the batches are not shuffled mini-batches"
        if any(c.interval == "step" for c in trainer.lr_scheduler_configs):
            return "a per-step learning-rate scheduler changes the recorded step every step"
        opt = task.optimizers().optimizer
        if not capturable_optimizer(opt):
            return f"{type(opt).__name__}.step cannot be recorded (use SGD, or build the optimizer with capturable=True)"
        return None

    def on_train_epoch_start(self) -> None:
        task = self.task
        self.epoch_loss.update(
            sum=torch.zeros((), dtype=task.feature_mean.dtype, device=task.feature_mean.device),
            count=0,
            steps=0,
            complete=False,
        )

    def training_step(self, batch: Batch | BatchBlock, batch_idx: int):
        if not self.automatic_optimization:
            return self.blocks.step(batch, batch_idx)
        task, acc = self.task, self.epoch_loss
        loss = self.gradient.loss(batch)
        acc["sum"].add_(loss.detach())
        acc["count"] += 1
        # Log the step loss only at the logger's interval (Lightning writes step
        # metrics when (steps done + 1) % log_every_n_steps == 0): a self.log call
        # every step costs more than this model's whole step (bench/sgd_epoch.py).
        if (task.global_step + 1) % task.trainer.log_every_n_steps == 0:
            task.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False)
        return loss

    def on_train_epoch_end(self) -> None:
        task, acc = self.task, self.epoch_loss
        loss = acc["sum"] / max(acc["count"], 1)
        # Each process's own rows: the mean over processes (sync_dist).
        task.log("train/epoch_loss", loss, sync_dist=True)
        self._history.append({"loss": float(loss)})

    def after_train_metrics(self) -> None:
        """After the epoch's training metrics: in step blocks, step
        ``ReduceLROnPlateau`` (see :meth:`_step_plateau`)."""
        if not self.automatic_optimization and self.epoch_loss["complete"]:
            self._step_plateau()

    def _step_plateau(self) -> None:
        """Step ``ReduceLROnPlateau`` on the epoch's ``val/loss`` at the epoch's end,
        where Lightning's automatic optimization steps it (after validation, before
        the next epoch). Here it steps before the checkpoint callbacks save: the
        ``last.ckpt`` of a killed run holds the stepped scheduler (Lightning's
        resume skips that step, a resumed per-step fit lags one plateau step).

        Raises:
            MisconfigurationException: no ``val/loss`` (Lightning's message).
        """
        task = self.task
        trainer = task.trainer
        for c in trainer.lr_scheduler_configs:
            if (
                isinstance(c.scheduler, ReduceLROnPlateau)
                and c.interval == "epoch"
                and (trainer.current_epoch + 1) % c.frequency == 0
            ):
                value = trainer.callback_metrics.get("val/loss")
                if value is None:
                    raise MisconfigurationException(
                        f"ReduceLROnPlateau conditioned on metric val/loss which is not available. Available "
                        f"metrics are: {list(trainer.callback_metrics)}. Condition can be set using `monitor` "
                        "key in lr scheduler dict"
                    )
                task.lr_scheduler_step(c.scheduler, value)

    def on_train_end(self) -> bool:
        if self.blocks.graph is not None:
            self.blocks.graph.graph = None  # the recording's memory (its count stays)
        return True

    def conclude(self, done: bool) -> FitResult:
        return FitResult(
            solver=f"sgd ({type(self.task.trainer.optimizers[0]).__name__})",
            converged=False,
            n_iter=len(self._history),
            history=self._history,
            message="mini-batch optimization: stopped by the trainer (max_epochs or early stopping)",
        )

    def save(self, record: dict[str, Any]) -> None:
        record["epoch_history"] = list(self._history)

    def load(self, checkpoint: dict[str, Any]) -> None:
        if attached_trainer(self.task) is not None:
            carry_global_step(checkpoint, self.automatic_optimization)
        self._history = list(checkpoint["torchglm"].get("epoch_history", []))
