"""Alias of the ``torchglm`` command (installed with the package): train, predict, figures.

    python3 train.py --config configs/quickstart.yaml
    python3 train.py --config configs/quickstart.yaml --trainer.max_epochs 5 --data.batch_size 32
    python3 train.py --config configs/quickstart.yaml --print_config
    python3 train.py predict --run_dir runs/quickstart/version_0 --input rows.csv --output preds.csv

See docs/training.md.
"""

import os
import signal
import sys


def _interrupted_while_importing(signum, frame):
    # Importing torch and Lightning takes seconds, before torchglm can install its own
    # handler: a signal then ends the process with one line (nothing was written yet).
    print(
        f"interrupted by {signal.Signals(signum).name} before the run started: nothing was written",
        file=sys.stderr,
    )
    sys.stderr.flush()
    os._exit(128 + signum)


if __name__ == "__main__":
    for _signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signal, _interrupted_while_importing)
    from torchglm.training.entry import main

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.exit(main())
