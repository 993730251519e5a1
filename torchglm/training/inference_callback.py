"""Lightning callback: the GLM summary table after a fit under ``train.py``.

Add it to a config::

    trainer:
      callbacks:
        - class_path: torchglm.training.inference_callback.InferenceSummary

After training it computes :func:`torchglm.inference.glm_results` on the training
split (``trainer.datamodule.train_batches()``, through the task's basis if any)
at the fitted parameters, prints the table, writes ``summary.txt`` and
``summary.json`` to the run directory (``trainer.default_root_dir``) and logs the
table as text to TensorBoard (``glm_summary``). Features
are the data module's standardized columns, so the coefficients are per
training standard deviation of each feature.
"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl

from .._validation import InputError, warn
from ..data.batches import Batch
from ..inference import GLMResults, glm_results
from .features import feature_map

__all__ = ["InferenceSummary"]


class _Mapped:
    """Re-iterable batches with the features passed through ``basis``."""

    def __init__(self, batches, basis):
        self.batches, self.basis = batches, basis

    def __iter__(self):
        for b in self.batches:
            yield Batch(self.basis(b.x), b.y, b.weight, b.offset)


class InferenceSummary(pl.Callback):
    """Print and save the :class:`~torchglm.inference.GLMResults` of the fitted GLM.

    Args:
        information: ``"observed"``, ``"expected"`` or ``None`` (expected after
            IRLS, observed otherwise).
        alpha: confidence level ``1 - alpha`` of the intervals.
        use_t: Student t tests with ``df_resid`` degrees of freedom.
        dirpath: where to write ``summary.txt``/``summary.json`` (default: the run directory).
        verbose: print the table.

    Attributes:
        results: the last :class:`GLMResults` (``None`` before training ends).
    """

    def __init__(
        self,
        information: str | None = None,
        alpha: float = 0.05,
        use_t: bool = False,
        dirpath: str | None = None,
        verbose: bool = True,
    ):
        self.information, self.alpha, self.use_t = information, alpha, use_t
        self.dirpath, self.verbose = dirpath, verbose
        self.results: GLMResults | None = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        dm = trainer.datamodule
        batches = dm.train_batches(batch_size=dm.eval_batch_size, shuffle=False)
        basis = feature_map(pl_module)
        names = None
        if basis is not None:
            batches = _Mapped(batches, basis)
        else:
            names = list(getattr(pl_module, "feature_names", []) or []) or None
        try:
            res = glm_results(
                pl_module.model,
                batches=batches,
                fit_result=pl_module.fit_result,
                information=self.information,
                alpha=self.alpha,
                use_t=self.use_t,
                feature_names=names,
            )
        except InputError as err:
            # A summary is a report on the run, not part of it: say why there is none.
            warn(f"InferenceSummary: no summary written: {err}", RuntimeWarning)
            return
        if getattr(dm, "standardize", False):
            res.notes.append(
                "features were standardized on the training split: each coefficient "
                "is per training standard deviation of its feature"
            )
        self.results = res
        if not trainer.is_global_zero:
            return
        out = Path(self.dirpath or trainer.default_root_dir)
        out.mkdir(parents=True, exist_ok=True)
        text = res.summary()
        (out / "summary.txt").write_text(text + "\n")
        res.to_json(out / "summary.json")
        for logger in trainer.loggers:
            writer = getattr(logger, "experiment", None)
            if hasattr(writer, "add_text"):
                # TensorBoard's TEXT tab renders markdown: indent to keep the table's columns.
                writer.add_text("glm_summary", "\n".join("    " + line for line in text.splitlines()))
        if self.verbose:
            print(text)
