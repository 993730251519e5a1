"""SIGTERM at random moments into ``train.py --config configs/tiny.yaml``: the exit status,
whether metrics.json and last.ckpt exist, and the last stderr line of each trial.

    python bench/sigterm_trials.py ROOT N SEED WORKDIR

ROOT: the checkout to run (its train.py and configs/); N trials with delays drawn from
U(4, 16) s by SEED; WORKDIR is emptied first. A terminated run must exit 143 and print
how to resume it (never 0 without metrics.json).
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

root, n, seed, work = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
random.seed(seed)
env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
shutil.rmtree(work, ignore_errors=True)
work.mkdir()
for i in range(n):
    delay = random.uniform(4, 16)
    argv = [sys.executable, str(root / "train.py"), "--config", str(root / "configs/tiny.yaml")]
    argv += ["--run_dir", f"r{i}", "--trainer.max_epochs", "30", "--early_stopping.patience", "100"]
    p = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate()
    last = (err.strip().splitlines() or [""])[-1]
    run = work / f"r{i}"
    print(
        f"trial {i}: delay {delay:.1f}s rc={p.returncode} metrics.json={(run / 'metrics.json').exists()} "
        f"last.ckpt={(run / 'checkpoints/last.ckpt').exists()} stderr: {last[:110]}",
        flush=True,
    )
