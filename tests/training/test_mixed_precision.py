"""Mixed-precision SGD through Lightning's ``trainer.precision`` (bf16 autocast on CPU;
the same config key gives 16-mixed/bf16-mixed on a GPU)."""

import json
import warnings
from pathlib import Path

import torch

from torchglm.training.cli import main

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


def test_bf16_mixed_sgd_trains(tmp_path):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = main(
                [
                    "--config",
                    TINY,
                    "--run_dir",
                    str(tmp_path / "run"),
                    "--trainer.precision",
                    "bf16-mixed",
                    "--data.dtype",
                    "float32",
                ]
            )
    finally:
        torch.set_num_threads(n)
    assert code == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["test"]["accuracy"] > 0.9
    assert torch.isfinite(torch.tensor(metrics["test"]["nll"]))
