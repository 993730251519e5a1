"""``train.py``: LightningCLI over :class:`GLMTask` and :class:`GLMDataModule`.

``torchglm train --config configs/NAME.yaml`` (or ``python3 train.py --config
...``) validates the data against the model, then fits, validates and tests,
prints a results table and writes, under the run directory: TensorBoard events,
``config.yaml``, ``model.ckpt`` (the reported model), ``checkpoints/last.ckpt``
(the resume state, after every epoch) and ``metrics.json``.
``torchglm predict --run_dir RUN --input ... --output ...`` writes predictions of
a run's model (:mod:`.predict`).

Bad input (a config, data or checkpoint error) prints one line ``error: <what is
wrong>`` and exits with status 2, and the run directory is left as it was before
the command (:class:`.rundir.RunDir`); ``metrics.json`` and ``model.ckpt`` are
written atomically, so they are either complete or absent. A full disk is reported
the same way. SIGTERM or Ctrl-C ends a run with status 143 or 130 and one line
giving the ``--resume`` command that goes on from its last checkpoint.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import pickle
import re
import shlex
import shutil
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities.exceptions import MisconfigurationException, SIGTERMException

from .._validation import InputError, fail
from ..threads import fit_threads
from .data_module import GLMDataModule
from .checkpoints import MODEL_CKPT, LastCheckpoint, load_checkpoint
from .interrupt import Interrupted, interruptible
from .predict import predict_main
from .progress import Heartbeat
from .rundir import RunDir, disk_error, next_version, signals_deferred
from .task import GLMTask

__all__ = ["GLMCLI", "main", "run"]

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
    ``checkpoint`` (``ModelCheckpoint``: how ``sgd`` picks its best epoch),
    ``early_stopping`` (``EarlyStopping``), ``run_dir``, ``resume``, ``threads``
    (torch's intra-op threads: :func:`torchglm.threads.fit_threads`) and
    ``seed_everything``.
    """

    def __init__(self, args: list[str] | None = None):
        # The progress bar only on a terminal: in a log file it is kilobytes of
        # control characters.
        defaults = {**TRAINER_DEFAULTS, "enable_progress_bar": sys.stdout.isatty()}
        super().__init__(
            GLMTask,
            GLMDataModule,
            run=False,
            args=args,
            auto_configure_optimizers=False,
            seed_everything_default=0,
            trainer_defaults=defaults,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={
                "exit_on_error": False,
                "prog": "torchglm train",
                "description": "Fit, validate and test a torchglm model from a config file.",
            },
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--run_dir",
            type=str | None,
            default=None,
            help="Output directory (default: runs/<config name>/version_<N>, the next free N).",
        )
        parser.add_argument(
            "--resume",
            type=str | None,
            default=None,
            help="Go on with an interrupted run: RUN_DIR/checkpoints/last.ckpt (written after "
            "every epoch) with the same config and --run_dir (trainer settings such as "
            "max_epochs may change; the model and data must not). A run whose fit had ended "
            "is validated and tested again.",
        )
        parser.add_argument(
            "--threads",
            type=int | None,
            default=None,
            help="torch's intra-op threads for the run (negative: counted back from the CPUs, "
            "-1 all). Default: torch's, capped at the CPUs other processes leave idle when the "
            "run starts (torchglm.threads), so a run beside a busy process does not "
            "oversubscribe the cores.",
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/loss",
                "checkpoint.mode": "min",
                "checkpoint.filename": "best",
                "checkpoint.auto_insert_metric_name": False,
                "checkpoint.save_last": False,
            }
        )
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults(
            {
                "early_stopping.monitor": "val/loss",
                "early_stopping.mode": "min",
                "early_stopping.patience": 20,
            }
        )

    def before_instantiate_classes(self) -> None:
        torch.set_num_threads(fit_threads(self.config.get("threads")))

    def instantiate_trainer(self, **kwargs: Any):
        self.run_dir = _resolve_run_dir(self.config)
        kwargs["logger"] = TensorBoardLogger(
            save_dir=str(self.run_dir), name="", version="", default_hp_metric=False
        )
        kwargs["default_root_dir"] = str(self.run_dir)
        trainer = super().instantiate_trainer(**kwargs)
        if not self.model.driver.reports_best_epoch:
            # A pass-based fit's estimate is the solver's final iterate, never the
            # epoch with the lowest validation loss: no "best" checkpoint of a stale
            # iterate is written at all.
            trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, ModelCheckpoint)]
        if not trainer.progress_bar_callback:
            trainer.callbacks.append(Heartbeat())
        self.last_checkpoint = LastCheckpoint(self.run_dir / "checkpoints")
        trainer.callbacks.append(self.last_checkpoint)
        return trainer


