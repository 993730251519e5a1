"""Alias of the ``torchglm`` command (installed with the package): train, predict, figures.

    python3 train.py --config configs/quickstart.yaml
    python3 train.py --config configs/quickstart.yaml --trainer.max_epochs 5 --data.batch_size 32
    python3 train.py --config configs/quickstart.yaml --print_config
    python3 train.py predict --run_dir runs/quickstart/version_0 --input rows.csv --output preds.csv

See docs/training.md.
"""

import sys

from torchglm.training.entry import main

if __name__ == "__main__":
    sys.exit(main())
