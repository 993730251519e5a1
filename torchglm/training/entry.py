"""The ``torchglm`` command (and ``train.py``, its alias): ``train``, ``predict``, ``figures``.

This module imports neither Lightning nor the models until a subcommand runs,
so ``torchglm --help`` answers at once.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main", "short_help"]

MODELS = (
    "LogisticRegression",
    "ProbitRegression",
    "SoftmaxRegression",
    "GeneralizedLinearModel",
    "GaussianNB",
    "BernoulliNB",
    "MultinomialNB",
    "PoissonNB",
    "GaussianDiscriminantAnalysis",
    "LinearDiscriminantAnalysis",
    "QuadraticDiscriminantAnalysis",
)


def short_help() -> str:
    from ..solvers import DIRECT_SOLVERS, SOLVERS  # torch only, no Lightning

    solvers = ", ".join(["sgd", "auto", *SOLVERS, *DIRECT_SOLVERS, "closed_form"])
    models = "\n".join(f"    torchglm.{m}" for m in MODELS)
    return f"""usage: torchglm train --config CONFIG.yaml [--KEY VALUE ...] [-v]
       torchglm predict --run_dir RUN --input FILE --output FILE
       torchglm figures all --out DIR
(python3 train.py ... is the same as torchglm ...; train is the default subcommand)

train     fit, validate and test a model from a config (configs/*.yaml); writes
          RUN/model.ckpt (the reported model), RUN/metrics.json, TensorBoard
          events and RUN/checkpoints/last.ckpt (after every epoch, for --resume)
predict   predictions of a run's model for the rows of a CSV/TSV/Parquet/NPZ/NPY file
          (torchglm predict --help)
figures   the lecture's figures from real runs (torchglm figures --help)

train options (any config key can be overridden the same way):
  --config FILE             a config, e.g. configs/quickstart.yaml
  --run_dir DIR             output directory (default runs/<config>/version_<N>)
  --resume RUN/checkpoints/last.ckpt   go on with an interrupted run (same config, --run_dir)
  --model.model.class_path  one of:
{models}
  --model.solver NAME       {solvers}
  --model.solver_options    e.g. '{{max_iter: 50, tol: 1e-10}}'
  --model.optimizer         a torch.optim class for sgd, e.g. torch.optim.Adam
  --data.source             a built-in dataset name or a .csv/.tsv/.parquet/.npz/.npy file
  --data.target NAME        the target column (labels of any kind: the classes)
  --data.categorical '[A]'  columns one-hot encoded; --data.missing error|drop|mean|most_frequent
  --data.memory_budget 2GB  a larger .npy/.csv/.tsv/.parquet is streamed (pass-based solvers)
  --data.batch_size N       rows per batch (null: all rows in one batch)
  --trainer.max_epochs N    epochs (passes, for pass-based solvers)
  --print_config            print the resolved config and exit
  -v, --verbose             Lightning's informational output and warnings
  --help-all                every option (Lightning's Trainer, callbacks, ...)

Errors print one line "error: ..." and exit with status 2. See docs/training.md."""


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``torchglm [train|predict|figures] ...``; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "figures":
        from ..figures import main as figures_main

        return figures_main(args[1:]) or 0
    if args and args[0] == "train":
        args = args[1:]
    if not args:
        print(
            "error: no config given: torchglm train --config configs/NAME.yaml "
            "(torchglm --help lists the options)",
            file=sys.stderr,
        )
        return 2
    if args[0] != "predict":
        if "--help-all" in args:
            args = ["--help" if a == "--help-all" else a for a in args]
        elif "-h" in args or "--help" in args:
            print(short_help())
            return 0
    from .interrupt import Interrupted, interruptible

    try:
        with interruptible():  # Lightning's import takes seconds
            from .cli import main as cli_main
    except Interrupted as err:
        print(
            f"interrupted by {signal.Signals(err.signum).name} before the run started: nothing was written",
            file=sys.stderr,
        )
        return err.status
    status = cli_main(args)
    if argv is None:
        # The process's own command: the run is over and reported, so a Ctrl-C or
        # SIGTERM while the interpreter exits (flushing TensorBoard, joining threads)
        # must not turn a finished run's status 0 into a death by signal.
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
    return status
