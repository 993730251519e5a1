"""Pass-based solvers under Lightning: one epoch is one pass.

Manual optimization drives ``fitter = model.make_fitter(solver, **solver_options)``
(:class:`torchglm.passes.Fitter`): ``start_pass`` at the epoch's start,
``accumulate(batch)`` per batch, ``end_pass`` on the last batch (so validation sees
the stepped parameters), taken through Lightning as the step of a parameter-free
:class:`PassStep` optimizer; the trainer stops when the fitter is done.
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import ConvergenceWarning, fail, warn
from ..data.batches import Batch
from ..passes import FitResult
from .driver import Driver

__all__ = ["PassDriver", "PassStep"]


class PassStep(torch.optim.Optimizer):
    """Lightning's view of a pass-based fitter: ``step()`` ends the pass.

    ``step`` calls ``fitter.end_pass()`` (all-reduce, solve, step, convergence
    check), so Lightning counts one optimizer step per pass: ``global_step``,
    step-based checkpointing and logger axes work for Newton, IRLS and closed
    forms as for SGD. It owns no parameters (the fitter updates the model).
    """

    def __init__(self, fitter):
        super().__init__([{"params": []}], {})
        self.fitter = fitter
        self.done = False

    def step(self, closure=None):
        if closure is not None:
            closure()  # Lightning's hooks around the step (on_before_optimizer_step)
        self.done = self.fitter.end_pass()


class PassDriver(Driver):
    """One epoch, one pass of ``task.model.make_fitter(task.solver, **task.solver_options)``.

    Attributes:
        fitter: the fit's fitter, made once: by :meth:`prepare`, so that an unknown
            solver or option fails before anything is written (or by
            :meth:`configure_optimizers` for a model built from a checkpoint, without
            ``prepare``). :meth:`configure_optimizers` begins its fit from the model
            as it is then (:meth:`~torchglm.passes.Fitter.restart_from`): Lightning
            restores a resumed run's weights and moves the model to its device and
            precision after ``prepare``.
        resumed_done: whether the resumed fit's solver had met its stopping rule.
    """

    def __init__(self, task) -> None:
        super().__init__(task)
        self.fitter = None
        self.resumed_done = False
        self._resumed_fit: dict[str, Any] | None = None
        self._resumed_state: dict[str, Any] | None = None

    @property
    def history(self) -> list[dict[str, Any]]:
        return [] if self.fitter is None else self.fitter.result.history

    def _make_fitter(self, model):
        task = self.task
        try:
            return model.make_fitter(task.solver, **task.solver_options)
        except TypeError as err:
            raise fail("solver_options", f"options of the '{task.solver}' solver", str(err)) from None

    def prepare(self, datamodule, model) -> None:
        # A pass sums over every row: the order changes only the rounding, so a
        # pass-based fit reads the rows in one fixed order, and a resumed fit's
        # first pass re-evaluates its accepted point bit for bit (a new order per
        # epoch moved the resumed iterates by an ulp).
        datamodule.shuffle = False
        # Made here, so an unknown solver or option fails before any output exists.
        self.fitter = self._make_fitter(model)

    def configure_optimizers(self) -> PassStep:
        # Lightning restores a resumed run's weights and moves the model before this
        # hook: the fit starts from them, where the model now is (prepare() saw the
        # initial weights on the host), and continues the checkpointed fit record.
        if self.fitter is None:
            self.fitter = self._make_fitter(self.task.model)
        else:
            self.fitter.restart_from(self.task.model)
        if self._resumed_fit is not None:
            self.fitter.result = FitResult(**self._resumed_fit)
            self._resumed_fit = None
        if self._resumed_state is not None and hasattr(self.fitter, "load_state_dict"):
            self.fitter.load_state_dict(self._resumed_state)
        self._resumed_state = None
        return PassStep(self.fitter)

    def on_train_epoch_start(self) -> None:
        self.fitter.start_pass()

    def training_step(self, batch: Batch, batch_idx: int) -> None:
        task = self.task
        self.fitter.accumulate(Batch(task.phi(batch.x), batch.y, batch.weight, batch.offset))
        # The pass ends inside training_step (Lightning counts manual steps only
        # here) and before validation, which then sees the stepped parameters.
        if batch_idx == task.trainer.num_training_batches - 1:
            self._end_pass()

    def _end_pass(self) -> None:
        task = self.task
        step = task.optimizers()
        step.step()
        task.fit_result = self.fitter.result
        if task.fit_result.history:
            last = task.fit_result.history[-1]
            task.log_dict({f"fit/{k}": float(v) for k, v in last.items() if _is_number(v)})
        if step.optimizer.done:
            task.trainer.should_stop = True

    def on_train_end(self) -> bool:
        return self.fitter.done

    def conclude(self, done: bool) -> FitResult:
        result = self.fitter.result
        if not done:
            # Never hide non-convergence: the trainer (max_epochs, early stopping)
            # ended the fit before the solver's stopping rule held.
            result.converged = False
            result.message = (
                f"stopped by the trainer after {self.task.current_epoch} passes, before "
                f"the '{self.task.solver}' solver's stopping rule held"
            )
            warn(result.message, ConvergenceWarning)
        return result

    def save(self, record: dict[str, Any]) -> None:
        if self.fitter is None:
            return
        # The pass-based fit's record; the model's parameters hold its last
        # accepted point, from which a resumed fit re-evaluates and goes on
        # along the same iterates (with the solver's own memory, e.g. L-BFGS pairs).
        record["fit_result"] = self.fitter.result
        if hasattr(self.fitter, "state_dict"):
            record["fitter_state"] = self.fitter.state_dict()
        record["fitter_done"] = bool(self.fitter.done)

    def load(self, checkpoint: dict[str, Any]) -> None:
        record = checkpoint["torchglm"]
        self._resumed_fit = record.get("fit_result")
        self._resumed_state = record.get("fitter_state")
        self.resumed_done = bool(record.get("fitter_done", False))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) or (torch.is_tensor(v) and v.numel() == 1)
