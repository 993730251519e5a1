"""SGD in step blocks: ``k`` optimizer steps inside one Lightning training step.

Each step is taken as Lightning's automatic optimization takes it: the closure
evaluates the objective (in the precision's forward context), adds it to the
epoch loss, zeroes the gradients and sets them (the model's closed form where it
applies, else back-propagation: :mod:`.step_gradient`); ``optimizer.step(closure)``;
then the per-step schedulers. After the epoch's last step the per-epoch
schedulers step, as Lightning steps them after the last batch. The weights,
optimizer and scheduler states, logged step losses and checkpoints are those of
one mini-batch per Lightning step, bit for bit, at ``1/k`` of Lightning's per-step
cost. Where nothing overrides Lightning's step hooks, a block skips their
dispatch; with ``cuda_graphs``, a full block replays its recorded steps
(:mod:`.graphs`). Lightning's step counters are advanced through
:mod:`._lightning_private`.
"""

from __future__ import annotations

from contextlib import nullcontext
from itertools import islice
from typing import Any

import torch
from pytorch_lightning.plugins.precision import MixedPrecision
from torch.optim.lr_scheduler import ReduceLROnPlateau

from ..data.batches import Batch, BatchBlock
from ._lightning_private import (
    advance_logger_steps,
    count_optimizer_steps,
    plain_optimizer_step,
)
from .graphs import BlockGraph, optimizer_key, side_stream
from .step_gradient import StepGradient

__all__ = ["StepBlocks"]


