"""One thin LightningModule for every torchglm model.

The task holds no math. It builds the model once the data are known
(``n_features`` comes from the data, after the optional basis map), then:

* ``solver="sgd"``: automatic optimization of ``model.objective(x, y)`` with any
  torch optimizer (closure-based ones such as LBFGS included) and an optional
  LR scheduler;
* any other solver (``newton``, ``irls``, ``gd``, ``lbfgs``, ``closed_form``, ...):
  manual optimization driving ``fitter = model.make_fitter(solver, **solver_options)``
  (:class:`torchglm.solvers.base.Fitter`): one epoch is one pass,
  ``start_pass`` -> ``accumulate(batch)`` per batch -> ``end_pass`` on the last
  batch (so validation sees the stepped parameters), taken through Lightning as
  the step of a parameter-free :class:`PassStep` optimizer; the trainer stops
  when the fitter is done.

Preprocessing travels with the checkpoint: the training split's standardization
(``feature_mean``, ``feature_scale`` buffers) and the basis ``phi``, so
:meth:`GLMTask.predict_proba` takes raw features.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, Callable, Iterable

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from torch.optim.lr_scheduler import ReduceLROnPlateau

from .._validation import ConvergenceWarning, check_positive, fail
from ..data.batches import Batch
from ..solvers.base import FitResult
from .metrics import GLMMetrics

__all__ = ["GLMTask", "PassStep"]

_CALLABLE_ARGS = ("model", "optimizer", "lr_scheduler", "basis")


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


class GLMTask(pl.LightningModule):
    """Fit a torchglm model under a Lightning ``Trainer``.

    Args:
        model: ``n_features -> nn.Module``, e.g. ``functools.partial(SoftmaxRegression,
            n_classes=3)`` or, in a config, ``class_path`` + ``init_args`` without
            ``n_features``. The module needs ``forward(x) -> eta``, ``family``,
            ``n_classes``, ``objective(x, y, weight, offset)`` (for ``sgd``),
            ``make_fitter(solver, **options)`` (other solvers) and ``mark_fitted()``.
        solver: ``"sgd"`` for mini-batch optimization with ``optimizer``; anything
            else is passed to ``model.make_fitter``.
        optimizer: ``params -> torch.optim.Optimizer`` (``sgd`` only).
        lr_scheduler: ``optimizer -> scheduler``; ``ReduceLROnPlateau`` watches ``val/loss``.
        solver_options: keyword arguments of ``model.make_fitter``.
        basis: optional fixed feature map ``phi`` (an ``nn.Module`` (n, d) -> (n, m)).
            If it has ``fit(x)``, it is called once with the standardized training
            features before the model is built; it is saved in the checkpoint and
            applied in :meth:`predict_proba`.
        train_metrics: evaluate the metrics on the whole training split after every
            epoch (one extra forward pass); otherwise only the epoch's mean
            mini-batch loss is logged for training.
        ece_bins: bins of the expected calibration error.

    Attributes:
        fit_result: the :class:`~torchglm.solvers.base.FitResult` of the last fit
            (the fitter's own, or for ``sgd`` one with the per-epoch mean loss).

    Example:
        >>> task = GLMTask(partial(LogisticRegression, l2=1e-3), solver="sgd",
        ...                optimizer=partial(torch.optim.Adam, lr=0.05))   # doctest: +SKIP
        >>> pl.Trainer(max_epochs=20).fit(task, datamodule=GLMDataModule("breast_cancer"))  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Callable[[int], nn.Module],
        solver: str = "sgd",
        optimizer: OptimizerCallable = torch.optim.Adam,
        lr_scheduler: LRSchedulerCallable | None = None,
        solver_options: dict[str, Any] | None = None,
        basis: nn.Module | None = None,
        train_metrics: bool = True,
        ece_bins: int = 15,
    ):
        super().__init__()
        with warnings.catch_warnings():
            # A basis module passed from Python is dropped just below; the notice is moot.
            warnings.filterwarnings("ignore", message=".*is an instance of `nn.Module`.*")
            self.save_hyperparameters()
        # Config values (dicts) let load_from_checkpoint rebuild the task; Python
        # objects (partials, modules) do not serialize: pass them to load_from_checkpoint.
        objects = [k for k in _CALLABLE_ARGS if not isinstance(self.hparams.get(k), (dict, str, type(None)))]
        if objects:
            self.save_hyperparameters(ignore=objects)
        self.model_factory = model
        self.solver = solver
        self.optimizer_factory = optimizer
        self.lr_scheduler_factory = lr_scheduler
        self.solver_options = dict(solver_options or {})
        self.basis = basis
        self.train_metrics_enabled = train_metrics
        self.ece_bins = ece_bins
        self.automatic_optimization = solver == "sgd"
        self.model: nn.Module | None = None
        self.fitter = None
        self._resumed_fit: dict[str, Any] | None = None
        self._resumed_fitter_state: dict[str, Any] | None = None
        # Fit time of the earlier (resumed-from) parts of this fit, and this part's start.
        self.fit_seconds_before = 0.0
        self._fit_start: float | None = None
        self.fit_result: FitResult | None = None
        self.feature_names: list[str] = []
        self.n_model_features: int | None = None  # columns of phi(x), set by build
        self.data_dtype: torch.dtype | None = None
        # Running sums of the epoch's mini-batch losses, mutated in place: assigning a
        # Module attribute every step goes through nn.Module.__setattr__.
        self._epoch_loss: dict[str, Any] = {}
        self._history: list[dict[str, float]] = []

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning sets `_current_fx_name` around every hook call (~44 times per
        # training step); a plain string needs none of nn.Module.__setattr__'s
        # parameter/buffer/submodule bookkeeping, which was the largest per-step
        # cost of the Lightning loop in bench/sgd_epoch.py's profile.
        if name == "_current_fx_name":
            self.__dict__[name] = value
        else:
            super().__setattr__(name, value)

    # -- building ---------------------------------------------------------------
    def build(self, datamodule) -> None:
        """Fit the basis, build the model and check the data against it (once).

        Raises:
            InputError: labels outside the model's classes, a single training class,
                a family that does not match the data's task, or invalid optimizer
                arguments (e.g. a non-positive learning rate).
        """
        if self.model is not None:
            return
        datamodule.setup("fit")
        x_train, _ = datamodule.split("train")
        self._add_preprocessing(datamodule.feature_mean, datamodule.feature_scale, datamodule.feature_names)
        if self.basis is not None:
            if hasattr(self.basis, "fit"):
                self.basis.fit(x_train)
            self.basis.to(x_train.dtype)
        self.n_model_features = int(self._phi(x_train[:1]).shape[-1])
        self.data_dtype = x_train.dtype
        model = self.model_factory(self.n_model_features).to(x_train.dtype)
        if model.family.is_classifier:
            datamodule.check_labels(model.n_classes)
        else:
            datamodule.check_regression()
            for split in ("train", "val", "test"):
                n = int(datamodule.split(split)[1].shape[0])
                if n < 2:
                    # R^2 divides by the split's spread of y: undefined for one row.
                    raise fail(f"data ({split} split)", "at least 2 rows for a regression model "
                               "(R^2 needs two)", f"{n} row")
        self.model = model
        self._make_metrics()
        if self.automatic_optimization:
            self._check_optimizer()
        else:
            # A pass sums over every row: the order changes only the rounding, so a
            # pass-based fit reads the rows in one fixed order, and a resumed fit's
            # first pass re-evaluates its accepted point bit for bit (a new order per
            # epoch moved the resumed iterates by an ulp).
            datamodule.shuffle = False
            # Built here, so an unknown solver or option fails before any output exists.
            try:
                self.fitter = model.make_fitter(self.solver, **self.solver_options)
            except TypeError as err:
                raise fail("solver_options", f"options of the '{self.solver}' solver", str(err)) from None

    def _add_preprocessing(self, mean: torch.Tensor, scale: torch.Tensor, names: list[str]) -> None:
        self.register_buffer("feature_mean", mean.clone())
        self.register_buffer("feature_scale", scale.clone())
        self.feature_names = list(names)

    def _make_metrics(self) -> None:
        family, k = self.model.family, getattr(self.model, "n_classes", None)
        # ModuleDict keys must not shadow nn.Module attributes ("train").
        self.metrics = nn.ModuleDict({f"{s}_split": GLMMetrics(family, k, self.ece_bins)
                                      for s in ("train", "val", "test")})
        self.metrics.to(self.feature_mean.device)

    def _check_optimizer(self) -> None:
        try:
            opt = self.optimizer_factory(self.model.parameters())
        except (ValueError, TypeError) as err:
            raise fail("optimizer", "valid optimizer arguments", str(err)) from None
        if "lr" in opt.defaults:
            lr = opt.defaults["lr"]
            check_positive("optimizer lr", float(lr))

    def configure_model(self) -> None:
        if self.model is None and self._trainer is not None and self.trainer.datamodule is not None:
            self.build(self.trainer.datamodule)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A checkpoint holds trained weights (the best epoch's is saved before
        # on_train_end marks the model fitted): loaded, it predicts.
        flag = checkpoint["state_dict"].get("model._fitted")
        if flag is not None:
            checkpoint["state_dict"]["model._fitted"] = torch.ones_like(flag)
        checkpoint["torchglm"] = {
            "n_features_in": int(self.feature_mean.shape[0]),
            "n_features": self.n_model_features,
            "feature_names": self.feature_names,
            "dtype": str(self.data_dtype).removeprefix("torch."),
        }
        checkpoint["torchglm"]["fit_seconds"] = self.fit_seconds()
        if self.fitter is not None:
            # The pass-based fit's record; the model's parameters hold its last
            # accepted point, from which a resumed fit re-evaluates and goes on
            # along the same iterates (with the solver's own memory, e.g. L-BFGS pairs).
            checkpoint["torchglm"]["fit_result"] = dataclasses.asdict(self.fitter.result)
            if hasattr(self.fitter, "state_dict"):
                checkpoint["torchglm"]["fitter_state"] = self.fitter.state_dict()
        else:
            checkpoint["torchglm"]["epoch_history"] = list(self._history)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._resumed_fit = checkpoint["torchglm"].get("fit_result")
        self._resumed_fitter_state = checkpoint["torchglm"].get("fitter_state")
        self.fit_seconds_before = float(checkpoint["torchglm"].get("fit_seconds", 0.0))
        self._history = list(checkpoint["torchglm"].get("epoch_history", []))
        if self.model is not None:
            return
        meta = checkpoint["torchglm"]
        d = meta["n_features_in"]
        dtype = self.data_dtype = getattr(torch, meta["dtype"])
        self.n_model_features = meta["n_features"]
        self._add_preprocessing(torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64),
                                meta["feature_names"])
        if self.basis is not None:
            # Fitted basis buffers (centers, widths) are restored by load_state_dict.
            self.basis.to(dtype)
        self.model = self.model_factory(meta["n_features"]).to(dtype)
        self._make_metrics()

    # -- prediction ---------------------------------------------------------------
    def _phi(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.basis is None else self.basis(x)

    def forward(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """``eta`` for standardized features ``x`` (what the data module's batches hold),
        plus the batch's ``offset`` when it has one."""
        phi = self._phi(x)
        return self.model(phi) if offset is None else self.model(phi, offset)

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the training split's standardization to raw features."""
        z = (x.to(self.feature_mean) - self.feature_mean) / self.feature_scale
        return z.to(self.data_dtype)

    @torch.no_grad()
    def predict_proba(self, x_raw: torch.Tensor) -> torch.Tensor:
        """``mu`` for raw (unstandardized) features: probabilities for classifiers."""
        return self.model.predict_proba(self._phi(self.standardize(x_raw)))

    @torch.no_grad()
    def predict(self, x_raw: torch.Tensor) -> torch.Tensor:
        """Labels (classifiers) or the mean (regression) for raw features."""
        return self.model.predict(self._phi(self.standardize(x_raw)))

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self.model.predict_proba(self._phi(batch.x))

    # -- training -----------------------------------------------------------------
    def configure_optimizers(self):
        if not self.automatic_optimization:
            # Lightning restores a resumed run's weights before this hook: a fitter
            # made here starts from them (the one made in build() saw the initial
            # weights), and continues the checkpointed fit record.
            self.fitter = self.model.make_fitter(self.solver, **self.solver_options)
            if self._resumed_fit is not None:
                self.fitter.result = FitResult(**self._resumed_fit)
                self._resumed_fit = None
            if self._resumed_fitter_state is not None and hasattr(self.fitter, "load_state_dict"):
                self.fitter.load_state_dict(self._resumed_fitter_state)
            self._resumed_fitter_state = None
            return PassStep(self.fitter)
        opt = self.optimizer_factory(self.parameters())
        if self.lr_scheduler_factory is None:
            return opt
        sched = self.lr_scheduler_factory(opt)
        if isinstance(sched, ReduceLROnPlateau):
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val/loss"}}
        return {"optimizer": opt, "lr_scheduler": sched}

    def on_train_start(self) -> None:
        self._fit_start = time.perf_counter()

    def fit_seconds(self) -> float:
        """Wall time of the fit so far, summed over the runs it was resumed across
        (each part up to its last checkpoint or its end)."""
        now = 0.0 if self._fit_start is None else time.perf_counter() - self._fit_start
        return self.fit_seconds_before + now

    def on_train_epoch_start(self) -> None:
        self._epoch_loss.update(
            sum=torch.zeros((), dtype=self.feature_mean.dtype, device=self.feature_mean.device), count=0)
        if not self.automatic_optimization:
            self.fitter.start_pass()

    def transfer_batch_to_device(self, batch: Batch, device: torch.device, dataloader_idx: int) -> Batch:
        # A Batch is a flat tuple of tensors or None: move it directly instead of
        # Lightning's generic recursive apply_to_collection (a per-step cost).
        return Batch(*(None if t is None else t.to(device, non_blocking=True) for t in batch))

    def training_step(self, batch: Batch, batch_idx: int):
        x = self._phi(batch.x)
        if not self.automatic_optimization:
            self.fitter.accumulate(Batch(x, batch.y, batch.weight, batch.offset))
            # The pass ends inside training_step (Lightning counts manual steps only
            # here) and before validation, which then sees the stepped parameters.
            if batch_idx == self.trainer.num_training_batches - 1:
                self._end_pass()
            return None
        loss = self.model.objective(x, batch.y, batch.weight, batch.offset)
        self._epoch_loss["sum"].add_(loss.detach())
        self._epoch_loss["count"] += 1
        # Log the step loss only at the logger's interval (Lightning writes step
        # metrics when (steps done + 1) % log_every_n_steps == 0): a self.log call
        # every step costs more than this model's whole step (bench/sgd_epoch.py).
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            self.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False)
        return loss

    def _end_pass(self) -> None:
        step = self.optimizers()
        step.step()
        done = step.optimizer.done
        self.fit_result = self.fitter.result
        if self.fit_result.history:
            last = self.fit_result.history[-1]
            self.log_dict({f"fit/{k}": float(v) for k, v in last.items() if _is_number(v)})
        if done:
            self.trainer.should_stop = True

    def on_train_epoch_end(self) -> None:
        if self.automatic_optimization:
            loss = self._epoch_loss["sum"] / max(self._epoch_loss["count"], 1)
            self.log("train/epoch_loss", loss)
            self._history.append({"loss": float(loss)})
        if self.train_metrics_enabled:
            self.log_dict(self.evaluate(self.trainer.datamodule.train_batches(
                batch_size=self.trainer.datamodule.eval_batch_size, shuffle=False), "train"))

    def on_train_end(self) -> None:
        self.fit_seconds_before, self._fit_start = self.fit_seconds(), None
        self.model.mark_fitted()
        if not self.automatic_optimization and not self.fitter.done:
            # Never hide non-convergence: the trainer (max_epochs, early stopping)
            # ended the fit before the solver's stopping rule held.
            self.fit_result = self.fitter.result
            self.fit_result.converged = False
            self.fit_result.message = (f"stopped by the trainer after {self.current_epoch} passes, before "
                                       f"the '{self.solver}' solver's stopping rule held")
            warnings.warn(self.fit_result.message, ConvergenceWarning, stacklevel=2)
        if self.automatic_optimization:
            self.fit_result = FitResult(
                solver=f"sgd ({type(self.trainer.optimizers[0]).__name__})",
                converged=False,
                n_iter=len(self._history),
                history=self._history,
                message="mini-batch optimization: stopped by the trainer (max_epochs or early stopping)",
            )

    # -- evaluation -----------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, batches: Iterable[Batch], split: str = "train") -> dict[str, float]:
        """Metrics of the current model over ``batches`` (standardized features), as
        ``{"<split>/<metric>": value}``; uses the split's metric objects."""
        metrics = self.metrics[f"{split}_split"]
        metrics.reset()
        for batch in batches:
            batch = self.transfer_batch_to_device(batch, self.device, 0)
            metrics.update(self(batch.x, batch.offset), batch.y, batch.weight)
        out = {f"{split}/{k}": float(v) for k, v in metrics.compute().items()}
        metrics.reset()
        return out

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.metrics["val_split"].update(self(batch.x, batch.offset), batch.y, batch.weight)

    def on_validation_epoch_end(self) -> None:
        self._log_split("val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.metrics["test_split"].update(self(batch.x, batch.offset), batch.y, batch.weight)

    def on_test_epoch_end(self) -> None:
        self._log_split("test")

    def _log_split(self, split: str) -> None:
        values = self.metrics[f"{split}_split"].compute()
        self.log_dict({f"{split}/{k}": v for k, v in values.items()})
        self.metrics[f"{split}_split"].reset()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) or (torch.is_tensor(v) and v.numel() == 1)