#: Config keys under ``model`` and ``data`` that a ``--resume`` may change: what a
#: run reports (metrics), how the same steps are executed (SGD step blocks, CUDA
#: graphs, evaluation batches), and where the data file lies (its rows are compared
#: by :meth:`GLMDataModule.fingerprint`). Everything else under ``model`` and ``data``
#: defines the fit and must equal the checkpoint's; ``trainer`` (``max_epochs``,
#: devices, ...), ``checkpoint``, ``early_stopping``, ``seed_everything``, ``run_dir``
#: and ``resume`` are not compared.
RESUME_MAY_CHANGE = (
    "model.train_metrics",
    "model.ece_bins",
    "model.steps_per_block",
    "model.cuda_graphs",
    "data.eval_batch_size",
    "data.source",
)


def _config_fingerprint(config) -> dict[str, Any]:
    """The flattened ``model.*`` and ``data.*`` config values a resumed fit must
    share, as plain JSON data (checkpoints load with ``weights_only=True``)."""
    flat = _flat(config.as_dict() if hasattr(config, "as_dict") else dict(config))
    kept = {
        k: v
        for k, v in flat.items()
        if k.startswith(("model.", "data."))
        and not any(k == c or k.startswith(c + ".") for c in RESUME_MAY_CHANGE)
    }
    return json.loads(json.dumps(kept, sort_keys=True, default=str))


def _check_same_fit(mine: dict[str, Any], theirs: dict[str, Any], path: str) -> None:
    """The resumed checkpoint's fingerprint (config and data) equals this run's.

    Raises:
        InputError: naming the first config key that differs, or the data's rows and digests.
    """
    absent = "(absent)"
    a, b = mine["config"], theirs.get("config", {})
    differ = [k for k in sorted(set(a) | set(b)) if a.get(k, absent) != b.get(k, absent)]
    if differ:
        k = differ[0]
        more = (
            f"; {len(differ) - 1} more: {', '.join(differ[1:4])}{', ...' if len(differ) > 4 else ''}"
            if len(differ) > 1
            else ""
        )
        raise fail(
            "resume",
            "a checkpoint of a fit with this config (a resumed run may change trainer, "
            "checkpoint and early_stopping settings, not the model or data)",
            f"'{path}' ({k}: {b.get(k, absent)!r} in the checkpoint, {a.get(k, absent)!r} here{more})",
        )
    if mine["data"] != theirs.get("data"):
        raise fail(
            "resume",
            f"a checkpoint of a fit on this config's data ({_describe_data(mine['data'])})",
            f"'{path}' (a fit on other data: {_describe_data(theirs.get('data') or {})})",
        )


def _describe_data(fp: dict[str, Any]) -> str:
    rows = fp.get("rows", {})
    sizes = "/".join(str(rows.get(k, "?")) for k in ("train", "val", "test"))
    return f"{sizes} train/val/test rows, {fp.get('n_features', '?')} features, digest {str(fp.get('digest', '?'))[:12]}"


#: The run directory the primary process chose, for the ranks that Lightning's DDP
#: launcher starts: they run the same command line and would each take the next
#: free ``version_N`` (rank 1 found rank 0's and wrote into another directory).
RUN_DIR_ENV = "TORCHGLM_RUN_DIR"


def _resolve_run_dir(config) -> Path:
    if config.get("run_dir"):
        return Path(config["run_dir"])
    if not _is_primary() and os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    configs = config.get("config") or []
    name = Path(str(configs[-1])).stem if configs else "run"
    path = next_version(Path("runs") / name)
    os.environ[RUN_DIR_ENV] = str(path)  # inherited by the ranks the launcher starts
    return path