class StepBlocks:
    """The optimizer steps of the blocks of one fit.

    Args:
        task: the :class:`~torchglm.training.task.GLMTask`.
        epoch_loss: the epoch's running ``sum`` (a tensor), ``count`` and ``steps``,
            and whether the epoch's last step was taken (``complete``), mutated in place.
        gradient: the steps' objective and gradient (:class:`~.step_gradient.StepGradient`).

    Attributes:
        plain_steps: whether a block's steps skip Lightning's hook dispatch (set at
            the fit's start: nothing but the step happens around them).
        graph: the recorded block of ``cuda_graphs`` (``None``: blocks run eagerly).
    """

    def __init__(self, task, epoch_loss: dict[str, Any], gradient: StepGradient) -> None:
        self.task = task
        self.epoch_loss = epoch_loss
        self.gradient = gradient
        self.plain_steps = False
        self.graph: BlockGraph | None = None
        self.graph_warm = False

    def step(self, block: Batch | BatchBlock, batch_idx: int) -> torch.Tensor | None:
        """The optimizer steps of one block of mini-batches; returns the last step's loss."""
        task = self.task
        trainer = task.trainer
        batches = block if isinstance(block, BatchBlock) else (block,)
        first = task.global_step  # optimizer steps before this block
        n_steps = len(batches)
        if trainer.max_steps >= 0:  # stop at max_steps exactly, not at the block's end
            n_steps = min(n_steps, max(trainer.max_steps - first, 0))
        every, epoch = trainer.log_every_n_steps, trainer.current_epoch
        opt = task.optimizers()
        graph = self.graph
        outside = nullcontext()
        if (
            graph is not None
            and isinstance(block, BatchBlock)
            and n_steps == len(batches)
            and graph.fits(block.spans)
        ):
            if self.graph_warm:
                losses = self._replay(graph, block, opt)
                logged = [
                    (first + i, losses[i].clone())
                    for i in range(n_steps)
                    if every and (first + i + 1) % every == 0
                ]
                self._end_block(batch_idx, n_steps, len(batches), epoch, logged)
                return losses[n_steps - 1].clone()
            # The first full block runs uncaptured (on a side stream, as recording
            # asks): it creates the optimizer's state and the gradients' memory.
            self.graph_warm = True
            outside = side_stream(graph.index.device)
        last, logged = self._eager(batches, n_steps, first, opt, outside)
        self._end_block(batch_idx, n_steps, len(batches), epoch, logged)
        return last

    def _eager(self, batches, n_steps: int, first: int, opt, outside):
        """Take ``n_steps`` steps one by one; returns the last loss and the logged ones."""
        task, acc = self.task, self.epoch_loss
        trainer = task.trainer
        every, epoch = trainer.log_every_n_steps, trainer.current_epoch
        schedulers = [
            (c.scheduler, c.frequency)
            for c in trainer.lr_scheduler_configs
            if c.interval == "step" and not isinstance(c.scheduler, ReduceLROnPlateau)
        ]
        last: list[torch.Tensor | None] = [None]  # the closure's last loss
        logged = []
        precision, forward = self._step_contexts()
        with outside, precision:
            for i, batch in enumerate(islice(batches, n_steps)):
                step_in_epoch = acc["steps"]
                closure = self._closure(batch, forward, last, opt.optimizer, epoch, step_in_epoch)
                if self.plain_steps:
                    plain_optimizer_step(opt, closure)
                else:
                    task.optimizer_step(epoch, step_in_epoch, opt, closure)
                acc["steps"] = step_in_epoch + 1
                for sched, frequency in schedulers:
                    if (step_in_epoch + 1) % frequency == 0:
                        task.lr_scheduler_step(sched, None)
                # Lightning writes the loss of step s when (s + 1) % every == 0.
                if every and (first + i + 1) % every == 0:
                    logged.append((first + i, last[0]))
        return last[0], logged

    def _replay(self, graph: BlockGraph, block: BatchBlock, opt) -> torch.Tensor:
        """One full block's steps as a replay of its recorded graph (recorded first,
        or again when the optimizer's numbers changed); Lightning counts the steps
        as it counts uncaptured ones. Returns the step losses (the graph's buffer)."""
        optimizer, acc = opt.optimizer, self.epoch_loss
        key = (optimizer_key(optimizer), block.gather)
        losses = graph.run(block.spans, acc["sum"], key, self._graph_body(block.gather, optimizer))
        count_optimizer_steps(opt, graph.steps)
        acc["steps"] += graph.steps
        acc["count"] += graph.steps
        return losses

    def _graph_body(self, gather, optimizer):
        """What a recorded block does: per step, gather the rows ``index[i]`` and take
        the optimizer step with the closure of :meth:`_closure` (without Lightning's
        dispatch), the loss written to ``losses[i]`` and added to ``total``."""

        def body(index: torch.Tensor, losses: torch.Tensor, total: torch.Tensor) -> None:
            for i in range(index.shape[0]):

                def record(value: torch.Tensor, out: torch.Tensor = losses[i]) -> None:
                    out.copy_(value)
                    total.add_(value)

                optimizer.step(self.gradient.closure(gather(index[i]), optimizer, record))

        return body

    def _end_block(self, batch_idx: int, n_steps: int, n_batches: int, epoch: int, logged: list) -> None:
        """After a block's steps: the per-epoch schedulers after the epoch's last step
        (where Lightning steps them), the step losses to the loggers, and Lightning's
        logger step advanced by the block's steps."""
        task, acc = self.task, self.epoch_loss
        trainer = task.trainer
        if batch_idx == trainer.num_training_batches - 1 and n_steps == n_batches:
            acc["complete"] = True
            for c in trainer.lr_scheduler_configs:
                if (
                    c.interval == "epoch"
                    and not isinstance(c.scheduler, ReduceLROnPlateau)
                    and (epoch + 1) % c.frequency == 0
                ):
                    task.lr_scheduler_step(c.scheduler, None)
        self._log_steps(logged, epoch)
        advance_logger_steps(trainer, max(n_steps - 1, 0))

    def _closure(self, batch: Batch, forward, last: list, optimizer, epoch: int, step: int):
        """Lightning's closure of one step: forward, epoch loss, zero_grad, backward
        (with Lightning's hooks, or, where ``plain_steps``, without the dispatch)."""
        task, acc = self.task, self.epoch_loss
        if self.plain_steps:

            def record(value: torch.Tensor) -> None:
                last[0] = value
                acc["sum"].add_(value)
                acc["count"] += 1

            return self.gradient.closure(batch, optimizer, record)
        trainer = task.trainer

        def closure():
            with forward():
                loss = self.gradient.loss(batch)
            last[0] = loss.detach()
            acc["sum"].add_(last[0])
            acc["count"] += 1
            for callback in trainer.callbacks:
                callback.on_before_zero_grad(trainer, task, optimizer)
            task.on_before_zero_grad(optimizer)
            task.optimizer_zero_grad(epoch, step, optimizer)
            task.manual_backward(loss)
            return loss

        return closure

    def _step_contexts(self):
        """``(outside, forward)``: the context of a block's backward passes and steps,
        and a factory of the forward's. Lightning runs ``training_step`` in the
        precision's forward context and the backward and step outside it: under
        mixed precision a block leaves autocast for them and re-enters it for each
        forward (Lightning's autocast caches no casts, so no stale cast outlives a step)."""
        plugin = self.task.trainer.precision_plugin
        if type(plugin) is MixedPrecision:
            return torch.autocast(plugin.device, enabled=False), plugin.forward_context
        return nullcontext(), nullcontext

    def _log_steps(self, logged: list[tuple[int, torch.Tensor]], epoch: int) -> None:
        """Write the block's step losses at their own optimizer steps, as Lightning's
        logger connector writes them one per step (with the epoch)."""
        if not logged:
            return
        task = self.task
        for logger in task.loggers:
            for step, value in logged:
                logger.log_metrics({"train/loss_step": float(value), "epoch": epoch}, step=step)
                logger.save()
        # callback_metrics, as the step's self.log would leave them (written above)
        task.log("train/loss_step", logged[-1][1], on_step=True, on_epoch=False, logger=False)
