"""The SGD steps of ``GLMTask`` take the GLM's closed-form gradient (no autograd graph)
and call the user's optimizer unchanged: the same fit as autograd's to rounding, on
every path of a fit (one mini-batch per Lightning step, blocks with and without
Lightning's hooks); autograd where the closed form is not the objective's gradient."""

import warnings
from functools import partial

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from run_util import fit_state, quiet_trainer
from torchglm import GeneralizedLinearModel, LogisticRegression, SoftmaxRegression
from torchglm.training import GLMDataModule, GLMTask

pytestmark = pytest.mark.usefixtures("quiet_one_thread")

# breast_cancer: 341 training rows, batches of 32: 11 mini-batches per epoch.
N_BATCHES = 11


def _same_objective(self, x, y, weight=None, offset=None):
    """The GLM's objective, as a subclass's own: the steps then differentiate it with autograd."""
    return GeneralizedLinearModel.objective(self, x, y, weight, offset)


def _autograd(model_class):
    return type(f"Autograd{model_class.__name__}", (model_class,), {"objective": _same_objective})


class _L1Logistic(LogisticRegression):
    """An objective of its own (an L1 term): the closed form is not its gradient."""

    def objective(self, x, y, weight=None, offset=None):
        return super().objective(x, y, weight, offset) + 0.05 * self.linear.weight.abs().sum()


class _Scale(nn.Module):
    """A basis with a trainable parameter (a scale per feature)."""

    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d, dtype=torch.float64))

    def forward(self, x):
        return x * self.scale


class _Spy(pl.Callback):
    """Counts the calls of ``model.objective_gradient`` that returned a gradient."""

    def __init__(self):
        self.calls = 0

    def on_train_start(self, trainer, task):
        model, inner = task.model, task.model.objective_gradient

        def counted(*args, **kw):
            out = inner(*args, **kw)
            self.calls += out is not None
            return out

        model.objective_gradient = counted


def _fit(model, k, *, optimizer=None, basis=None, epochs=2, callbacks=(), **trainer_kw):
    dm = GLMDataModule("breast_cancer", batch_size=32, dtype="float64")
    task = GLMTask(
        model,
        optimizer=optimizer or partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        steps_per_block=k,
        basis=basis,
        train_metrics=False,
    )
    trainer = quiet_trainer(max_epochs=epochs, callbacks=list(callbacks), **trainer_kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(task, datamodule=dm)
    return task, trainer


class _StepHook(pl.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        pass


@pytest.mark.parametrize(
    "k, hooks", [(1, False), (4, False), (4, True)], ids=["per-step", "blocks", "blocks-with-hooks"]
)
def test_every_step_takes_the_closed_form(k, hooks):
    spy = _Spy()
    callbacks = [spy, _StepHook()] if hooks else [spy]
    task, trainer = _fit(partial(LogisticRegression, l2=1e-3), k, callbacks=callbacks)
    assert task.driver.gradient.closed_form
    assert task.driver.blocks.plain_steps == (k > 1 and not hooks)
    assert trainer.global_step == 2 * N_BATCHES and spy.calls == trainer.global_step


@pytest.mark.parametrize(
    "model, optimizer",
    [
        (partial(LogisticRegression, l2=1e-3), partial(torch.optim.SGD, lr=0.1, momentum=0.9)),
        (partial(LogisticRegression, l2=1e-3), partial(torch.optim.Adam, lr=0.05)),
        (partial(LogisticRegression, l2=1e-3), partial(torch.optim.LBFGS, lr=0.5, max_iter=3)),
        (partial(SoftmaxRegression, n_classes=2, l2=1e-3), partial(torch.optim.Adam, lr=0.05)),
        (partial(GeneralizedLinearModel, link="probit"), partial(torch.optim.SGD, lr=0.1)),
    ],
    ids=["sgd-momentum", "adam", "lbfgs", "softmax", "probit"],
)
@pytest.mark.parametrize("k", [1, 4])
def test_closed_form_fit_equals_the_autograd_fit(model, optimizer, k):
    """The same weights, optimizer state and epoch losses as differentiating the
    objective with autograd, to rounding (float64)."""
    closed, tc = _fit(model, k, optimizer=optimizer)
    auto, ta = _fit(partial(_autograd(model.func), *model.args, **model.keywords), k, optimizer=optimizer)
    assert closed.driver.gradient.closed_form and not auto.model.closed_form_gradient
    a, b = fit_state(closed, tc), fit_state(auto, ta)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-9, atol=1e-12, equal_nan=True, msg=key)


def test_mixed_precision_and_trainable_basis_take_autograd():
    task, _ = _fit(partial(LogisticRegression), 4, epochs=1, precision="bf16-mixed")
    assert not task.driver.gradient.closed_form
    basis = _Scale(30)
    task, _ = _fit(partial(LogisticRegression), 4, basis=basis, epochs=1)
    assert not task.driver.gradient.closed_form
    assert not torch.equal(basis.scale.detach(), torch.ones(30))  # the basis was trained too


def test_a_model_with_its_own_objective_is_differentiated_by_autograd():
    spy = _Spy()
    own, _ = _fit(_L1Logistic, 4, callbacks=[spy])
    assert own.driver.gradient.closed_form and spy.calls == 0
    # the L1 term's gradient took part: other weights than the plain objective's
    ref, _ = _fit(LogisticRegression, 4)
    assert not torch.allclose(own.model.coef, ref.model.coef, rtol=1e-3)
