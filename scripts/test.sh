#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. torch is pinned first so pip never
# resolves a multi-GB CUDA build on a machine without torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
# One intra-op thread: the tests' tensors are tiny, and on a 2-core machine torch's
# thread pool costs more than it saves (multi-process tests set their own threads).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
python -m pytest -q "$@"
