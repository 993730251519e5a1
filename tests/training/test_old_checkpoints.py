"""Checkpoints written before the renamed paths of CHANGELOG.md still load and predict.

``fixtures/run_948e381/model.ckpt`` is the reported model of ``python train.py --config
configs/glm_poisson.yaml`` run at commit 948e381, whose config named the summary
callback by its former path ``torchglm.inference_callback.InferenceSummary``. A
checkpoint's hyper-parameters name only the model, basis, optimizer and scheduler
classes (``torchglm.training.checkpoints.CLASS_ARGUMENTS``), none of which moved, so
the file loads unchanged; this test keeps it so.
"""

from pathlib import Path

import numpy as np
import torch

from torchglm.training.checkpoints import CLASS_ARGUMENTS, load_checkpoint
from torchglm.training.entry import main

RUN = Path(__file__).parent / "fixtures" / "run_948e381"


def test_a_checkpoint_of_an_older_run_loads_and_predicts(tmp_path):
    ckpt = load_checkpoint(RUN / "model.ckpt")
    assert set(CLASS_ARGUMENTS) == {"model", "basis", "optimizer", "lr_scheduler"}
    assert ckpt["hyper_parameters"]["model"]["class_path"] == "torchglm.GeneralizedLinearModel"
    rows = tmp_path / "rows.csv"
    x = np.array([[0.1, 0.2, 0.3], [-0.5, 0.4, 1.0], [2.0, -1.0, 0.0]])
    np.savetxt(rows, x, delimiter=",", header="x0,x1,x2", comments="")
    out = tmp_path / "pred.csv"
    assert main(["predict", "--run_dir", str(RUN), "--input", str(rows), "--output", str(out)]) == 0
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    # The Poisson log link from the saved weights (no standardization in that run).
    state = ckpt["state_dict"]
    w, b = state["model.linear.weight"].numpy().ravel(), float(state["model.linear.bias"])
    assert torch.equal(state["feature_scale"], torch.ones(3, dtype=torch.float64))
    np.testing.assert_allclose(got, np.exp(x @ w + b), rtol=1e-12)
