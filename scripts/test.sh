#!/usr/bin/env bash
# Set up (idempotent), lint, and run the test suite. torch 2.13.0 is installed first, the
# CPU build (below).
set -euo pipefail
cd "$(dirname "$0")/.."
# `python` where it exists, else `python3` (Debian/Ubuntu ship only the latter).
PYTHON="$(command -v python || command -v python3)"
# The CPU build from PyTorch's CPU index: PyPI's Linux torch wheel is the CUDA build
# (multi-GB with its nvidia-* dependencies) even when pinned. TORCH_INDEX_URL picks
# another (e.g. https://download.pytorch.org/whl/cu128 for a GPU).
"$PYTHON" -m pip install -q "torch==2.13.0" --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
"$PYTHON" -m pip install -q -e ".[dev]"
# Lint and format check first (config: [tool.ruff] in pyproject.toml); a finding or an
# unformatted file fails the run (`ruff format .` fixes the latter).
"$PYTHON" -m ruff check .
"$PYTHON" -m ruff format --check .
# One intra-op thread: the tests' tensors are tiny, and on a 2-core machine torch's
# thread pool costs more than it saves (multi-process tests set their own threads).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$PYTHON" -m pytest -q "$@"
