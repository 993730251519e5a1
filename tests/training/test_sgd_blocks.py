"""SGD in step blocks: one Lightning training step takes ``steps_per_block`` optimizer
steps over the data module's blocks of mini-batches. Every test holds the block fit
against the per-step fit (``steps_per_block=1``: Lightning's automatic optimization,
one mini-batch per training step), bit for bit."""

import json
import math
import warnings
from functools import partial
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping
from pytorch_lightning.loggers import CSVLogger

from run_util import checkpoint_weights, fit_state, quiet_trainer, train_tiny
from torchglm import InputError, LogisticRegression, SoftmaxRegression
from torchglm.data.batches import BatchBlock, TensorBatches
from torchglm.training import GLMDataModule, GLMTask
from torchglm.training.cli import main

pytestmark = pytest.mark.usefixtures("quiet_one_thread")

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
# breast_cancer: 341 training rows, batches of 32: 11 mini-batches per epoch, so
# blocks of 4 are 4 + 4 + 3 and blocks of 32 one block per epoch.
N_BATCHES = 11


class CountSteps(pl.Callback):
    """Training steps (Lightning batches) per epoch, and Lightning's per-optimizer-step
    hooks in order with the optimizer step they belong to."""

    def __init__(self, step_hooks: bool = False):
        self.per_epoch: list[int] = []
        self.hooks: list[tuple[str, int, bool]] = []
        if step_hooks:  # defined only on request: overriding them takes Lightning's path
            for name in (
                "on_before_zero_grad",
                "on_before_backward",
                "on_after_backward",
                "on_before_optimizer_step",
            ):
                setattr(self, name, partial(self._record, name))

    def _record(self, name, trainer, *args):
        # global_step counts completed steps: the step being taken is global_step.
        self.hooks.append((name, trainer.global_step, torch.is_autocast_enabled("cpu")))

    def on_train_epoch_start(self, trainer, pl_module):
        self.per_epoch.append(0)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.per_epoch[-1] += 1


def _fit(
    tmp_path,
    k,
    *,
    epochs=3,
    optimizer=None,
    lr_scheduler=None,
    interval="epoch",
    precision=None,
    model=None,
    batch_size=32,
    callbacks=(),
    dtype="float64",
    ckpt_path=None,
    **trainer_kw,
):
    dm = GLMDataModule("breast_cancer", batch_size=batch_size, dtype=dtype)
    task = GLMTask(
        model or partial(LogisticRegression, l2=1e-3),
        optimizer=optimizer or partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        lr_scheduler=lr_scheduler,
        lr_scheduler_interval=interval,
        steps_per_block=k,
        train_metrics=False,
    )
    counter = CountSteps()
    trainer = quiet_trainer(
        max_epochs=epochs,
        logger=CSVLogger(tmp_path, name="", version=f"k{k}"),
        log_every_n_steps=3,
        precision=precision,
        callbacks=[counter, *callbacks],
        **trainer_kw,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(task, datamodule=dm, ckpt_path=ckpt_path)
    return task, trainer, counter


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]) or (a[key].isnan().all() and b[key].isnan().all()), (
            key,
            a[key],
            b[key],
        )


def _csv(tmp_path, k) -> str:
    return (tmp_path / f"k{k}" / "metrics.csv").read_text()


@pytest.mark.parametrize(
    "optimizer, lr_scheduler, interval",
    [
        (partial(torch.optim.SGD, lr=0.1, momentum=0.9), None, "epoch"),
        (
            partial(torch.optim.Adam, lr=0.05),
            partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.7),
            "epoch",
        ),
        (
            partial(torch.optim.Adam, lr=0.05),
            partial(torch.optim.lr_scheduler.OneCycleLR, max_lr=0.1, total_steps=40),
            "step",
        ),
        (
            partial(torch.optim.SGD, lr=0.5),
            partial(torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=0),
            "epoch",
        ),
    ],
)
@pytest.mark.parametrize("k", [4, 32])
def test_blocks_equal_per_step_bit_for_bit(tmp_path, k, optimizer, lr_scheduler, interval):
    one, t1, c1 = _fit(tmp_path, 1, optimizer=optimizer, lr_scheduler=lr_scheduler, interval=interval)
    blk, tk, ck = _fit(tmp_path, k, optimizer=optimizer, lr_scheduler=lr_scheduler, interval=interval)
    assert one.automatic_optimization and not blk.automatic_optimization
    _assert_same(fit_state(one, t1), fit_state(blk, tk))
    assert tk.global_step == 3 * N_BATCHES
    # one training step per block: ceil(n_batches / k) per epoch
    assert c1.per_epoch == [N_BATCHES] * 3 and ck.per_epoch == [math.ceil(N_BATCHES / k)] * 3
    assert tk.num_training_batches == math.ceil(N_BATCHES / k)
    # the same log: step losses every 3 optimizer steps at their own steps, epoch and
    # validation metrics on the same step axis
    assert _csv(tmp_path, 1) == _csv(tmp_path, k)
    assert "train/loss_step" in _csv(tmp_path, k)


