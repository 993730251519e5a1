#!/usr/bin/env bash
# Main job: install torchglm (torch 2.13.0 first, the CPU build) and run the quickstart experiment (logistic regression on
# breast_cancer, under a minute on a laptop CPU). Extra arguments are passed to
# train.py, e.g. `bash scripts/quickstart.sh --trainer.max_epochs 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
# `python` where it exists, else `python3` (Debian/Ubuntu ship only the latter).
PYTHON="$(command -v python || command -v python3)"
# The CPU build from PyTorch's CPU index: PyPI's Linux torch wheel is the CUDA build
# (multi-GB with its nvidia-* dependencies) even when pinned. TORCH_INDEX_URL picks
# another (e.g. https://download.pytorch.org/whl/cu128 for a GPU).
"$PYTHON" -m pip install -q "torch==2.13.0" --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
"$PYTHON" -m pip install -q -e .
"$PYTHON" train.py --config configs/quickstart.yaml "$@"
