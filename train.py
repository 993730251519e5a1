"""Train, validate and test a torchglm model from a config; or predict from a checkpoint.

    python train.py --config configs/quickstart.yaml
    python train.py --config configs/quickstart.yaml --trainer.max_epochs 5 --data.batch_size 32
    python train.py --config configs/quickstart.yaml --print_config
    python train.py predict --ckpt_path runs/.../checkpoints/best.ckpt --input data.csv --output preds.csv

See docs/training.md.
"""

import sys

from torchglm.training.cli import main

if __name__ == "__main__":
    sys.exit(main())
