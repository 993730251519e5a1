"""The Lightning task: SGD/LBFGS under the Trainer vs scikit-learn, the pass-based
fitter path, metrics vs scikit-learn, checkpoints, basis and callbacks."""

import warnings
from functools import partial

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from torchglm import InputError, LogisticRegression, SoftmaxRegression
from torchglm.passes import FitResult, Fitter, run_passes
from torchglm.training import GLMDataModule, GLMMetrics, GLMTask
from run_util import quiet_trainer


pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _trainer(tmp_path=None, **kw):
    kw = {"max_epochs": 10, **kw}
    if tmp_path is not None:
        kw["default_root_dir"] = str(tmp_path)
    return quiet_trainer(**kw)


def _sklearn_reference(dm, l2):
    from sklearn.linear_model import LogisticRegression as SkLR
    from sklearn.metrics import accuracy_score, log_loss

    (xt, yt), (xs, ys) = dm.split("train"), dm.split("test")
    # objective convention: mean NLL + l2/2 ||w||^2  <=>  sklearn C = 1 / (l2 n)
    sk = SkLR(C=1.0 / (l2 * xt.shape[0]), tol=1e-10, max_iter=10_000).fit(xt.numpy(), yt.numpy())
    p = sk.predict_proba(xs.numpy())[:, 1]
    return accuracy_score(ys.numpy(), p > 0.5), log_loss(ys.numpy(), p), sk


@pytest.mark.parametrize(
    "optimizer, batch_size, epochs, tight",
    [
        (
            partial(
                torch.optim.LBFGS,
                lr=1.0,
                max_iter=100,
                line_search_fn="strong_wolfe",
                tolerance_grad=1e-10,
                tolerance_change=1e-14,
            ),
            None,
            3,
            True,
        ),
        (partial(torch.optim.Adam, lr=0.02), 32, 60, False),
    ],
)
def test_breast_cancer_matches_sklearn(optimizer, batch_size, epochs, tight):
    l2 = 1e-2
    dm = GLMDataModule("breast_cancer", batch_size=batch_size, split_seed=0, shuffle_seed=0)
    pl.seed_everything(0, verbose=False)
    task = GLMTask(partial(LogisticRegression, l2=l2), solver="sgd", optimizer=optimizer, train_metrics=False)
    trainer = _trainer(max_epochs=epochs)
    trainer.fit(task, datamodule=dm)
    test = trainer.test(task, datamodule=dm, verbose=False)[0]
    acc, ll, sk = _sklearn_reference(dm, l2)
    assert abs(test["test/accuracy"] - acc) <= 0.01
    assert abs(test["test/nll"] - ll) <= 0.05 * ll
    if tight:  # full-batch L-BFGS reaches the same optimum as sklearn's lbfgs
        np.testing.assert_allclose(task.model.linear.weight.detach().numpy()[0], sk.coef_[0], atol=2e-4)
        assert task.model.is_fitted


class _GradientDescent(Fitter):
    """Fixed-step full-gradient descent as sums over batches (a test double of the
    solvers' Fitter contract): step ``w -= lr * sum_i grad_i / n``."""

    def __init__(self, model, lr=1.0, tol=1e-6, max_iter=200):
        self.lr, self.tol, self.max_iter = lr, tol, max_iter
        self.restart_from(model)

    def begin(self):
        self.result = FitResult(solver="test_gd")

    def start_pass(self):
        self.grads = [torch.zeros_like(p) for p in self.model.parameters()]
        self.n = 0
        self.loss = 0.0

    def accumulate(self, batch):
        self.model.zero_grad()
        nll = self.model.family.nll(self.model(batch.x), batch.y).sum()
        nll.backward()
        for g, p in zip(self.grads, self.model.parameters()):
            g += p.grad
        self.n += batch.x.shape[0]
        self.loss += float(nll.detach())

    def end_pass(self):
        with torch.no_grad():
            norm = torch.sqrt(sum((g / self.n).pow(2).sum() for g in self.grads))
            for g, p in zip(self.grads, self.model.parameters()):
                p -= self.lr * g / self.n
        self.result.n_iter += 1
        self.result.history.append({"loss": self.loss / self.n, "grad_norm": float(norm)})
        self.done = float(norm) < self.tol or self.result.n_iter >= self.max_iter
        self.result.converged = float(norm) < self.tol
        return self.done


