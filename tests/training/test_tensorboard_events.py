"""A second ``train.py`` run into one ``--run_dir``: TensorBoard shows that run's
curves once (the earlier fit's event files stayed beside the new ones, so every
scalar had two values per step); a resumed run keeps its own earlier curves."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

from torchglm.training.cli import main  # noqa: E402

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


def _scalars(run_dir: Path, tag: str) -> list[int]:
    steps = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            steps += [e.step for e in acc.Scalars(tag)]
    return sorted(steps)


def test_a_rerun_into_one_run_dir_writes_each_curve_once(tmp_path):
    run = tmp_path / "run"
    args = ["--config", TINY, "--run_dir", str(run), "--trainer.max_epochs", "3"]
    assert main(args) == 0
    once = _scalars(run, "val/loss")
    assert once and len(once) == len(set(once))
    assert main(args) == 0
    assert _scalars(run, "val/loss") == once
