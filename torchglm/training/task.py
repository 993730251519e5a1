"""One thin LightningModule for every torchglm model.

The task holds no math. It builds the model once the data are known
(``n_features`` comes from the data, after the optional basis map), then:

* ``solver="sgd"``: mini-batch optimization of ``model.objective(x, y)`` with any
  torch optimizer (closure-based ones such as LBFGS included) and an optional
  LR scheduler, ``steps_per_block`` optimizer steps per Lightning step (see
  :class:`GLMTask`): one step per batch under Lightning's automatic optimization
  (``steps_per_block=1``), or blocks of batches stepped inside ``training_step``
  (manual optimization) with the same weights, bit for bit, at a fraction of
  Lightning's per-step cost;
* any other solver (``newton``, ``irls``, ``gd``, ``lbfgs``, ``closed_form``, ...):
  manual optimization driving ``fitter = model.make_fitter(solver, **solver_options)``
  (:class:`torchglm.passes.Fitter`): one epoch is one pass,
  ``start_pass`` -> ``accumulate(batch)`` per batch -> ``end_pass`` on the last
  batch (so validation sees the stepped parameters), taken through Lightning as
  the step of a parameter-free :class:`PassStep` optimizer; the trainer stops
  when the fitter is done.

Preprocessing travels with the checkpoint: the training split's standardization
(``feature_mean``, ``feature_scale`` buffers) and the basis ``phi``, so
:meth:`GLMTask.predict_proba` takes raw features.
"""

from __future__ import annotations

import io
import time
import warnings
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.strategies import SingleDeviceStrategy
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import MisconfigurationException
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch import nn
from torch.optim.lr_scheduler import ReduceLROnPlateau

from .._validation import ConvergenceWarning, PerformanceWarning, check_positive, fail, warn
from ..data.batches import Batch, BatchBlock
from ..passes import FitResult
from .checkpoints import DTYPES, checkpoint_bytes, plain, read_checkpoint
from .data_module import GLMDataModule
from .features import standardize
from .graphs import BlockGraph, capturable_optimizer, optimizer_key, side_stream
from .metrics import GLMMetrics

__all__ = ["GLMTask", "PassStep"]