def test_blocks_are_the_default_and_every_k_matches(tmp_path):
    task, trainer, counter = _fit(tmp_path, GLMTask(LogisticRegression).steps_per_block)
    assert counter.per_epoch == [1, 1, 1] and not task.automatic_optimization
    ref = fit_state(*_fit(tmp_path, 1)[:2])
    _assert_same(ref, fit_state(task, trainer))
    for k in (2, 3, 11, 12):
        _assert_same(ref, fit_state(*_fit(tmp_path, k)[:2]))
    # an odd batch size in float32 (batches not on 64-byte boundaries of one block)
    ref = fit_state(*_fit(tmp_path, 1, batch_size=7, dtype="float32")[:2])
    _assert_same(ref, fit_state(*_fit(tmp_path, 5, batch_size=7, dtype="float32")[:2]))


def test_per_step_scheduler_steps_every_optimizer_step(tmp_path):
    # StepLR stepped per optimizer step: lr = lr0 gamma^(steps taken), 33 steps in 3 epochs
    sched = partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.95)
    task, trainer, _ = _fit(tmp_path, 4, lr_scheduler=sched, interval="step")
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(
        0.1 * 0.95 ** (3 * N_BATCHES), rel=1e-12
    )
    task, trainer, _ = _fit(tmp_path, 4, lr_scheduler=sched, interval="epoch")
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.95**3, rel=1e-12)


def test_plateau_needs_epoch_interval():
    task = GLMTask(
        LogisticRegression,
        optimizer=partial(torch.optim.SGD, lr=0.1),
        lr_scheduler_interval="step",
        lr_scheduler=partial(torch.optim.lr_scheduler.ReduceLROnPlateau),
    )
    with pytest.raises(InputError, match="lr_scheduler_interval: expected 'epoch' for ReduceLROnPlateau"):
        task.build(GLMDataModule("breast_cancer"))


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "4"])
def test_bad_steps_per_block(value):
    with pytest.raises(InputError, match="steps_per_block: expected an integer >= 1"):
        GLMTask(LogisticRegression, steps_per_block=value)


def test_closure_optimizer_and_softmax(tmp_path):
    # LBFGS evaluates its closure several times per step: the epoch loss counts each
    # evaluation, as Lightning's closure does
    lbfgs = partial(torch.optim.LBFGS, lr=0.5, max_iter=3)
    softmax = partial(SoftmaxRegression, n_classes=2, l2=1e-3)
    for kw in ({"optimizer": lbfgs, "batch_size": 64}, {"model": softmax}):
        ref = fit_state(*_fit(tmp_path, 1, **kw)[:2])
        _assert_same(ref, fit_state(*_fit(tmp_path, 4, **kw)[:2]))


def test_lightning_hooks_per_optimizer_step(tmp_path):
    """A callback with per-step hooks sees them once per optimizer step, in
    Lightning's order, in blocks as per step (the block then goes through
    Lightning's own hook dispatch, manual_backward and LightningOptimizer.step)."""
    c1, c4 = CountSteps(step_hooks=True), CountSteps(step_hooks=True)
    one, t1, _ = _fit(tmp_path, 1, callbacks=[c1])
    blk, t4, _ = _fit(tmp_path, 4, callbacks=[c4])
    assert not blk.driver.blocks.plain_steps
    order = ["on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step"]
    assert [h[0] for h in c1.hooks] == order * (3 * N_BATCHES)
    assert c4.hooks == c1.hooks
    _assert_same(fit_state(one, t1), fit_state(blk, t4))
    # without them the block skips the dispatch, with the same result
    plain, tp, _ = _fit(tmp_path, 4)
    assert plain.driver.blocks.plain_steps
    _assert_same(fit_state(one, t1), fit_state(plain, tp))


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed with a scaler"])
def test_mixed_precision_blocks(tmp_path, precision):
    """Forward in autocast, backward and step outside it, as Lightning's closure runs
    them; with a gradient scaler (fp16) manual_backward scales and the precision
    plugin unscales, skips and updates as per step."""
    from pytorch_lightning.plugins.precision import MixedPrecision

    def kw():  # a new plugin (and scaler) per fit
        if precision == "bf16-mixed":
            return {"precision": "bf16-mixed"}
        # init_scale overflows fp16 at first: skipped steps, then a scale going down and up
        return {
            "plugins": [
                MixedPrecision(
                    "16-mixed",
                    "cpu",
                    scaler=torch.amp.GradScaler("cpu", init_scale=2.0**24, growth_interval=4),
                )
            ]
        }

    c1, c4 = CountSteps(step_hooks=True), CountSteps(step_hooks=True)
    one, t1, _ = _fit(tmp_path, 1, dtype="float32", callbacks=[c1], **kw())
    blk, t4, _ = _fit(tmp_path, 4, dtype="float32", callbacks=[c4], **kw())
    assert not blk.automatic_optimization
    _assert_same(fit_state(one, t1), fit_state(blk, t4))
    assert c4.hooks == c1.hooks and not any(h[2] for h in c4.hooks)  # backward outside autocast
    scaler = t4.precision_plugin.scaler
    if scaler is not None:
        assert scaler.get_scale() == t1.precision_plugin.scaler.get_scale() < 2.0**24
    val = t4.validate(blk, datamodule=t4.datamodule, verbose=False)[0]
    assert val["val/accuracy"] > 0.9


