#!/usr/bin/env bash
# Before/after of `auto` on bench/newton.py's five problems, alternating two checkouts
# (default: main before issue 11, 5ac7e1c) on one thread, two rounds, min of 3 each.
#   bash bench/before_after.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
REV="${1:-5ac7e1c}"
OLD="$(mktemp -d)/before"
git worktree add -q --detach "$OLD" "$REV"
trap 'git worktree remove --force "$OLD"' EXIT
PYTHON="$(command -v python || command -v python3)"
export OMP_NUM_THREADS=1
for round in 1 2; do
  for which in before after; do
    extra=()
    [ "$which" = before ] && extra=(--torchglm "$OLD")
    echo "== $which ($([ "$which" = before ] && echo "$REV" || git rev-parse --short HEAD)), round $round"
    "$PYTHON" bench/newton.py "${extra[@]}" --threads 1 --repeats 3 --budget 5 \
        --methods "torchglm auto" "sklearn lbfgs" --out "/tmp/before_after_${which}_$round.json" \
      | grep -E "^(binary|softmax|probit)|torchglm auto|sklearn lbfgs"
  done
done