def _is_primary() -> bool:
    """Rank 0 of the node group (Lightning's DDP launcher starts the other ranks
    with ``LOCAL_RANK``/``NODE_RANK`` set): the process that owns the run directory."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def _check_resumable(ckpt: dict[str, Any], task: GLMTask, path: str) -> None:
    """The checkpoint must come from a fit of this config's model with this solver,
    on this data (:data:`RESUME_MAY_CHANGE`: the config keys that may differ).

    Raises:
        InputError: another solver, another model or parameter shape, other features,
            another config or other data.
    """
    solver = ckpt.get("hyper_parameters", {}).get("solver")
    if solver != task.solver:
        raise fail(
            "resume",
            f"a checkpoint of a '{task.solver}' fit (this config's solver)",
            f"'{path}' (a '{solver}' fit)",
        )
    theirs = ckpt["torchglm"].get("fit_result") or {}
    if task.fitter is not None and theirs.get("solver") != task.fitter.result.solver:
        raise fail(
            "resume",
            f"a checkpoint of a '{task.fitter.result.solver}' fit (this config's solver)",
            f"'{path}' (a '{theirs.get('solver')}' fit)",
        )

    def shapes(state):
        return {k: tuple(v.shape) for k, v in state.items() if k.startswith(("model.", "basis."))}

    want, got = shapes(task.state_dict()), shapes(ckpt["state_dict"])
    if want != got or ckpt["torchglm"].get("feature_names") != task.feature_names:
        raise fail(
            "resume",
            f"a checkpoint of this config's model ({_describe(want, task.feature_names)})",
            f"'{path}' ({_describe(got, ckpt['torchglm'].get('feature_names'))})",
        )
    theirs = ckpt["torchglm"].get("fingerprint")
    if theirs is not None and task.fingerprint is not None:  # none in checkpoints of older versions
        _check_same_fit(task.fingerprint, theirs, path)


def _describe(shapes: dict[str, tuple], names) -> str:
    params = ", ".join(f"{k.split('.', 1)[1]} {list(v)}" for k, v in shapes.items())
    return f"{len(names or [])} features, {params}"


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _prepare(cli: GLMCLI, task, dm, trainer) -> str | None:
    """Everything checked before a run writes anything: the Trainer's limits, the data
    (set up), the model (built), and the ``--resume`` checkpoint; returns that path."""
    for key in ("max_epochs", "max_steps"):
        if getattr(trainer, key) == 0:
            # Lightning would "fit" nothing and report the initial weights as a model.
            raise fail(
                f"trainer.{key}",
                "at least 1 (or -1: until the solver's stopping rule or early stopping ends the fit)",
                "0 (nothing to fit)",
            )
    _infer_n_classes(task, dm)
    dm.setup("fit")
    if dm.streamed and (not task.driver.reads_streamed_files or task.basis is not None):
        raise fail(
            "data.memory_budget",
            f"a pass-based solver without a basis for a file streamed from disk ('{dm.source}' is "
            f"larger than the budget of {dm.memory_budget} bytes), or a budget above the file's size",
            f"solver '{task.solver}'" + (" with a basis" if task.basis is not None else ""),
        )
    task.build(dm)
    task.fingerprint = {"config": _config_fingerprint(cli.config), "data": dm.fingerprint()}
    resume = cli.config.get("resume")
    if resume is not None:
        if not Path(resume).exists():
            raise fail(
                "resume",
                "an existing checkpoint file (RUN/checkpoints/last.ckpt, written after every "
                "epoch: run once without --resume first)",
                f"'{resume}' (not found)",
            )
        _check_resumable(load_checkpoint(resume, "resume"), task, resume)
    return resume


def _drop_earlier_events(run_dir: Path) -> None:
    """A new fit into a run directory replaces its model and metrics; the earlier
    fit's TensorBoard events went on beside the new ones, so every curve showed two
    values per step. They go (the directory was backed up: a failed run restores
    them); a resumed run continues its own curves beside them."""
    for old in run_dir.glob("events.out.tfevents.*"):
        old.unlink()


def run(cli: GLMCLI) -> dict[str, Any]:
    """Validate, fit, validate and test; write ``model.ckpt`` and ``metrics.json``;
    return the metrics.

    Everything that can be checked before fitting (data, hyper-parameters, the
    ``--resume`` checkpoint, the run directory and its lock) is checked before
    anything is written. A failure while fitting restores the run directory.

    Raises:
        InputError: bad data, hyper-parameters or checkpoint; a run directory that
            is a file or is in use; a numerical failure caused by the data.
    """
    task, dm, trainer = cli.model, cli.datamodule, cli.trainer
    resume = _prepare(cli, task, dm, trainer)
    run_dir = Path(cli.run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    last_before = _file_identity(last)
    rd = RunDir(run_dir, primary=_is_primary())
    if resume is None and _is_primary():
        _drop_earlier_events(run_dir)
    try:
        metrics = _fit_and_report(cli, task, dm, trainer, run_dir, resume)
    except InputError:
        rd.rollback()
        raise
    except (torch.linalg.LinAlgError, OverflowError) as err:
        rd.rollback()
        raise fail(
            "fit",
            "finite, well-scaled data",
            f"a numerical failure ({_one_line(err)}); "
            "standardize the features (data.standardize: true) or rescale them",
        ) from None
    except OSError as err:
        # A full disk (ENOSPC), a file size limit (EFBIG), a read-only file system:
        # the environment, not a bug; what the run wrote is as unusable as after bad input.
        rd.rollback()
        raise disk_error(run_dir, err) from None
    except (Interrupted, SIGTERMException) as err:
        if _file_identity(last) != last_before:
            # An epoch ended in this run: keep its state for --resume, without the
            # temporary file of a write the signal cut short.
            with signals_deferred():
                rd.remove_temporaries()
                rd.commit()
        else:
            # Nothing to resume from that was not there before: as it was.
            rd.rollback()
        if isinstance(err, Interrupted):
            raise
        raise Interrupted(signal.SIGTERM) from None
    except BaseException:
        # A crash keeps what the run wrote, last.ckpt included, for --resume.
        rd.commit()
        raise
    rd.commit()
    return metrics


def _infer_n_classes(task: GLMTask, dm: GLMDataModule) -> None:
    """A config's model that leaves ``n_classes`` out (``SoftmaxRegression``: ``None``)
    gets the data's number of classes (:meth:`GLMDataModule.class_count`), in its
    factory and in the hyper-parameters its checkpoints carry (which rebuild it for
    ``torchglm predict``). The config's ``model.model`` is a partial of the class
    over everything but ``n_features``, so a required ``n_classes`` could not be left
    out of a config at all."""
    factory = task.model_factory
    if not isinstance(factory, functools.partial) or "n_classes" not in factory.keywords:
        return
    if factory.keywords["n_classes"] is not None or task.model is not None:
        return
    try:
        factory(1)  # a one-feature model: does it need the number of classes?
    except InputError as err:
        if not str(err).startswith("n_classes:"):
            raise
    else:
        return  # it has its own (a binary family's 2)
    dm.setup("fit")
    k = dm.class_count()
    task.model_factory = functools.partial(factory, n_classes=k)
    spec = task.hparams.get("model")
    if isinstance(spec, dict) and isinstance(spec.get("init_args"), dict):
        spec["init_args"]["n_classes"] = k


def _fit_and_report(cli, task, dm, trainer, run_dir: Path, resume) -> dict[str, Any]:
    # weights_only=True: a checkpoint never runs code (the --resume file was read
    # and checked above; this load refuses pickled objects all the same).
    with _refusing_pickles(resume, "resume"):
        trainer.fit(task, datamodule=dm, ckpt_path=resume, weights_only=True)
    if not task.model.is_fitted:
        # The trainer ended without training (on_train_end marks the model fitted):
        # its initial weights are no model to report or predict with.
        raise fail(
            "trainer",
            "a fit that trains the model (max_epochs >= 1)",
            f"a fit that ended after {trainer.current_epoch} epochs without training it",
        )
    fit_seconds = task.fit_seconds()
    model_ckpt = run_dir / MODEL_CKPT
    # The reported model is staged under a hidden name, evaluated from there, and
    # renamed to model.ckpt only once the run has succeeded (after metrics.json):
    # a failed or interrupted run leaves no model.ckpt (or the previous run's).
    staged = run_dir / f".{MODEL_CKPT}.tmp"
    try:
        best = next((c.best_model_path for c in trainer.callbacks if isinstance(c, ModelCheckpoint)), "")
        if task.driver.reports_best_epoch and best:
            # sgd: the epoch with the lowest validation loss is the reported model. It
            # is copied (and removed only once the run has succeeded), so a run killed
            # while reporting still has it on --resume; a resumed run whose fit had
            # ended and whose best epoch was reported already reports model.ckpt again.
            # Rank 0 alone decides: every rank reaches the same barrier.
            if trainer.is_global_zero:
                shutil.copyfile(best if Path(best).exists() else model_ckpt, staged)
        else:
            # Pass-based: the solver's final estimate (its stopping rule, not the epoch
            # with the best validation loss; the trainer may stop before validating it);
            # sgd without a monitored best: the last epoch.
            trainer.save_checkpoint(staged)
        trainer.strategy.barrier("model_ckpt")
        with _refusing_pickles(staged, "model.ckpt"):
            val = trainer.validate(
                task, datamodule=dm, ckpt_path=str(staged), verbose=False, weights_only=True
            )[0]
            test = trainer.test(task, datamodule=dm, ckpt_path=str(staged), verbose=False, weights_only=True)[
                0
            ]
        train = task.evaluate(dm.train_batches(batch_size=dm.eval_batch_size, shuffle=False), "train")
        result = task.fit_result
        metrics = {
            "run_dir": str(run_dir),
            "checkpoint": str(model_ckpt),
            "data": dm.summary(),
            "fit": {
                "solver": result.solver,
                "converged": bool(result.converged),
                "n_iter": int(result.n_iter),
                "message": result.message,
                "epochs": int(trainer.current_epoch),
                "seconds": round(fit_seconds, 3),
                "resumed_from": resume,
            },
            **{
                split: _strip(values, split)
                for split, values in (("train", train), ("val", val), ("test", test))
            },
        }
        if trainer.is_global_zero:
            _log_to_tensorboard(trainer, cli.config, metrics, result)
            _write_json_atomic(run_dir / "metrics.json", metrics)
            os.replace(staged, model_ckpt)
            if task.driver.reports_best_epoch and best:
                Path(best).unlink(missing_ok=True)
    finally:
        if trainer.is_global_zero:
            staged.unlink(missing_ok=True)
    return metrics


@contextmanager
def _refusing_pickles(path, name: str):
    """Lightning reads ``ckpt_path`` with ``weights_only=True``: a checkpoint holding
    a pickled object is refused there (``UnpicklingError``), as bad input."""
    try:
        yield
    except pickle.UnpicklingError:
        raise fail(
            name,
            "a checkpoint of tensors and plain data (loading one never runs code)",
            f"'{path}' (it holds pickled Python objects; refused unread)",
        ) from None


def _log_to_tensorboard(trainer, config, metrics: dict[str, Any], result) -> None:
    """The run's hyper-parameters with its final metrics (TensorBoard's HPARAMS tab)
    and the solver's whole per-iteration history as curves (``fit_history/*``)."""
    logger = trainer.logger
    if not isinstance(logger, TensorBoardLogger):
        return
    hparams = {
        k: v
        for k, v in _flat(config.as_dict() if hasattr(config, "as_dict") else dict(config)).items()
        if k.startswith(("model.", "data.")) and isinstance(v, (int, float, str, bool))
    }
    final = {f"final/{split}_{k}": v for split in ("train", "val", "test") for k, v in metrics[split].items()}
    logger.log_hyperparams(hparams, final)
    writer = logger.experiment
    for i, entry in enumerate(result.history):
        step = int(entry.get("iteration", i))  # sgd's history is per epoch, with no iteration key
        for key, value in entry.items():
            if key != "iteration" and isinstance(value, (int, float)):
                writer.add_scalar(f"fit_history/{key}", float(value), step)
    writer.add_text(
        "fit", f"{result.solver}: converged={result.converged}, {result.n_iter} iterations: {result.message}"
    )
    writer.flush()


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


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
    lines.append(
        f"fit: {fit['solver']}, {fit['epochs']} epochs, {fit['seconds']:.1f} s"
        + (f", converged={fit['converged']}" if not fit["solver"].startswith("sgd") else "")
    )
    lines.append(f"model: {metrics['checkpoint']}")
    lines.append(f"run directory: {metrics['run_dir']}")
    return "\n".join(lines)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    # jsonargparse appends the whole offending value; the key and the reason are enough.
    return re.sub(r"\s*Got value: .*$", "", text)