def test_forward_runs_in_autocast(tmp_path):
    dtypes = {}

    class Record(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            def hook(module, args, eta):
                dtypes.setdefault(trainer.global_step, eta.dtype)

            pl_module.model.register_forward_hook(hook)

    _fit(
        tmp_path,
        4,
        epochs=1,
        dtype="float32",
        precision="bf16-mixed",
        callbacks=[Record()],
        limit_val_batches=0,
    )
    assert set(dtypes) == set(range(N_BATCHES)) and set(dtypes.values()) == {torch.bfloat16}


def test_early_stopping_and_max_steps(tmp_path):
    stop = dict(optimizer=partial(torch.optim.SGD, lr=3.0), epochs=30)
    one, t1, _ = _fit(tmp_path, 1, callbacks=[EarlyStopping("val/loss", patience=1)], **stop)
    blk, t4, _ = _fit(tmp_path, 4, callbacks=[EarlyStopping("val/loss", patience=1)], **stop)
    assert t1.current_epoch < 30 and t4.current_epoch == t1.current_epoch
    _assert_same(fit_state(one, t1), fit_state(blk, t4))
    # max_steps inside a block: the block stops there
    one, t1, _ = _fit(tmp_path, 1, max_steps=17)
    blk, t4, _ = _fit(tmp_path, 4, max_steps=17)
    assert t4.global_step == t1.global_step == 17
    _assert_same(fit_state(one, t1), fit_state(blk, t4))


@pytest.mark.parametrize(
    "setting",
    [
        {"gradient_clip_val": 0.05},
        {"accumulate_grad_batches": 2},
        {"limit_train_batches": 5},
        {"val_check_interval": 0.5},
        {"precision": "64-true"},
    ],
)
def test_settings_counting_batches_fit_per_step(tmp_path, setting):
    task, trainer, counter = _fit(tmp_path, 4, **setting)
    assert task.automatic_optimization and task.block_size() == 1
    assert trainer.datamodule.steps_per_block == 1
    assert counter.per_epoch[0] == setting.get("limit_train_batches", N_BATCHES)
    _assert_same(fit_state(*_fit(tmp_path, 1, **setting)[:2]), fit_state(task, trainer))


def test_resume_across_steps_per_block(tmp_path):
    """A checkpoint of a per-step fit resumed in blocks (and the reverse) continues
    the same fit: global_step carries over, the weights match an uninterrupted fit."""
    ref_task, ref_trainer, _ = _fit(tmp_path, 1, epochs=4)
    ref = fit_state(ref_task, ref_trainer)
    for first, then in ((1, 4), (4, 1)):
        task, trainer, _ = _fit(tmp_path, first, epochs=2)
        path = tmp_path / f"from{first}.ckpt"
        trainer.save_checkpoint(path)
        task, trainer, counter = _fit(tmp_path, then, epochs=4, ckpt_path=str(path))
        assert counter.per_epoch == [math.ceil(N_BATCHES / then)] * 2
        _assert_same(ref, fit_state(task, trainer))


def test_blocks_hold_the_same_batches():
    g = torch.Generator().manual_seed(0)
    x, y, w = torch.randn(23, 3, generator=g), torch.arange(23), torch.rand(23, generator=g)
    flat = list(
        TensorBatches(x, y, w, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))
    )
    blocks = TensorBatches(
        x, y, w, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5)
    ).blocks(4)
    assert len(blocks) == 2
    got = list(blocks)
    assert [len(b) for b in got] == [4, 2] and all(isinstance(b, BatchBlock) for b in got)
    for a, b in zip(flat, [batch for block in got for batch in block]):
        for ta, tb in zip(a, b):
            assert (ta is None and tb is None) or torch.equal(ta, tb)