class _GDLogistic(LogisticRegression):
    def make_fitter(self, solver="auto", **options):
        assert solver == "test_gd"
        return _GradientDescent(self, **options)


class _RecordingCallback(pl.Callback):
    def on_fit_end(self, trainer, pl_module):
        self.n_train_rows = sum(b.x.shape[0] for b in trainer.datamodule.train_batches())
        self.result = pl_module.fit_result


def test_fitter_path_equals_plain_passes():
    dm = GLMDataModule("breast_cancer", batch_size=100)
    task = GLMTask(_GDLogistic, solver="test_gd", solver_options={"lr": 1.0, "max_iter": 25})
    cb = _RecordingCallback()
    trainer = _trainer(max_epochs=100, callbacks=[cb])
    trainer.fit(task, datamodule=dm)
    # the trainer stopped when the fitter said done (max_iter passes), not at max_epochs
    assert trainer.current_epoch == 25
    ref = _GDLogistic(30)
    result = run_passes(_GradientDescent(ref, lr=1.0, max_iter=25), dm.train_batches(shuffle=False), 100)
    torch.testing.assert_close(task.model.linear.weight, ref.linear.weight, rtol=1e-12, atol=1e-14)
    assert cb.result is task.fit_result and cb.result.n_iter == 25
    assert [h["loss"] for h in cb.result.history] == pytest.approx(
        [h["loss"] for h in result.history], rel=1e-12
    )
    assert cb.n_train_rows == dm.summary()["n_train"]
    assert task.model.is_fitted
    # validation ran on the stepped parameters: its loss equals an independent evaluation
    val = trainer.validate(task, datamodule=dm, verbose=False)[0]
    xv, yv = dm.split("val")
    with torch.no_grad():
        ref_val = float(ref.family.nll(ref(xv), yv).mean())
    assert val["val/loss"] == pytest.approx(ref_val, rel=1e-10)


def test_fitter_history_is_logged(tmp_path):
    from pytorch_lightning.loggers import CSVLogger

    dm = GLMDataModule("breast_cancer", batch_size=None)
    task = GLMTask(_GDLogistic, solver="test_gd", solver_options={"max_iter": 4})
    trainer = _trainer(max_epochs=10, logger=CSVLogger(tmp_path, name="", version=""), log_every_n_steps=1)
    trainer.fit(task, datamodule=dm)
    logged = trainer.logged_metrics
    assert float(logged["fit/grad_norm"]) == pytest.approx(task.fit_result.history[-1]["grad_norm"], rel=1e-6)
    assert "train/accuracy" in logged and "val/auroc" in logged


@pytest.mark.parametrize("multiclass", [False, True])
def test_metrics_match_sklearn(multiclass):
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

    g = torch.Generator().manual_seed(0)
    n, k = 400, (4 if multiclass else 2)
    if multiclass:
        model = SoftmaxRegression(3, k)
    else:
        model = LogisticRegression(3)
    torch.nn.init.normal_(model.linear.weight, generator=g)
    x = torch.randn(n, 3, generator=g)
    with torch.no_grad():
        eta = model(x)
        mu = model.family.mean(eta)
    y = torch.multinomial(mu if multiclass else torch.stack([1 - mu, mu], 1), 1, generator=g).squeeze(1)
    metrics = GLMMetrics(model.family, k, ece_bins=10)
    for chunk in torch.arange(n).split(64):  # batch-wise accumulation
        metrics.update(eta[chunk], y[chunk])
    out = {name: float(v) for name, v in metrics.compute().items()}
    p = mu.numpy()
    proba = p if multiclass else np.column_stack([1 - p, p])
    assert out["accuracy"] == pytest.approx(accuracy_score(y, proba.argmax(1)), abs=1e-6)
    assert out["nll"] == pytest.approx(log_loss(y, proba, labels=range(k)), rel=1e-6)
    assert out["loss"] == out["nll"]
    auc = roc_auc_score(y, proba, multi_class="ovr", average="macro") if multiclass else roc_auc_score(y, p)
    assert out["auroc"] == pytest.approx(auc, abs=1e-6)
    # expected calibration error from its definition: sum_b |B|/n |acc_b - conf_b| over 10 equal bins
    conf = proba.max(1) if multiclass else p
    hit = (proba.argmax(1) == y.numpy()) if multiclass else y.numpy()
    bins = np.clip(np.ceil(conf * 10) - 1, 0, 9)
    ece = sum(
        np.mean(bins == b) * abs(hit[bins == b].mean() - conf[bins == b].mean())
        for b in range(10)
        if np.any(bins == b)
    )
    assert out["ece"] == pytest.approx(ece, abs=1e-6)