_CALLABLE_ARGS = ("model", "optimizer", "lr_scheduler", "basis")

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
        # Whether a block's steps may skip Lightning's hook dispatch (on_train_start).
        self._plain_steps = False
        # Whether the data module gathers batches where the model is (setup), and the
        # recorded block of cuda_graphs (on_train_start; None: blocks run eagerly).
        self._resident = False
        self._graph: BlockGraph | None = None
        self._graph_warm = False
        self.model: nn.Module | None = None
        self.fitter = None
        self._resumed_fit: dict[str, Any] | None = None
        self._resumed_fitter_state: dict[str, Any] | None = None
        # Whether the resumed fit's solver had met its stopping rule (fitter.done).
        self._resumed_done = False
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
        # Running sums of the epoch's mini-batch losses and the epoch's optimizer
        # steps, mutated in place: assigning a Module attribute every step goes
        # through nn.Module.__setattr__.
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

    @property
    def automatic_optimization(self) -> bool:
        """Lightning's automatic optimization: ``sgd`` one mini-batch per Lightning
        step; manual for ``sgd`` in step blocks and for the pass-based solvers."""
        return self.solver == "sgd" and self.block_size() == 1

    def block_size(self) -> int:
        """Optimizer steps per Lightning training step in this fit: ``steps_per_block``
        for ``sgd`` under a trainer whose settings count no mini-batches (see the
        class docstring), otherwise 1."""
        trainer = self._trainer
        if self.solver != "sgd" or self.steps_per_block == 1 or trainer is None:
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
        return 1 if counts_batches or not exact_precision else self.steps_per_block

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
        if self.solver == "sgd":
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
        self.metrics = nn.ModuleDict(
            {f"{s}_split": GLMMetrics(family, k, self.ece_bins) for s in ("train", "val", "test")}
        )
        self.metrics.to(self.feature_mean.device)

    def _check_optimizer(self) -> None:
        try:
            opt = self.optimizer_factory(self.model.parameters())
        except (ValueError, TypeError) as err:
            raise fail("optimizer", "valid optimizer arguments", str(err)) from None
        if "lr" in opt.defaults:
            lr = opt.defaults["lr"]
            check_positive("optimizer lr", float(lr))
        if self.lr_scheduler_factory is not None and self.lr_scheduler_interval == "step":
            if isinstance(self.lr_scheduler_factory(opt), ReduceLROnPlateau):
                raise fail(
                    "lr_scheduler_interval",
                    "'epoch' for ReduceLROnPlateau (it watches val/loss, computed once per epoch)",
                    "'step'",
                )

    def setup(self, stage: str) -> None:
        # Tell the data module how many batches one training step takes (after
        # Lightning has checked the configuration against automatic_optimization).
        datamodule = self.trainer.datamodule
        if stage == "fit" and isinstance(datamodule, GLMDataModule):
            datamodule.steps_per_block = self.block_size()
            # The training data stay on the device for the fit when they fit there:
            # each step gathers its rows on the device, no host-to-device copy.
            self._resident = datamodule.keep_on(self.trainer.strategy.root_device)

    def configure_model(self) -> None:
        if self.model is None and self._trainer is not None and self.trainer.datamodule is not None:
            self.build(self.trainer.datamodule)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A checkpoint saved after a training step holds trained weights (the best
        # epoch's is saved before on_train_end marks the model fitted): loaded, it
        # predicts. One saved before any step (a fit that never trained) holds the
        # initial weights and stays unfitted: loaded, it refuses to predict.
        flag = checkpoint["state_dict"].get("model._fitted")
        if flag is not None and self._trainer is not None and self.trainer.global_step > 0:
            checkpoint["state_dict"]["model._fitted"] = torch.ones_like(flag)
        checkpoint["torchglm"] = {
            "n_features_in": int(self.feature_mean.shape[0]),
            "n_features": self.n_model_features,
            "feature_names": self.feature_names,
            "dtype": str(self.data_dtype).removeprefix("torch."),
        }
        checkpoint["torchglm"]["fit_seconds"] = self.fit_seconds()
        if self.fingerprint is not None:
            checkpoint["torchglm"]["fingerprint"] = self.fingerprint
        if self._trainer is not None:
            # Whether the fit had ended before max_epochs (the solver's stopping rule
            # or early stopping): Lightning does not checkpoint should_stop, and a
            # resumed fit that had ended must not take another epoch.
            checkpoint["torchglm"]["stopped"] = bool(self.trainer.should_stop)
        if self.fitter is not None:
            # The pass-based fit's record; the model's parameters hold its last
            # accepted point, from which a resumed fit re-evaluates and goes on
            # along the same iterates (with the solver's own memory, e.g. L-BFGS pairs).
            checkpoint["torchglm"]["fit_result"] = self.fitter.result
            if hasattr(self.fitter, "state_dict"):
                checkpoint["torchglm"]["fitter_state"] = self.fitter.state_dict()
            checkpoint["torchglm"]["fitter_done"] = bool(self.fitter.done)
        else:
            checkpoint["torchglm"]["epoch_history"] = list(self._history)
        # Plain data only, so that the checkpoint loads with weights_only=True (a
        # pickled object could run code when loaded): the fit record's dataclasses
        # become dicts, NumPy numbers Python numbers; hyper-parameters given from
        # Python (solver_options) likewise.
        checkpoint["torchglm"] = plain(checkpoint["torchglm"], "torchglm")
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
        if self.solver == "sgd" and self._trainer is not None:
            _carry_global_step(checkpoint, self.automatic_optimization)
        self._resumed_fit = checkpoint["torchglm"].get("fit_result")
        self._resumed_fitter_state = checkpoint["torchglm"].get("fitter_state")
        self.fit_seconds_before = float(checkpoint["torchglm"].get("fit_seconds", 0.0))
        self._history = list(checkpoint["torchglm"].get("epoch_history", []))
        self._resumed_done = bool(checkpoint["torchglm"].get("fitter_done", False))
        if (
            checkpoint["torchglm"].get("stopped")
            and self._trainer is not None
            and self.trainer.state.fn == TrainerFn.FITTING
        ):
            self.trainer.should_stop = True
        if self.model is not None:
            return
        meta = checkpoint["torchglm"]
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

    # -- training -----------------------------------------------------------------
    def configure_optimizers(self):
        if self.solver != "sgd":
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
        config = {"scheduler": sched, "interval": self.lr_scheduler_interval}
        if isinstance(sched, ReduceLROnPlateau) and self.automatic_optimization:
            # In step blocks the task steps it itself on val/loss (_step_plateau).
            config["monitor"] = "val/loss"
        return {"optimizer": opt, "lr_scheduler": config}

    def on_train_start(self) -> None:
        self._fit_start = time.perf_counter()
        if not self.automatic_optimization:
            self._plain_steps = self._no_step_hooks()
        self._graph, self._graph_warm = None, False
        if self.cuda_graphs and self.solver == "sgd":
            reason = self._graph_obstacle()
            if reason is None:
                dm = self.trainer.datamodule
                self._graph = BlockGraph(
                    self.block_size(),
                    dm.batch_size,
                    self.trainer.strategy.root_device,
                    self.feature_mean.dtype,
                    self.graph_backend,
                )
            else:
                warn(f"cuda_graphs: the SGD blocks run uncaptured: {reason}", PerformanceWarning)

    #: ``() -> GraphBackend`` for :class:`~torchglm.training.graphs.BlockGraph`;
    #: ``None``: a CUDA graph (on CUDA devices only). Tests set a CPU recorder.
    graph_backend = None

    def _graph_obstacle(self) -> str | None:
        """Why this fit's step blocks cannot be recorded (``cuda_graphs``), or ``None``."""
        trainer = self.trainer
        device = trainer.strategy.root_device
        if self.graph_backend is None and device.type != "cuda":
            return f"they need a CUDA device (this fit runs on {device})"
        if self.automatic_optimization:
            return "the fit takes one mini-batch per Lightning step (steps_per_block=1, or a trainer setting counted in mini-batches)"
        if not self._plain_steps:
            return (
                "Lightning's step hooks do work here (a callback or override of a step hook, a precision "
                "other than 32-true, or several devices)"
            )
        dm = trainer.datamodule
        if not isinstance(dm, GLMDataModule) or not self._resident:
            return "the training data are not kept on the device (they take more than half its free memory)"
        if not dm.shuffle or dm.batch_size is None:
            return "the batches are not shuffled mini-batches"
        if any(c.interval == "step" for c in trainer.lr_scheduler_configs):
            return "a per-step learning-rate scheduler changes the recorded step every step"
        opt = self.optimizers().optimizer
        if not capturable_optimizer(opt):
            return f"{type(opt).__name__}.step cannot be recorded (use SGD, or build the optimizer with capturable=True)"
        return None

    def fit_seconds(self) -> float:
        """Wall time of the fit so far, summed over the runs it was resumed across
        (each part up to its last checkpoint or its end)."""
        now = 0.0 if self._fit_start is None else time.perf_counter() - self._fit_start
        return self.fit_seconds_before + now

    def on_train_epoch_start(self) -> None:
        self._epoch_loss.update(
            sum=torch.zeros((), dtype=self.feature_mean.dtype, device=self.feature_mean.device),
            count=0,
            steps=0,
            complete=False,
        )
        if self.solver != "sgd":
            self.fitter.start_pass()

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
        if self.solver != "sgd":
            x = self.phi(batch.x)
            self.fitter.accumulate(Batch(x, batch.y, batch.weight, batch.offset))
            # The pass ends inside training_step (Lightning counts manual steps only
            # here) and before validation, which then sees the stepped parameters.
            if batch_idx == self.trainer.num_training_batches - 1:
                self._end_pass()
            return None
        if not self.automatic_optimization:
            return self._step_block(batch, batch_idx)
        x = self.phi(batch.x)
        loss = self.model.objective(x, batch.y, batch.weight, batch.offset)
        self._epoch_loss["sum"].add_(loss.detach())
        self._epoch_loss["count"] += 1
        # Log the step loss only at the logger's interval (Lightning writes step
        # metrics when (steps done + 1) % log_every_n_steps == 0): a self.log call
        # every step costs more than this model's whole step (bench/sgd_epoch.py).
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            self.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False)
        return loss

    # -- sgd in step blocks -----------------------------------------------------------
    def _step_block(self, block: Batch | BatchBlock, batch_idx: int) -> torch.Tensor | None:
        """The optimizer steps of one block of mini-batches, each as Lightning's
        automatic optimization takes it: the closure evaluates the objective (in
        the precision's forward context), adds it to the epoch loss, zeroes the
        gradients and back-propagates; ``optimizer.step(closure)``; then the
        per-step schedulers. After the epoch's last step the per-epoch schedulers
        step, as Lightning steps them after the last batch."""
        trainer = self.trainer
        batches = block if isinstance(block, BatchBlock) else (block,)
        first = self.global_step  # optimizer steps before this block
        n_steps = len(batches)
        if trainer.max_steps >= 0:  # stop at max_steps exactly, not at the block's end
            n_steps = min(n_steps, max(trainer.max_steps - first, 0))
        every, epoch, acc = trainer.log_every_n_steps, trainer.current_epoch, self._epoch_loss
        schedulers = [
            (c.scheduler, c.frequency)
            for c in trainer.lr_scheduler_configs
            if c.interval == "step" and not isinstance(c.scheduler, ReduceLROnPlateau)
        ]
        opt = self.optimizers()
        graph = self._graph
        if (
            graph is not None
            and isinstance(block, BatchBlock)
            and n_steps == len(batches)
            and graph.fits(block.spans)
        ):
            if self._graph_warm:
                losses = self._replay_block(graph, block, opt)
                logged = [
                    (first + i, losses[i].clone())
                    for i in range(n_steps)
                    if every and (first + i + 1) % every == 0
                ]
                self._end_block(batch_idx, n_steps, len(batches), epoch, logged)
                return losses[n_steps - 1].clone()
            # The first full block runs uncaptured (on a side stream, as recording
            # asks): it creates the optimizer's state and the gradients' memory.
            self._graph_warm = True
            outside = side_stream(graph.index.device)
        else:
            outside = nullcontext()
        last: list[torch.Tensor | None] = [None]  # the closure's last loss
        logged = []
        precision, forward = self._step_contexts()
        with outside, precision:
            for i, batch in enumerate(islice(batches, n_steps)):
                step_in_epoch = acc["steps"]
                closure = self._closure(batch, forward, last, opt.optimizer, epoch, step_in_epoch)
                if self._plain_steps:
                    # LightningOptimizer.step without the dispatch through strategy and
                    # precision (which here only call hooks nothing overrides): the same
                    # step, counted the same way.
                    opt._on_before_step()
                    opt.optimizer.step(closure)
                    opt._on_after_step()
                else:
                    self.optimizer_step(epoch, step_in_epoch, opt, closure)
                acc["steps"] = step_in_epoch + 1
                for sched, frequency in schedulers:
                    if (step_in_epoch + 1) % frequency == 0:
                        self.lr_scheduler_step(sched, None)
                # Lightning writes the loss of step s when (s + 1) % every == 0.
                if every and (first + i + 1) % every == 0:
                    logged.append((first + i, last[0]))
        self._end_block(batch_idx, n_steps, len(batches), epoch, logged)
        return last[0]

    def _replay_block(self, graph: BlockGraph, block: BatchBlock, opt) -> torch.Tensor:
        """One full block's steps as a replay of its recorded graph (recorded first,
        or again when the optimizer's numbers changed); Lightning counts the steps
        as it counts uncaptured ones. Returns the step losses (the graph's buffer)."""
        optimizer, acc = opt.optimizer, self._epoch_loss
        key = (optimizer_key(optimizer), block.gather)
        losses = graph.run(block.spans, acc["sum"], key, self._graph_body(block.gather, optimizer))
        for _ in range(graph.steps):
            opt._on_before_step()
            opt._on_after_step()
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

                optimizer.step(self._plain_closure(gather(index[i]), optimizer, record))

        return body

    def _plain_closure(self, batch: Batch, optimizer, record):
        """The closure of one step without Lightning's dispatch: forward, ``record``
        the detached loss, zero_grad, backward."""
        model, phi = self.model, self.phi

        def closure():
            loss = model.objective(phi(batch.x), batch.y, batch.weight, batch.offset)
            record(loss.detach())
            optimizer.zero_grad()
            loss.backward()
            return loss

        return closure

    def _end_block(self, batch_idx: int, n_steps: int, n_batches: int, epoch: int, logged: list) -> None:
        """After a block's steps: the per-epoch schedulers after the epoch's last step
        (where Lightning steps them), the step losses to the loggers, and Lightning's
        logger step advanced by the block's steps."""
        trainer, acc = self.trainer, self._epoch_loss
        if batch_idx == trainer.num_training_batches - 1 and n_steps == n_batches:
            acc["complete"] = True
            for c in trainer.lr_scheduler_configs:
                if (
                    c.interval == "epoch"
                    and not isinstance(c.scheduler, ReduceLROnPlateau)
                    and (epoch + 1) % c.frequency == 0
                ):
                    self.lr_scheduler_step(c.scheduler, None)
        self._log_steps(logged, epoch)
        # Lightning counts one logger step per training step; this one took
        # n_steps: validation and epoch metrics then land on the optimizer-step axis,
        # as with one mini-batch per training step.
        trainer.fit_loop.epoch_loop._batches_that_stepped += max(n_steps - 1, 0)

    def _closure(self, batch: Batch, forward, last: list, optimizer, epoch: int, step: int):
        """Lightning's closure of one step: forward, epoch loss, zero_grad, backward
        (with Lightning's hooks, or, where ``_plain_steps``, without the dispatch)."""
        model, phi, acc = self.model, self.phi, self._epoch_loss
        if self._plain_steps:

            def record(value: torch.Tensor) -> None:
                last[0] = value
                acc["sum"].add_(value)
                acc["count"] += 1

            return self._plain_closure(batch, optimizer, record)
        trainer = self.trainer

        def closure():
            with forward():
                loss = model.objective(phi(batch.x), batch.y, batch.weight, batch.offset)
            last[0] = loss.detach()
            acc["sum"].add_(last[0])
            acc["count"] += 1
            for callback in trainer.callbacks:
                callback.on_before_zero_grad(trainer, self, optimizer)
            self.on_before_zero_grad(optimizer)
            self.optimizer_zero_grad(epoch, step, optimizer)
            self.manual_backward(loss)
            return loss

        return closure

    def _step_contexts(self):
        """``(outside, forward)``: the context of a block's backward passes and steps,
        and a factory of the forward's. Lightning runs ``training_step`` in the
        precision's forward context and the backward and step outside it: under
        mixed precision a block leaves autocast for them and re-enters it for each
        forward (Lightning's autocast caches no casts, so no stale cast outlives a step)."""
        plugin = self.trainer.precision_plugin
        if type(plugin) is MixedPrecision:
            return torch.autocast(plugin.device, enabled=False), plugin.forward_context
        return nullcontext(), nullcontext

    def _no_step_hooks(self) -> bool:
        """Whether Lightning's path around an optimizer step does nothing but the step:
        full precision, one device, and no callback or override of the step hooks."""
        trainer = self.trainer
        if (
            type(trainer.precision_plugin) is not Precision
            or type(trainer.strategy) is not SingleDeviceStrategy
        ):
            return False
        if any(is_overridden(h, self, pl.LightningModule) for h in _MODULE_STEP_HOOKS):
            return False
        return not any(
            is_overridden(h, cb, pl.Callback) for cb in trainer.callbacks for h in _CALLBACK_STEP_HOOKS
        )

    def _log_steps(self, logged: list[tuple[int, torch.Tensor]], epoch: int) -> None:
        """Write the block's step losses at their own optimizer steps, as Lightning's
        logger connector writes them one per step (with the epoch)."""
        if not logged:
            return
        for logger in self.loggers:
            for step, value in logged:
                logger.log_metrics({"train/loss_step": float(value), "epoch": epoch}, step=step)
                logger.save()
        # callback_metrics, as the step's self.log would leave them (written above)
        self.log("train/loss_step", logged[-1][1], on_step=True, on_epoch=False, logger=False)

    def _step_plateau(self) -> None:
        """Step ``ReduceLROnPlateau`` on the epoch's ``val/loss`` at the epoch's end,
        where Lightning's automatic optimization steps it (after validation, before
        the next epoch). Here it steps before the checkpoint callbacks save: the
        ``last.ckpt`` of a killed run holds the stepped scheduler (Lightning's
        resume skips that step, a resumed per-step fit lags one plateau step).

        Raises:
            MisconfigurationException: no ``val/loss`` (Lightning's message).
        """
        trainer = self.trainer
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
                self.lr_scheduler_step(c.scheduler, value)

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
        if self.solver == "sgd":
            loss = self._epoch_loss["sum"] / max(self._epoch_loss["count"], 1)
            # Each process's own rows: the mean over processes (sync_dist).
            self.log("train/epoch_loss", loss, sync_dist=True)
            self._history.append({"loss": float(loss)})
        if self.train_metrics_enabled:
            self.log_dict(
                self.evaluate(
                    self.trainer.datamodule.train_batches(
                        batch_size=self.trainer.datamodule.eval_batch_size, shuffle=False
                    ),
                    "train",
                )
            )
        if self.solver == "sgd" and not self.automatic_optimization and self._epoch_loss["complete"]:
            self._step_plateau()

    def on_train_end(self) -> None:
        self.fit_seconds_before, self._fit_start = self.fit_seconds(), None
        if self._graph is not None:
            self._graph.graph = None  # the recording's memory (its count stays)
        self._conclude(self.fitter is None or self.fitter.done)

    def on_fit_end(self) -> None:
        if self.fit_result is None and self.trainer.global_step > 0:
            # A resumed fit that had ended (max_epochs reached, the solver's stopping
            # rule, early stopping; or killed while its result was being validated):
            # Lightning ran no epoch and no on_train_end. Its result is the
            # checkpointed record, concluded as that run's on_train_end did. (A fit
            # that never trained, global_step 0, stays unfitted: nothing to report.)
            self._conclude(self._resumed_done)

    def _conclude(self, done: bool) -> None:
        """Mark the model fitted and set :attr:`fit_result` (``done``: the pass-based
        solver met its own stopping rule)."""
        self.model.mark_fitted()
        if self.solver != "sgd":
            self.fit_result = self.fitter.result
        if self.solver != "sgd" and not done:
            # Never hide non-convergence: the trainer (max_epochs, early stopping)
            # ended the fit before the solver's stopping rule held.
            self.fit_result.converged = False
            self.fit_result.message = (
                f"stopped by the trainer after {self.current_epoch} passes, before "
                f"the '{self.solver}' solver's stopping rule held"
            )
            warn(self.fit_result.message, ConvergenceWarning)
        if self.solver == "sgd":
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


def _carry_global_step(checkpoint: dict[str, Any], automatic: bool) -> None:
    """Resume ``global_step`` across ``steps_per_block`` settings: Lightning counts
    the optimizer steps of automatic and of manual optimization in two progress
    records, and restores the one of the resumed fit's mode."""
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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) or (torch.is_tensor(v) and v.numel() == 1)
