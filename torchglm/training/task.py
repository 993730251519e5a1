"""One thin LightningModule for every torchglm model.

The task holds no math. It builds the model once the data are known
(``n_features`` comes from the data, after the optional basis map) and hands
the fitting to a driver chosen once from the solver name (:func:`driver_for`):

* ``solver="sgd"``: :class:`~.sgd_driver.SGDDriver`, mini-batch optimization of
  ``model.objective(x, y)`` with any torch optimizer and an optional LR scheduler,
  ``steps_per_block`` optimizer steps per Lightning step (see :class:`GLMTask`;
  the blocks are :mod:`.sgd_blocks`, their CUDA graphs :mod:`.graphs`);
* any other solver (``newton``, ``irls``, ``gd``, ``lbfgs``, ``closed_form``, ...):
  :class:`~.pass_driver.PassDriver`, one epoch is one pass of
  ``model.make_fitter(solver, **solver_options)``; the trainer stops when the
  fitter is done.

Preprocessing travels with the checkpoint: the training split's standardization
(``feature_mean``, ``feature_scale`` buffers) and the basis ``phi``, so
:meth:`GLMTask.predict_proba` takes raw features.
"""

from __future__ import annotations

import io
import time
import warnings
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from pytorch_lightning.trainer.states import TrainerFn
from torch import nn

from .._validation import fail
from ..data.batches import Batch, BatchBlock
from ..passes import FitResult
from ._lightning_private import CheapFxName, attached_trainer
from .checkpoints import DTYPES, checkpoint_bytes, plain, read_checkpoint
from .data_module import GLMDataModule
from .driver import Driver
from .features import standardize
from .metrics import GLMMetrics
from .pass_driver import PassDriver
from .sgd_driver import SGDDriver

__all__ = ["DRIVERS", "GLMTask", "driver_for"]

_CALLABLE_ARGS = ("model", "optimizer", "lr_scheduler", "basis")

#: Drivers by solver name; every other name is a pass-based solver's (the model's
#: ``make_fitter`` checks it). The one place a solver name chooses how a fit runs.
DRIVERS: dict[str, type[Driver]] = {"sgd": SGDDriver}


def driver_for(solver: str) -> type[Driver]:
    """The driver class of ``solver``: :data:`DRIVERS`' entry, else :class:`PassDriver`."""
    return DRIVERS.get(solver, PassDriver)