@pytest.mark.parametrize("levels", [None, 7])
def test_the_rank_auroc_is_scikit_learns_roc_auc_exactly(levels):
    """The binary AUROC as the Mann-Whitney statistic: scikit-learn's value (ties, when
    the scores take few values, counting one half) to rounding, by batches; 0 for one
    class (as torchmetrics reports), NaN for a NaN score."""
    from sklearn.metrics import roc_auc_score

    from torchglm.training.metrics import RankAUROC

    rng = np.random.default_rng(3)
    p = rng.random(150_000).astype(np.float32)
    if levels:
        p = (np.round(p * levels) / levels).astype(np.float32)
    y = (rng.random(len(p)) < p).astype(np.int64)
    metric = RankAUROC()
    for i in range(0, len(p), 8192):
        metric.update(torch.from_numpy(p[i : i + 8192]), torch.from_numpy(y[i : i + 8192]))
    assert float(metric.compute()) == pytest.approx(roc_auc_score(y, p), rel=1e-14)
    one = RankAUROC()
    one.update(torch.tensor([0.2, 0.9]), torch.tensor([1, 1]))
    assert float(one.compute()) == 0.0
    nan = RankAUROC()
    nan.update(torch.tensor([0.2, float("nan"), 0.4]), torch.tensor([1, 0, 0]))
    assert np.isnan(float(nan.compute()))
    half = RankAUROC()  # a bf16-mixed run's scores
    half.update(torch.from_numpy(p[:5000]).to(torch.bfloat16), torch.from_numpy(y[:5000]))
    low = torch.from_numpy(p[:5000]).to(torch.bfloat16).float().numpy()
    assert float(half.compute()) == pytest.approx(roc_auc_score(y[:5000], low), rel=1e-14)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_checkpoint_round_trip_predicts_raw_features(tmp_path, dtype):
    from sklearn.datasets import load_wine

    dm = GLMDataModule("wine", batch_size=16, dtype=dtype)
    factory = partial(SoftmaxRegression, n_classes=3, l2=1e-3)
    task = GLMTask(factory, optimizer=partial(torch.optim.Adam, lr=0.05))
    trainer = _trainer(tmp_path, max_epochs=5)
    trainer.fit(task, datamodule=dm)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = GLMTask.load_from_checkpoint(path, model=factory)
    assert loaded.model.linear.weight.dtype == getattr(torch, dtype)
    raw = torch.as_tensor(load_wine().data)
    expected = task.model.predict_proba(dm.transform(raw))
    torch.testing.assert_close(loaded.predict_proba(raw), expected, rtol=0, atol=0)
    assert torch.equal(loaded.predict(raw), expected.argmax(1))
    assert loaded.model.is_fitted


