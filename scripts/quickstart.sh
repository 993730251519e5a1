#!/usr/bin/env bash
# Main job: install torchglm (torch pinned first, so pip never resolves a multi-GB
# CUDA build) and run the quickstart experiment (logistic regression on
# breast_cancer, under a minute on a laptop CPU). Extra arguments are passed to
# train.py, e.g. `bash scripts/quickstart.sh --trainer.max_epochs 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
# `python` where it exists, else `python3` (Debian/Ubuntu ship only the latter).
PYTHON="$(command -v python || command -v python3)"
"$PYTHON" -m pip install -q "torch==2.13.0"
"$PYTHON" -m pip install -q -e .
"$PYTHON" train.py --config configs/quickstart.yaml "$@"
