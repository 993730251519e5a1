"""Every use of a private Lightning attribute by the training task, in one place.

The SGD step blocks (:mod:`.sgd_blocks`) take ``k`` optimizer steps inside one
Lightning training step exactly as Lightning's automatic optimization takes ``k``
steps over ``k`` training steps; Lightning has no public hook for the counters
that its automatic loop advances per step, so the blocks advance them here. When
Lightning changes one of these internals, this file is the one to update (and
``tests/training/test_sgd_blocks.py`` fails if it is not).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

__all__ = [
    "CheapFxName",
    "advance_logger_steps",
    "attached_trainer",
    "carry_global_step",
    "count_optimizer_steps",
    "plain_optimizer_step",
]


class CheapFxName:
    """Mixin of a ``LightningModule`` that stores Lightning's ``_current_fx_name``
    directly in the instance dictionary.

    Lightning sets ``_current_fx_name`` around every hook call (about 44 times per
    training step); a plain string needs none of ``nn.Module.__setattr__``'s
    parameter/buffer/submodule bookkeeping, which was the largest per-step cost of
    the Lightning loop in ``bench/sgd_epoch.py``'s profile.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_current_fx_name":
            self.__dict__[name] = value
        else:
            super().__setattr__(name, value)


def attached_trainer(module: pl.LightningModule) -> pl.Trainer | None:
    """The module's trainer, or ``None`` when it has none: ``module.trainer`` raises
    when the module is not attached (a task built or loaded outside a fit), and
    Lightning keeps the reference in ``_trainer``."""
    return module._trainer


def plain_optimizer_step(optimizer, closure) -> None:
    """``LightningOptimizer.step`` without the dispatch through strategy and precision
    (which, where a block takes plain steps, only call hooks nothing overrides): the
    same step, counted by Lightning's step counters (``_on_before_step``/``_on_after_step``
    advance the optimizer-step progress that ``global_step`` reads)."""
    optimizer._on_before_step()
    optimizer.optimizer.step(closure)
    optimizer._on_after_step()


def count_optimizer_steps(optimizer, n: int) -> None:
    """Count ``n`` optimizer steps taken outside Lightning (a replayed CUDA graph) as
    Lightning counts its own (see :func:`plain_optimizer_step`)."""
    for _ in range(n):
        optimizer._on_before_step()
        optimizer._on_after_step()


def advance_logger_steps(trainer: pl.Trainer, n: int) -> None:
    """Advance Lightning's logger step by ``n``: it counts one per training step
    (``_batches_that_stepped``), and a block's training step took ``n + 1`` optimizer
    steps; validation and epoch metrics then land on the optimizer-step axis, as with
    one mini-batch per training step."""
    trainer.fit_loop.epoch_loop._batches_that_stepped += n


def carry_global_step(checkpoint: dict[str, Any], automatic: bool) -> None:
    """Resume ``global_step`` across ``steps_per_block`` settings: Lightning counts
    the optimizer steps of automatic and of manual optimization in two progress
    records of its checkpointed loop state, and restores the one of the resumed
    fit's mode."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    steps = int(checkpoint.get("global_step", 0))
    if automatic:
        progress = (
            loop.get("epoch_loop.automatic_optimization.optim_progress", {}).get("optimizer", {}).get("step")
        )
    else:
        progress = loop.get("epoch_loop.manual_optimization.optim_step_progress")
    if progress is not None:
        for key in ("ready", "completed"):
            progress["total"][key] = max(progress["total"][key], steps)