def test_basis_is_fitted_used_and_saved(tmp_path):
    from torchglm.basis import GaussianRBF

    dm = GLMDataModule("xor", batch_size=None, dataset_options={"n_samples": 400})
    basis = GaussianRBF(n_centers=8, seed=0)
    task = GLMTask(
        partial(LogisticRegression, l2=1e-4),
        optimizer=partial(torch.optim.LBFGS, lr=1.0, max_iter=50, line_search_fn="strong_wolfe"),
        basis=basis,
    )
    trainer = _trainer(tmp_path, max_epochs=3)
    trainer.fit(task, datamodule=dm)
    assert task.model.n_features == basis.out_features(2)
    acc = trainer.test(task, datamodule=dm, verbose=False)[0]["test/accuracy"]
    assert acc > 0.9  # a linear model on raw XOR features is at chance (tests/data/test_data.py)
    path = tmp_path / "b.ckpt"
    trainer.save_checkpoint(path)
    loaded = GLMTask.load_from_checkpoint(
        path, model=partial(LogisticRegression, l2=1e-4), basis=GaussianRBF(n_centers=8, seed=0)
    )
    x = torch.randn(20, 2)
    torch.testing.assert_close(loaded.predict_proba(x), task.predict_proba(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "source, model, message",
    [
        ("iris", LogisticRegression, "n_classes: expected 3 \\(declared for the data\\), got 2"),
        (
            "diabetes",
            LogisticRegression,
            "task: expected 'classification' for a classifier, got 'regression' data",
        ),
        ("breast_cancer", partial(SoftmaxRegression, n_classes=2), None),
    ],
)
def test_model_data_mismatch(source, model, message):
    task = GLMTask(model)
    dm = GLMDataModule(source)
    if message is None:
        task.build(dm)
        assert task.model.n_features == 30
    else:
        with pytest.raises(InputError, match=message):
            task.build(dm)


@pytest.mark.parametrize(
    "optimizer, message",
    [
        (
            partial(torch.optim.SGD, lr=-0.1),
            "optimizer: expected valid optimizer arguments, got Invalid learning rate",
        ),
        (partial(torch.optim.SGD, lr=0.0), "optimizer lr: expected a positive number, got 0.0"),
        (
            partial(torch.optim.Adam, lr=0.1, betas=(2.0, 0.9)),
            "optimizer: expected valid optimizer arguments",
        ),
    ],
)
def test_bad_optimizer_arguments(optimizer, message):
    with pytest.raises(InputError, match=message):
        GLMTask(LogisticRegression, optimizer=optimizer).build(GLMDataModule("breast_cancer"))


def test_lr_scheduler_steps():
    dm = GLMDataModule("breast_cancer", batch_size=64)
    task = GLMTask(
        LogisticRegression,
        optimizer=partial(torch.optim.SGD, lr=0.5),
        lr_scheduler=partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5),
        train_metrics=False,
    )
    trainer = _trainer(max_epochs=3)
    trainer.fit(task, datamodule=dm)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5 * 0.5**3)
    assert task.fit_result.n_iter == 3 and len(task.fit_result.history) == 3


def test_huge_logits_give_finite_training():
    dm = GLMDataModule("breast_cancer", batch_size=64, standardize=False)
    task = GLMTask(LogisticRegression, optimizer=partial(torch.optim.SGD, lr=1e3), train_metrics=False)
    trainer = _trainer(max_epochs=2)
    trainer.fit(task, datamodule=dm)
    val = trainer.validate(task, datamodule=dm, verbose=False)[0]
    # raw breast_cancer features reach ~4000: |eta| ~ 1e6, yet the loss stays finite
    assert np.isfinite(val["val/loss"]) and all(torch.isfinite(p).all() for p in task.parameters())


def _solver_names():
    from torchglm.solvers import SOLVERS

    return sorted(SOLVERS)


@pytest.mark.parametrize("solver", _solver_names())
def test_every_solver_under_the_trainer_equals_solvers_fit(solver):
    """One epoch = one pass: the Trainer drives the registry's fitter to the same
    iterates as torchglm.solvers.fit on the same training split."""
    from torchglm.solvers import fit

    dm = GLMDataModule("breast_cancer", batch_size=100)
    options = {"max_iter": 15}
    task = GLMTask(
        partial(LogisticRegression, l2=1e-2), solver=solver, solver_options=options, train_metrics=False
    )
    trainer = _trainer(max_epochs=50 * 15 + 10, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a capped solver warns ConvergenceWarning in both paths
        trainer.fit(task, datamodule=dm)
        ref = LogisticRegression(30, l2=1e-2)
        x, y = dm.split("train")
        result = fit(ref, x, y, solver=solver, batch_size=100, polish=False, **options)
    assert task.fit_result.n_iter == result.n_iter
    assert task.fit_result.converged == result.converged
    torch.testing.assert_close(task.model.linear.weight, ref.linear.weight, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(task.model.linear.bias, ref.linear.bias, rtol=1e-9, atol=1e-10)


def test_unknown_solver_and_options_fail_at_build():
    with pytest.raises(InputError, match="solver: expected one of"):
        GLMTask(LogisticRegression, solver="bogus").build(GLMDataModule("breast_cancer"))
    with pytest.raises(InputError, match="solver_options: expected options of the 'newton' solver"):
        GLMTask(LogisticRegression, solver="newton", solver_options={"bogus": 1}).build(
            GLMDataModule("breast_cancer")
        )