def configure_console(verbose: bool) -> None:
    """Quiet by default: Lightning's INFO lines (tips, GPU/TPU availability) and
    warnings about settings train.py chooses on purpose only with ``-v``."""
    level = logging.INFO if verbose else logging.WARNING
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(level)
    # Irrelevant here: the LeafSpec notice is Lightning's own use of a deprecated
    # torch API, and the task's transfer_batch_to_device is meant to take precedence.
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*overridden `transfer_batch_to_device`.*")
    # main() passes the arguments it has already read from sys.argv (minus -v).
    warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
    # Every value the task logs per epoch is already the same on every process:
    # torchmetrics' compute() syncs its states, the passes' sums are all-reduced, and
    # sgd's epoch loss is logged with sync_dist. Lightning's advice to sync them again
    # under DDP (one line per metric) does not apply.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\(.*sync_dist=True")
    if not verbose:
        # One line per warning, without the source line of whichever library frame
        # raised it (a ConvergenceWarning from on_train_end points into Lightning).
        warnings.formatwarning = _short_warning
        # Full-batch fits have one step per epoch, fewer than the logging interval.
        warnings.filterwarnings("ignore", message=".*log_every_n_steps.*")
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        # A rerun or --resume writes into its own run directory's checkpoints/ on purpose.
        warnings.filterwarnings("ignore", message=".*Checkpoint directory .* exists and is not empty.*")


