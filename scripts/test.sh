#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. torch is pinned first so pip never
# resolves a multi-GB CUDA build on a machine without torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
python -m pytest -q -m "not slow" "$@"