def test_cli_blocks_report_the_per_step_model(tmp_path):
    """train.py: the reported model (the best validation epoch), last.ckpt, metrics and
    history are those of the per-step fit. Adam at lr 2 makes the validation loss go
    up and down, so the best epoch is not the last."""
    args = [
        "--config",
        TINY,
        "--trainer.max_epochs",
        "8",
        "--early_stopping.patience",
        "100",
        "--model.optimizer.init_args.lr",
        "2.0",
    ]
    for k in (1, 32):
        assert main([*args, "--run_dir", str(tmp_path / f"k{k}"), "--model.steps_per_block", str(k)]) == 0
    metrics = [json.loads((tmp_path / f"k{k}" / "metrics.json").read_text()) for k in (1, 32)]
    for split in ("train", "val", "test"):
        assert metrics[0][split] == metrics[1][split]
    for name in ("model.ckpt", "checkpoints/last.ckpt"):
        a, b = (torch.load(tmp_path / f"k{k}" / name, weights_only=False) for k in (1, 32))
        assert a["global_step"] == b["global_step"] and a["epoch"] == b["epoch"]
        for key in a["state_dict"]:
            assert torch.equal(a["state_dict"][key], b["state_dict"][key]), (name, key)
        assert a["torchglm"]["epoch_history"] == b["torchglm"]["epoch_history"]
    best = torch.load(tmp_path / "k32" / "model.ckpt", weights_only=False)
    assert best["epoch"] < 7  # the best epoch, not the last: ModelCheckpoint ran


@pytest.mark.slow
def test_killed_block_run_resumes_to_the_per_step_result(tmp_path):
    """Killed after the first of two blocks of epoch 3 (mid-epoch: 2 of 4 steps), the
    resumed block fit ends where an uninterrupted per-step fit ends, its plateau
    scheduler included (stepped before last.ckpt is written)."""

    plateau = [
        "--model.lr_scheduler",
        "torch.optim.lr_scheduler.ReduceLROnPlateau",
        "--model.lr_scheduler.init_args.patience",
        "0",
        "--model.optimizer.init_args.lr",
        "1.0",
    ]
    full = train_tiny(tmp_path / "full", "--model.steps_per_block", "1", *plateau)
    assert full.returncode == 0, full.stderr[-2000:]
    args = ["--model.steps_per_block", "2", *plateau]
    killed = train_tiny(
        tmp_path / "killed",
        *args,
        "--trainer.callbacks+=killer.KillMidEpoch",
        "--trainer.callbacks.epoch",
        "3",
        "--trainer.callbacks.batch",
        "0",
    )
    assert killed.returncode == -9
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["epoch"] == 2
    resumed = train_tiny(tmp_path / "killed", *args, "--resume", str(last))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ckpts = [
        json.loads((tmp_path / r / "metrics.json").read_text())["checkpoint"] for r in ("full", "killed")
    ]
    want, got = checkpoint_weights(Path(ckpts[0])), checkpoint_weights(Path(ckpts[1]))
    assert want.keys() == got.keys() and all(torch.equal(got[k], want[k]) for k in want)
    scheds = [
        torch.load(tmp_path / r / "checkpoints" / "last.ckpt", weights_only=False)["lr_schedulers"][0]
        for r in ("full", "killed")
    ]
    assert scheds[0] == scheds[1] and scheds[0]["last_epoch"] == 6


@pytest.mark.slow
def test_two_process_ddp_blocks_equal_per_step(tmp_path):
    """Under DDP each block step's backward all-reduces its gradients (manual_backward
    prepares DDP's reducer for every one), as each per-step fit's backward does."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in (1, 2):  # quickstart: 171 rows per rank in batches of 64, blocks of 2 + 1
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "train.py"),
                "--config",
                str(ROOT / "configs" / "quickstart.yaml"),
                "--run_dir",
                str(tmp_path / f"k{k}"),
                "--trainer.max_epochs",
                "4",
                "--trainer.enable_progress_bar",
                "false",
                "--model.steps_per_block",
                str(k),
                "--trainer.strategy",
                "ddp",
                "--trainer.devices",
                "2",
                "--trainer.accelerator",
                "cpu",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = (torch.load(tmp_path / f"k{k}" / "checkpoints" / "last.ckpt", weights_only=False) for k in (1, 2))
    assert a["global_step"] == b["global_step"] == 4 * 3
    assert all(torch.equal(a["state_dict"][key], b["state_dict"][key]) for key in a["state_dict"])
    assert a["optimizer_states"][0]["state"][0]["exp_avg"].equal(
        b["optimizer_states"][0]["state"][0]["exp_avg"]
    )