def _short_warning(message, category, filename, lineno, line=None) -> str:
    return f"{category.__name__}: {message}\n"


def main(argv: list[str] | None = None) -> int:
    """``torchglm train`` / ``train.py``: returns the exit status (0 ok, 2 bad input,
    128 + the signal's number when SIGTERM (143) or SIGINT, Ctrl-C (130), ended the
    run: one line on stderr then gives the ``--resume`` command that goes on).

    ``predict`` as the first argument runs :func:`.predict.predict_main`; ``-v``
    (anywhere) keeps Lightning's informational output.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    verbose = any(a in ("-v", "--verbose") for a in args)
    args = [a for a in args if a not in ("-v", "--verbose")]
    configure_console(verbose)
    cli = None
    try:
        if args and args[0] == "predict":
            return predict_main(args[1:])
        if args and args[0] == "train":
            args = args[1:]
        with interruptible():
            try:
                cli = GLMCLI(args=args)
            except MisconfigurationException as err:
                # The Trainer's own argument checks (e.g. max_epochs=-5): bad input.
                raise fail("trainer", "arguments the Lightning Trainer accepts", _one_line(err)) from None
            try:
                metrics = run(cli)
            finally:
                if isinstance(cli.datamodule, GLMDataModule):
                    cli.datamodule.close()  # a streamed table's temporary file
    except (InputError, argparse.ArgumentError) as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        _leave_process_group()
        return 2
    except Interrupted as err:
        if _is_primary():
            print(_interrupted_message(err, args, getattr(cli, "run_dir", None)), file=sys.stderr)
        return err.status
    if cli.trainer.is_global_zero:
        print(format_table(metrics))
    _leave_process_group()
    return 0


def _interrupted_message(err: Interrupted, args: list[str], run_dir: Path | None) -> str:
    """One line: what the interruption left and the command that goes on from there."""
    what = f"interrupted by {signal.Signals(err.signum).name}"
    if run_dir is None:
        return f"{what} before the run started: nothing was written"
    last = Path(run_dir) / "checkpoints" / "last.ckpt"
    if last.is_file():
        command = _command(args, "--run_dir", str(run_dir), "--resume", str(last))
        return f"{what}: the run stopped at its last checkpoint; resume it with: {command}"
    command = _command(args, "--run_dir", str(run_dir))
    return f"{what} before its first epoch ended: nothing to resume; run it again with: {command}"


def _command(args: list[str], *extra: str) -> str:
    """This command line (``torchglm train`` or ``python3 train.py``) with its
    ``--run_dir`` and ``--resume`` replaced by ``extra``."""
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("--run_dir", "--resume"):
            skip = True
        elif not a.startswith(("--run_dir=", "--resume=")):
            kept.append(a)
    prog = ["python3", sys.argv[0]] if Path(sys.argv[0]).name == "train.py" else ["torchglm", "train"]
    return shlex.join([*prog, *kept, *extra])


def _leave_process_group() -> None:
    """End a DDP run's process group on every rank before the interpreter exits:
    gloo's threads left running at exit intermittently abort it ("terminate called
    without an active exception", exit -6) after the work is done."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
