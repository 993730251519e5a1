#!/usr/bin/env bash
# Before/after of `auto` on bench/newton.py's six problems, alternating two checkouts
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
      | grep -E "^(binary|softmax|probit|poisson)|torchglm auto|sklearn lbfgs"
  done
done
# One record of both checkouts' rounds, with the per-problem change of the mean of rounds.
"$PYTHON" - "$REV" "$(git rev-parse --short HEAD)" <<'PY'
import json, platform, os, statistics, sys
rev, head = sys.argv[1:3]
rounds, means = {}, {}
for which in ("before", "after"):
    for r in (1, 2):
        d = json.load(open(f"/tmp/before_after_{which}_{r}.json"))
        rounds[f"{which}_{r}"] = {
            "auto_time_s": {p: e["methods"].get("torchglm auto", {}).get("time_s") for p, e in d["problems"].items()},
            "sklearn_lbfgs_time_s": {p: e["methods"].get("sklearn lbfgs", {}).get("time_s") for p, e in d["problems"].items()},
        }
change = {}
for p in rounds["after_1"]["auto_time_s"]:
    if any(rounds[f"{w}_{r}"]["auto_time_s"].get(p) is None for w in ("before", "after") for r in (1, 2)):
        print(f"{p:28s} not run (or failed) on one side")
        continue
    b = statistics.mean(rounds[f"before_{r}"]["auto_time_s"][p] for r in (1, 2))
    a = statistics.mean(rounds[f"after_{r}"]["auto_time_s"][p] for r in (1, 2))
    change[p] = {"before_s": round(b, 4), "after_s": round(a, 4), "change": f"{100 * (a / b - 1):+.0f}%"}
    print(f"{p:28s} {b:.3f} -> {a:.3f} s  {change[p]['change']}")
out = {"command": f"bash bench/before_after.sh {rev}", "before": rev, "after": head,
       "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": 1,
                   "note": "nothing else running; min of 3 per tolerance, two alternating rounds"},
       "auto_mean_of_rounds": change, "rounds": rounds}
json.dump(out, open("bench/results/before_after.json", "w"), indent=1)
PY
