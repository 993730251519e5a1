"""Lightning callback that draws the standard pictures of a fitted classifier.

At the end of ``fit`` (on the training split) and of ``test`` (on the test split)
:class:`FigureLogger` draws, with :mod:`torchglm.plotting`:

* the decision regions and posterior ``p(C_1|x)`` heat map with the data points
  (2-D inputs only);
* the class-conditional densities (generative models with ``class_log_likelihood``
  and 2-D inputs without a basis);
* a reliability (calibration) diagram (every classifier);
* the objective gap and gradient norm per iteration of a pass-based solver, or
  the loss per epoch of a mini-batch run (``pl_module.fit_result.history``, end
  of fit only).

Each figure is saved as ``<run dir>/figures/<stage>_<name>.png`` (the run dir is
``trainer.log_dir``, else ``trainer.default_root_dir``) and logged with
``add_figure`` to every TensorBoard logger. Use it from a ``train.py`` config::

    trainer:
      callbacks:
        - class_path: torchglm.training.plot_callbacks.FigureLogger
          init_args: {resolution: 150}

The callback reads ``pl_module.model`` (anything with ``predict_proba`` and a
``family``), the optional ``pl_module.basis`` and ``trainer.datamodule.split(name)``
(standardized ``(x, y)`` tensors), as :class:`torchglm.training.task.GLMTask` and
:class:`torchglm.data.GLMDataModule` provide.
"""

from __future__ import annotations

import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger

from .. import plotting
from .._validation import check_positive, fail
from .features import feature_map

__all__ = ["FigureLogger"]

_STAGES = ("fit", "test")


class FigureLogger(pl.Callback):
    """Draw, save and log the figures of a fitted classifier.

    Args:
        stages: when to draw: ``"fit"`` (end of fit, training split) and/or
            ``"test"`` (end of test, test split).
        dirname: sub-directory of the run dir for the PNGs.
        resolution: grid points per axis of the 2-D pictures.
        n_bins: bins of the reliability diagram.
        max_points: at most this many data points are drawn (the first ones).
        dpi: resolution of the saved PNGs.

    Raises:
        InputError: on an unknown stage or a non-positive size.
    """

    def __init__(
        self,
        stages: list[str] | tuple[str, ...] = _STAGES,
        dirname: str = "figures",
        resolution: int = 150,
        n_bins: int = 10,
        max_points: int = 2000,
        dpi: int = plotting.DPI,
    ):
        super().__init__()
        bad = [s for s in stages if s not in _STAGES]
        if bad:
            raise fail("stages", f"a subset of {list(_STAGES)}", bad)
        for name, value in (
            ("resolution", resolution),
            ("n_bins", n_bins),
            ("max_points", max_points),
            ("dpi", dpi),
        ):
            check_positive(name, value)
        self.stages = tuple(stages)
        self.dirname = dirname
        self.resolution = int(resolution)
        self.n_bins = int(n_bins)
        self.max_points = int(max_points)
        self.dpi = int(dpi)
        #: paths of the PNGs written so far.
        self.saved: list[str] = []

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Fail before fitting, not after it: the figures need the data module's splits.
        if not callable(getattr(trainer.datamodule, "split", None)):
            raise fail(
                "trainer.datamodule",
                "a data module with split(name) -> (x, y), e.g. torchglm.data.GLMDataModule",
                type(trainer.datamodule).__name__,
            )

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if "fit" in self.stages:
            self.draw(trainer, pl_module, "fit", "train")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if "test" in self.stages:
            self.draw(trainer, pl_module, "test", "test")

    def run_dir(self, trainer: pl.Trainer) -> str:
        base = trainer.log_dir if trainer.log_dir is not None else trainer.default_root_dir
        return os.path.join(base, self.dirname)

    @torch.no_grad()
    def draw(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str, split: str) -> list[str]:
        """Draw every figure that applies to ``pl_module`` on one data split."""
        if not trainer.is_global_zero:
            return []
        model = pl_module.model
        if not model.family.is_classifier:
            return []
        basis = feature_map(pl_module)
        x, y = trainer.datamodule.split(split)
        x, y = x[: self.max_points].to(pl_module.device), y[: self.max_points].to(pl_module.device)
        figures = {}
        if x.shape[1] == 2:
            figures["decision_regions"] = plotting.decision_regions(
                model,
                x,
                y,
                basis=basis,
                resolution=self.resolution,
                title=f"{type(model).__name__}, {split} split",
            )
            if basis is None and hasattr(model, "class_log_likelihood"):
                figures["class_densities"] = plotting.class_conditional_densities(
                    model.class_log_likelihood, x, y, resolution=self.resolution
                )
        proba = model.predict_proba(basis(x) if basis is not None else x)
        figures["reliability"] = plotting.reliability_diagram(
            y, {type(model).__name__: proba}, n_bins=self.n_bins, title=f"reliability, {split} split"
        )
        result = getattr(pl_module, "fit_result", None)
        history = getattr(result, "history", None)
        if stage == "fit" and history and all("loss" in h for h in history):
            # Pass-based solvers record the gradient norm: draw the objective gap to
            # the best value reached; mini-batch runs record only the epoch loss.
            full = all("grad_norm" in h for h in history)
            figures["convergence"] = plotting.solver_convergence(
                {result.solver: history},
                keys=("loss", "grad_norm") if full else ("loss",),
                optimum=min(h["loss"] for h in history) if full else None,
            )
        out = self.run_dir(trainer)
        paths = []
        for name, fig in figures.items():
            # Save first: add_figure closes the figure.
            paths.append(
                plotting.save_figure(fig, os.path.join(out, f"{stage}_{name}.png"), dpi=self.dpi, close=False)
            )
            for logger in trainer.loggers:
                if isinstance(logger, TensorBoardLogger):
                    logger.experiment.add_figure(f"{stage}/{name}", fig, global_step=trainer.global_step)
            fig.clear()
        self.saved.extend(paths)
        return paths