class GLMTask(CheapFxName, pl.LightningModule):
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
        steps_per_block: ``sgd``: optimizer steps per Lightning training step. With
            ``k > 1`` the data module's training dataloader yields blocks of ``k``
            mini-batches (the same batches in the same order) and ``training_step``
            takes their ``k`` optimizer steps (manual optimization): the same
            weights, optimizer and scheduler states, epoch loss, logged step losses
            (at their own steps) and checkpoints as ``k = 1`` (one Lightning step per
            mini-batch, automatic optimization), bit for bit, at ``1/k`` of
            Lightning's per-step cost (``bench/sgd_epoch.py``). Counts of Lightning
            batches then count blocks: the progress bar, callbacks'
            ``on_train_batch_*`` hooks, ``trainer.num_training_batches``. Blocks are
            used only where they are exactly equivalent: with ``gradient_clip_val``,
            ``accumulate_grad_batches``, ``limit_train_batches``,
            ``val_check_interval`` (a fraction or a count), ``overfit_batches`` or
            ``fast_dev_run`` (settings counted in mini-batches), or a precision
            other than ``32-true`` and ``*-mixed``, the fit takes one mini-batch per
            Lightning step.
        lr_scheduler_interval: step the scheduler after every ``"epoch"`` or after
            every optimizer ``"step"`` (e.g. ``OneCycleLR``); ``ReduceLROnPlateau``
            needs ``"epoch"`` (it watches ``val/loss``).
        cuda_graphs: ``sgd`` in step blocks on a CUDA device: record the optimizer
            steps of one block as a CUDA graph and replay it for every full block
            (:mod:`torchglm.training.graphs`): one launch per block instead of a few
            dozen kernels and an autograd pass per step, the same kernels in the
            same order. Needs what recording needs: the training data kept on the
            device (the data module does so when they fit in half its free memory),
            shuffled batches, ``32-true`` precision (float64 data included) on one device, no
            callback or override of the step hooks, no per-step scheduler, and an
            optimizer whose step can be recorded (``SGD``, or one built with
            ``capturable=True``/``fused=True`` such as ``Adam``); otherwise the fit
            runs uncaptured and says why (one warning). The first full block runs
            uncaptured (it creates the optimizer's state); an epoch's last, shorter
            block always does. A per-epoch scheduler's new learning rate records the
            block again.

    Attributes:
        fit_result: the :class:`~torchglm.passes.FitResult` of the last fit
            (the fitter's own, or for ``sgd`` one with the per-epoch mean loss).

    Example:
        >>> from functools import partial
        >>> task = GLMTask(partial(LogisticRegression, l2=1e-3), solver="sgd",
        ...                optimizer=partial(torch.optim.Adam, lr=0.05))
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
        steps_per_block: int = 32,
        lr_scheduler_interval: Literal["epoch", "step"] = "epoch",
        cuda_graphs: bool = False,
    ):
        super().__init__()
        if isinstance(steps_per_block, bool) or not isinstance(steps_per_block, int) or steps_per_block < 1:
            raise fail("steps_per_block", "an integer >= 1", repr(steps_per_block))
        if lr_scheduler_interval not in ("epoch", "step"):
            raise fail("lr_scheduler_interval", "'epoch' or 'step'", repr(lr_scheduler_interval))
        if not isinstance(cuda_graphs, bool):
            raise fail("cuda_graphs", "true or false", repr(cuda_graphs))
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
        self.steps_per_block = steps_per_block
        self.lr_scheduler_interval = lr_scheduler_interval
        self.cuda_graphs = cuda_graphs
        #: how the training steps fit the model (chosen once, from the solver name).
        self.driver: Driver = driver_for(solver)(self)
        # Whether the data module gathers batches where the model is (setup).
        self.data_resident = False
        self.model: nn.Module | None = None
        #: What --resume compares (train.py sets it: the config and data the fit
        #: depends on); saved in every checkpoint as plain data.
        self.fingerprint: dict[str, Any] | None = None
        # Fit time of the earlier (resumed-from) parts of this fit, and this part's start.
        self.fit_seconds_before = 0.0
        self._fit_start: float | None = None
        self.fit_result: FitResult | None = None
        self.feature_names: list[str] = []
        self.n_model_features: int | None = None  # columns of phi(x), set by build
        self.data_dtype: torch.dtype | None = None

    @property
    def automatic_optimization(self) -> bool:
        """Lightning's automatic optimization: ``sgd`` one mini-batch per Lightning
        step; manual for ``sgd`` in step blocks and for the pass-based solvers."""
        return self.driver.automatic_optimization

    def block_size(self) -> int:
        """Optimizer steps per Lightning training step in this fit: ``steps_per_block``
        for ``sgd`` under a trainer whose settings count no mini-batches (see the
        class docstring), otherwise 1."""
        return self.driver.block_size()

    @property
    def fitter(self):
        """The pass-based fit's :class:`~torchglm.passes.Fitter` (``None`` for ``sgd``)."""
        return self.driver.fitter

    #: ``() -> GraphBackend`` for :class:`~torchglm.training.graphs.BlockGraph`;
    #: ``None``: a CUDA graph (on CUDA devices only). Tests set a CPU recorder.
    graph_backend = None

    # -- building ---------------------------------------------------------------
    def build(self, datamodule) -> None:
        """Fit the basis, build the model and check the data and the fit's settings
        against it (once).

        Raises:
            InputError: labels outside the model's classes, a single training class,
                a family that does not match the data's task, an unknown solver or
                solver option, or invalid optimizer arguments (e.g. a non-positive
                learning rate).
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
        self.n_model_features = int(self.phi(x_train[:1]).shape[-1])
        self.data_dtype = x_train.dtype
        model = self.model_factory(self.n_model_features).to(x_train.dtype)
        datamodule.check_targets(model.family, model.n_classes)
        if not model.family.is_classifier:
            for split in ("train", "val", "test"):
                n = int(datamodule.split(split)[1].shape[0])
                if n < 2:
                    # R^2 divides by the split's spread of y: undefined for one row.
                    raise fail(
                        f"data ({split} split)",
                        "at least 2 rows for a regression model (R^2 needs two)",
                        f"{n} row",
                    )
        self.model = model
        self._make_metrics()
        self.driver.prepare(datamodule, model)

    def _add_preprocessing(self, mean: torch.Tensor, scale: torch.Tensor, names: list[str]) -> None:
        self.register_buffer("feature_mean", mean.clone())
        self.register_buffer("feature_scale", scale.clone())
        self.feature_names = list(names)

    def _make_metrics(self) -> None:
        family, k = self.model.family, getattr(self.model, "n_classes", None)
        # ModuleDict keys must not shadow nn.Module attributes ("train").
        self.metrics = nn.ModuleDict(
            {f"{s}_split": GLMMetrics(family, k, self.ece_bins) for s in ("train", "val", "test")}
        )
        self.metrics.to(self.feature_mean.device)

    def setup(self, stage: str) -> None:
        # Tell the data module how many batches one training step takes (after
        # Lightning has checked the configuration against automatic_optimization).
        datamodule = self.trainer.datamodule
        if stage == "fit" and isinstance(datamodule, GLMDataModule):
            datamodule.steps_per_block = self.block_size()
            # The training data stay on the device for the fit when they fit there:
            # each step gathers its rows on the device, no host-to-device copy.
            self.data_resident = datamodule.keep_on(self.trainer.strategy.root_device)

    def configure_model(self) -> None:
        if self.model is None and attached_trainer(self) is not None and self.trainer.datamodule is not None:
            self.build(self.trainer.datamodule)

    # -- checkpoints ----------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A checkpoint saved after a training step holds trained weights (the best
        # epoch's is saved before on_train_end marks the model fitted): loaded, it
        # predicts. One saved before any step (a fit that never trained) holds the
        # initial weights and stays unfitted: loaded, it refuses to predict.
        trainer = attached_trainer(self)
        flag = checkpoint["state_dict"].get("model._fitted")
        if flag is not None and trainer is not None and trainer.global_step > 0:
            checkpoint["state_dict"]["model._fitted"] = torch.ones_like(flag)
        record = {
            "n_features_in": int(self.feature_mean.shape[0]),
            "n_features": self.n_model_features,
            "feature_names": self.feature_names,
            "dtype": str(self.data_dtype).removeprefix("torch."),
            "fit_seconds": self.fit_seconds(),
        }
        if self.fingerprint is not None:
            record["fingerprint"] = self.fingerprint
        if trainer is not None:
            # Whether the fit had ended before max_epochs (the solver's stopping rule
            # or early stopping): Lightning does not checkpoint should_stop, and a
            # resumed fit that had ended must not take another epoch.
            record["stopped"] = bool(trainer.should_stop)
        self.driver.save(record)
        # Plain data only, so that the checkpoint loads with weights_only=True (a
        # pickled object could run code when loaded): the fit record's dataclasses
        # become dicts, NumPy numbers Python numbers; hyper-parameters given from
        # Python (solver_options) likewise.
        checkpoint["torchglm"] = plain(record, "torchglm")
        key = self.CHECKPOINT_HYPER_PARAMS_KEY
        if key in checkpoint:
            checkpoint[key] = plain(checkpoint[key], key)

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Path | IO[bytes],
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        weights_only: bool = True,
        **kwargs: Any,
    ) -> "GLMTask":
        """The task of a ``train.py`` checkpoint (or one saved by a ``Trainer``), rebuilt
        without running code from the file.

        Lightning's ``load_from_checkpoint`` after :func:`~.checkpoints.read_checkpoint`
        has checked the same bytes: read with ``weights_only=True`` (no pickled
        objects) and hyper-parameters that name only torchglm's classes or classes
        already imported (:func:`~.checkpoints.check_hyper_parameters`). Arguments
        given here (``model=partial(...)`` for a task built from Python objects)
        replace the saved ones, as in Lightning.

        Args:
            checkpoint_path: the checkpoint file (or an open binary file).
            map_location, strict, kwargs: as in Lightning.
            hparams_file: must be ``None``: the checkpoint's own hyper-parameters are
                used (a YAML file of them could name any class).
            weights_only: must be ``True``: a torchglm checkpoint is tensors and plain
                data, and loading one never unpickles Python objects.

        Raises:
            InputError: an unreadable file, one that holds pickled objects or names
                classes loading it would import, or ``weights_only``/``hparams_file``
                asking for either.
        """
        if weights_only is not True:
            raise fail(
                "weights_only",
                "True (a torchglm checkpoint is tensors and plain data; loading one never runs code)",
                repr(weights_only),
            )
        if hparams_file is not None:
            raise fail(
                "hparams_file", "None (the checkpoint's own hyper-parameters are used)", repr(hparams_file)
            )
        if isinstance(checkpoint_path, (str, Path)):
            path, data = checkpoint_path, checkpoint_bytes(checkpoint_path, "checkpoint_path")
        else:
            path, data = "<file object>", checkpoint_path.read()
        read_checkpoint(data, path, "checkpoint_path")
        # The checked bytes, not the file again: what was checked is what is loaded.
        return super().load_from_checkpoint(
            io.BytesIO(data), map_location=map_location, strict=strict, weights_only=True, **kwargs
        )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpoint["torchglm"]
        self.driver.load(checkpoint)
        self.fit_seconds_before = float(meta.get("fit_seconds", 0.0))
        trainer = attached_trainer(self)
        if meta.get("stopped") and trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            trainer.should_stop = True
        if self.model is not None:
            return
        d = meta["n_features_in"]
        dtype = self.data_dtype = DTYPES[meta["dtype"]]
        self.n_model_features = meta["n_features"]
        self._add_preprocessing(
            torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64), meta["feature_names"]
        )
        if self.basis is not None:
            # Fitted basis buffers (centers, widths) are restored by load_state_dict.
            self.basis.to(dtype)
        self.model = self.model_factory(meta["n_features"]).to(dtype)
        self._make_metrics()

    # -- prediction ---------------------------------------------------------------
    def phi(self, x: torch.Tensor) -> torch.Tensor:
        """The model's inputs for standardized features: the basis ``phi(x)``, or ``x``
        without one (:mod:`.features`)."""
        return x if self.basis is None else self.basis(x)

    def forward(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """``eta`` for standardized features ``x`` (what the data module's batches hold),
        plus the batch's ``offset`` when it has one."""
        phi = self.phi(x)
        return self.model(phi) if offset is None else self.model(phi, offset)

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the training split's standardization to raw features."""
        return standardize(x, self.feature_mean, self.feature_scale, self.data_dtype)

    @torch.no_grad()
    def predict_proba(self, x_raw: torch.Tensor) -> torch.Tensor:
        """``mu`` for raw (unstandardized) features: probabilities for classifiers."""
        return self.model.predict_proba(self.phi(self.standardize(x_raw)))

    @torch.no_grad()
    def predict(self, x_raw: torch.Tensor) -> torch.Tensor:
        """Labels (classifiers) or the mean (regression) for raw features."""
        return self.model.predict(self.phi(self.standardize(x_raw)))

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self.model.predict_proba(self.phi(batch.x))

    # -- training (delegated to the driver) ---------------------------------------
    def configure_optimizers(self):
        return self.driver.configure_optimizers()

    def on_train_start(self) -> None:
        self._fit_start = time.perf_counter()
        self.driver.on_train_start()

    def fit_seconds(self) -> float:
        """Wall time of the fit so far, summed over the runs it was resumed across
        (each part up to its last checkpoint or its end)."""
        now = 0.0 if self._fit_start is None else time.perf_counter() - self._fit_start
        return self.fit_seconds_before + now

    def on_train_epoch_start(self) -> None:
        self.driver.on_train_epoch_start()

    def transfer_batch_to_device(
        self, batch: Batch | BatchBlock, device: torch.device, dataloader_idx: int
    ) -> Batch | BatchBlock:
        # A Batch is a flat tuple of tensors or None: move it directly instead of
        # Lightning's generic recursive apply_to_collection (a per-step cost); a
        # block moves each batch as its step reaches it. A plain tuple (x, y, ...)
        # becomes a Batch.
        if not isinstance(batch, (Batch, BatchBlock)):
            batch = Batch(*batch)
        return batch.to(device, non_blocking=True)

    def training_step(self, batch: Batch | BatchBlock, batch_idx: int):
        return self.driver.training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        self.driver.on_train_epoch_end()
        if self.train_metrics_enabled:
            dm = self.trainer.datamodule
            self.log_dict(
                self.evaluate(dm.train_batches(batch_size=dm.eval_batch_size, shuffle=False), "train")
            )
        self.driver.after_train_metrics()

    def on_train_end(self) -> None:
        self.fit_seconds_before, self._fit_start = self.fit_seconds(), None
        self._conclude(self.driver.on_train_end())

    def on_fit_end(self) -> None:
        if self.fit_result is None and self.trainer.global_step > 0:
            # A resumed fit that had ended (max_epochs reached, the solver's stopping
            # rule, early stopping; or killed while its result was being validated):
            # Lightning ran no epoch and no on_train_end. Its result is the
            # checkpointed record, concluded as that run's on_train_end did. (A fit
            # that never trained, global_step 0, stays unfitted: nothing to report.)
            self._conclude(self.driver.resumed_done)

    def _conclude(self, done: bool) -> None:
        """Mark the model fitted and set :attr:`fit_result` (``done``: the pass-based
        solver met its own stopping rule)."""
        self.model.mark_fitted()
        self.fit_result = self.driver.conclude(done)

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
