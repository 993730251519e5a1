"""The objective and gradient of one mini-batch step of ``solver="sgd"``.

A GLM's gradient is closed form (the lecture notes on probabilistic classification,
§8: ``X^T (y - t)`` plus the penalty's): where the model gives it
(:meth:`~torchglm.models.GeneralizedLinearModel.objective_gradient`), a step writes
it into the parameters' ``.grad`` and calls the user's optimizer unchanged, so
every ``torch.optim`` optimizer and scheduler works as before. On a batch of a
thousand rows this replaces the autograd graph of the forward (its recording, the
engine's backward pass) with two matrix-vector products and a few elementwise
operations: the largest part of the step's cost (``bench/sgd_epoch.py``).

Where Lightning runs the backward itself (one mini-batch per Lightning step, or a
block through Lightning's hooks), the loss is one autograd node whose backward
returns those gradients (times the incoming gradient, 1 unless a trainer setting
scales the loss), so every path of a fit takes the same arithmetic: the weights
of ``steps_per_block=1`` and ``k`` stay equal bit for bit.

The closed form is not used, and the step differentiates ``model.objective`` with
autograd, where it would not be the gradient of what the optimizer steps on: a
precision other than ``32-true`` (autocast forwards, scaled or half-precision
backward passes), a trainable parameter outside the model (a basis with
parameters), a model without ``objective_gradient``, or one that declines it
(a subclass with its own objective, a forward hook, sparse features).
"""

from __future__ import annotations

from typing import Callable

import torch
from pytorch_lightning.plugins.precision import Precision

from ..data.batches import Batch

__all__ = ["StepGradient"]


class _ClosedFormLoss(torch.autograd.Function):
    """The loss as one autograd node whose backward is its closed-form gradient:
    ``forward(loss, grads, *params)`` returns ``loss``; ``backward`` gives each
    parameter ``grad_output * grads[i]`` (chain rule through a scaling of the loss)."""

    @staticmethod
    def forward(ctx, loss, grads, *params):
        ctx.grads = grads
        return loss.clone()

    @staticmethod
    def backward(ctx, grad_loss):
        return (None, None, *(g * grad_loss for g in ctx.grads))


class StepGradient:
    """How a fit's steps differentiate the objective (chosen at the fit's start).

    Args:
        task: the :class:`~torchglm.training.task.GLMTask`.

    Attributes:
        closed_form: whether the steps take the model's closed-form gradient (see
            the module docstring); ``False`` until :meth:`start`.
        sets_every_grad: whether a closed-form step writes the ``.grad`` of every
            parameter of the optimizer, so that ``optimizer.zero_grad()`` (torch's own:
            every ``.grad`` to ``None``) would be overwritten entirely and is skipped.
    """

    def __init__(self, task) -> None:
        self.task = task
        self.closed_form = False
        self.sets_every_grad = False

    def start(self) -> None:
        """Choose, at the fit's start, between the closed form and autograd."""
        task = self.task
        model = task.model
        own = {id(p) for p in model.parameters() if p.requires_grad}
        trainable = [p for p in task.parameters() if p.requires_grad]
        self.closed_form = (
            type(task.trainer.precision_plugin) is Precision
            and callable(getattr(model, "objective_gradient", None))
            and all(id(p) in own for p in trainable)
        )
        optimizers = task.trainer.optimizers
        self.sets_every_grad = (
            self.closed_form
            and len(optimizers) == 1
            and type(optimizers[0]).zero_grad is torch.optim.Optimizer.zero_grad
            and {id(p) for g in optimizers[0].param_groups for p in g["params"]} == own
        )

    def _closed(self, batch: Batch):
        """``(loss, [(parameter, gradient), ...])`` of the model's closed form, or ``None``."""
        if not self.closed_form:
            return None
        task = self.task
        return task.model.objective_gradient(task.phi(batch.x), batch.y, batch.weight, batch.offset)

    def _objective(self, batch: Batch) -> torch.Tensor:
        task = self.task
        return task.model.objective(task.phi(batch.x), batch.y, batch.weight, batch.offset)

    def loss(self, batch: Batch) -> torch.Tensor:
        """The step's loss for a backward pass that Lightning runs: its ``backward()``
        leaves the same gradients as :meth:`closure`'s."""
        out = self._closed(batch)
        if out is None:
            return self._objective(batch)
        loss, pairs = out
        pairs = [(p, g) for p, g in pairs if p.requires_grad]
        return _ClosedFormLoss.apply(loss, [g for _, g in pairs], *(p for p, _ in pairs))

    def closure(
        self, batch: Batch, optimizer: torch.optim.Optimizer, record: Callable[[torch.Tensor], None]
    ) -> Callable[[], torch.Tensor]:
        """The closure of one ``optimizer.step``, without Lightning's dispatch: the
        objective (``record`` gets it detached), ``zero_grad``, the gradients."""

        def closure() -> torch.Tensor:
            out = self._closed(batch)
            if out is None:
                loss = self._objective(batch)
                record(loss.detach())
                optimizer.zero_grad()
                loss.backward()
                return loss
            loss, pairs = out
            record(loss)
            if not self.sets_every_grad:
                optimizer.zero_grad()
            for p, g in pairs:
                if p.requires_grad:
                    p.grad = g
            return loss

        return closure
