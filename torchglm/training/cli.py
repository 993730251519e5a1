"""``train.py``: LightningCLI over :class:`GLMTask` and :class:`GLMDataModule`.

``python train.py --config configs/NAME.yaml`` validates the data against the
model, then fits, validates and tests, prints a results table and writes, under
the run directory: TensorBoard events, ``config.yaml``, ``checkpoints/best.ckpt``
and ``metrics.json``. ``python train.py predict --ckpt_path ... --input ...
--output ...`` writes predictions of a saved model.

Bad input (a config or data error) prints one line ``error: <what is wrong>``
and exits with status 2, before the run directory exists or, for errors found
during fitting, after removing its checkpoints; ``metrics.json`` is written
atomically, so it is either complete or absent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.loggers import TensorBoardLogger

from .._validation import InputError, check_finite, fail
from ..data.files import read_table
from ..data.module import GLMDataModule
from .task import GLMTask

__all__ = ["GLMCLI", "main", "predict", "run"]

TRAINER_DEFAULTS = {
    "max_epochs": 100,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


class GLMCLI(LightningCLI):
    """LightningCLI with the run directory, checkpointing and early stopping wired in.

    Top-level config keys: ``model`` (:class:`GLMTask`), ``data``
    (:class:`GLMDataModule`), ``trainer`` (``pytorch_lightning.Trainer``; extra
    callbacks under ``trainer.callbacks`` as ``class_path``/``init_args``),
    ``checkpoint`` (``ModelCheckpoint``), ``early_stopping`` (``EarlyStopping``),
    ``run_dir`` and ``seed_everything``.
    """

    def __init__(self, args: list[str] | None = None):
        super().__init__(
            GLMTask,
            GLMDataModule,
            run=False,
            args=args,
            auto_configure_optimizers=False,
            seed_everything_default=0,
            trainer_defaults=TRAINER_DEFAULTS,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"exit_on_error": False, "prog": "train.py",
                           "description": "Fit, validate and test a torchglm model from a config file."},
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--run_dir", type=Optional[str], default=None,
                            help="Output directory (default: runs/<config name>/version_<N>, the next free N).")
        parser.add_argument("--resume", type=Optional[str], default=None,
                            help="Checkpoint to resume fitting from (e.g. RUN_DIR/checkpoints/last.ckpt, "
                                 "written after every epoch); use the same config and --run_dir.")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val/loss", "checkpoint.mode": "min",
                             "checkpoint.filename": "best", "checkpoint.auto_insert_metric_name": False,
                             "checkpoint.save_last": True})
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults({"early_stopping.monitor": "val/loss", "early_stopping.mode": "min",
                             "early_stopping.patience": 20})

    def instantiate_trainer(self, **kwargs: Any):
        self.run_dir = _resolve_run_dir(self.config)
        kwargs["logger"] = TensorBoardLogger(save_dir=str(self.run_dir), name="", version="",
                                             default_hp_metric=False)
        kwargs["default_root_dir"] = str(self.run_dir)
        return super().instantiate_trainer(**kwargs)


def _resolve_run_dir(config) -> Path:
    if config.get("run_dir"):
        return Path(config["run_dir"])
    configs = config.get("config") or []
    name = Path(str(configs[-1])).stem if configs else "run"
    root = Path("runs") / name
    n = 0
    while (root / f"version_{n}").exists():
        n += 1
    return root / f"version_{n}"


def run(cli: GLMCLI) -> dict[str, Any]:
    """Validate, fit, validate and test; write ``metrics.json``; return the metrics.

    Raises:
        InputError: bad data or hyper-parameters (found before the run directory
            is created), or raised while fitting (then the run's checkpoints are removed).
    """
    task, dm, trainer = cli.model, cli.datamodule, cli.trainer
    task.build(dm)
    run_dir = cli.run_dir
    resume = cli.config.get("resume")
    if resume is not None and not Path(resume).is_file():
        raise fail("resume", "an existing checkpoint file", f"'{resume}' (not found)")
    start = time.perf_counter()
    try:
        trainer.fit(task, datamodule=dm, ckpt_path=resume)
        fit_seconds = time.perf_counter() - start
        if task.fitter is not None:
            # A pass-based fit's estimate is the solver's last accepted iterate (its
            # stopping rule, not the epoch with the best validation loss, and the
            # trainer may stop before validating it): checkpoint and evaluate it.
            final = Path(run_dir) / "checkpoints" / "final.ckpt"
            trainer.save_checkpoint(final)
            ckpt, ckpt_arg = str(final), None
        else:
            ckpt = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
            ckpt_arg = "best" if ckpt else None
        val = trainer.validate(task, datamodule=dm, ckpt_path=ckpt_arg, verbose=False)[0]
        test = trainer.test(task, datamodule=dm, ckpt_path=ckpt_arg, verbose=False)[0]
        train = task.evaluate(dm.train_batches(batch_size=dm.eval_batch_size, shuffle=False), "train")
        result = task.fit_result
        metrics = {
            "run_dir": str(run_dir),
            "checkpoint": ckpt,
            "data": dm.summary(),
            "fit": {
                "solver": result.solver,
                "converged": bool(result.converged),
                "n_iter": int(result.n_iter),
                "message": result.message,
                "epochs": int(trainer.current_epoch),
                "seconds": round(fit_seconds, 3),
            },
            **{split: _strip(values, split) for split, values in
               (("train", train), ("val", val), ("test", test))},
        }
        if trainer.is_global_zero:
            _write_json_atomic(Path(run_dir) / "metrics.json", metrics)
    except InputError:
        # Bad input found while fitting: no checkpoint of a run that could not be valid.
        # Other failures (an interrupt, a crash) keep the last complete checkpoint
        # (Lightning writes each one atomically) so the run can be resumed.
        shutil.rmtree(Path(run_dir) / "checkpoints", ignore_errors=True)
        raise
    return metrics


def _strip(values: dict[str, float], split: str) -> dict[str, float]:
    return {k.split("/", 1)[1]: float(v) for k, v in values.items() if k.startswith(f"{split}/")}


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def format_table(metrics: dict[str, Any]) -> str:
    """A small text table: one row per metric, columns train/val/test."""
    splits = ("train", "val", "test")
    names = [k for k in metrics["test"] if k != "loss"]
    lines = [f"{'metric':<10}" + "".join(f"{s:>10}" for s in splits)]
    for name in names:
        lines.append(f"{name:<10}" + "".join(f"{metrics[s].get(name, float('nan')):>10.4f}" for s in splits))
    fit = metrics["fit"]
    lines.append(f"fit: {fit['solver']}, {fit['epochs']} epochs, {fit['seconds']:.1f} s"
                 + (f", converged={fit['converged']}" if not fit["solver"].startswith("sgd") else ""))
    lines.append(f"run directory: {metrics['run_dir']}")
    return "\n".join(lines)


def predict(ckpt_path: str, input: str, output: str) -> Path:
    """Write predictions of a checkpointed model for the rows of a CSV/NPZ/NPY file.

    Features are selected by the names the model was trained on (a target column,
    if present, is ignored) and standardized as in training. Classifiers get one
    probability column per class ``p_0..p_{K-1}`` and ``label``; regression models
    get ``mean``. A ``.npz`` output holds arrays ``proba``/``label`` (or ``mean``);
    anything else is written as CSV.

    Raises:
        InputError: missing checkpoint or input file, missing feature columns, NaN/inf.
    """
    if not Path(ckpt_path).is_file():
        raise fail("ckpt_path", "an existing checkpoint file", f"'{ckpt_path}' (not found)")
    try:
        task = GLMTask.load_from_checkpoint(ckpt_path, map_location="cpu")
    except TypeError as err:
        raise fail("ckpt_path", "a checkpoint written by train.py (its config rebuilds the model)",
                   f"'{ckpt_path}' ({err})") from None
    task.eval()
    table = read_table(input, features=task.feature_names, require_target=False)
    x = torch.as_tensor(table.x, dtype=torch.float64)
    check_finite("X", x)
    mu = task.predict_proba(x)
    label = task.predict(x)
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if task.model.family.is_classifier:
        proba = mu if mu.dim() == 2 else torch.stack([1 - mu, mu], dim=1)
        columns = {f"p_{k}": proba[:, k] for k in range(proba.shape[1])} | {"label": label}
        arrays = {"proba": proba.numpy(), "label": label.numpy()}
    else:
        columns = {"mean": mu}
        arrays = {"mean": mu.numpy()}
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix.lower() == ".npz":
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    else:
        with open(tmp, "w") as fh:
            fh.write(",".join(columns) + "\n")
            for row in zip(*(c.tolist() for c in columns.values())):
                fh.write(",".join(repr(v) if isinstance(v, float) else str(v) for v in row) + "\n")
    os.replace(tmp, out)
    return out


def _predict_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="train.py predict",
                                     description="Write predictions of a checkpointed torchglm model.")
    parser.add_argument("--ckpt_path", required=True, help="checkpoint written by train.py")
    parser.add_argument("--input", required=True, help="CSV/NPZ/NPY file with the feature columns")
    parser.add_argument("--output", required=True, help="output file (.csv or .npz)")
    args = parser.parse_args(argv)
    out = predict(args.ckpt_path, args.input, args.output)
    print(f"predictions written to {out}")
    return 0


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    # jsonargparse appends the whole offending value; the key and the reason are enough.
    return re.sub(r"\s*Got value: .*$", "", text)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``train.py``; returns the exit status (0 ok, 2 bad input)."""
    args = sys.argv[1:] if argv is None else list(argv)
    # Irrelevant here: the LeafSpec notice is Lightning's own use of a deprecated
    # torch API, and the task's transfer_batch_to_device is meant to take precedence.
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*overridden `transfer_batch_to_device`.*")
    try:
        if args and args[0] == "predict":
            return _predict_main(args[1:])
        # args=None makes LightningCLI read sys.argv itself (passing both warns).
        cli = GLMCLI(args=None if argv is None else args)
        metrics = run(cli)
    except (InputError, argparse.ArgumentError) as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2
    if cli.trainer.is_global_zero:
        print(format_table(metrics))
    _leave_process_group()
    return 0


def _leave_process_group() -> None:
    """End a DDP run's process group on every rank before the interpreter exits:
    gloo's threads left running at exit intermittently abort it ("terminate called
    without an active exception", exit -6) after the work is done."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
