"""The BayesianEvaluation callback under train.py: files, TensorBoard, checkpoint,
and the posterior it saves against a closed-form Laplace covariance."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from torchglm.bayes import LaplacePosterior
from torchglm.training.bayes_callback import BayesianEvaluation
from torchglm.training import GLMDataModule
from torchglm.training.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "bayes_logistic.yaml")
SMALL = [
    "--data.source",
    "gaussians2",
    "--data.dataset_options",
    '{"n_samples": 200}',
    "--model.model.l2",
    "0.02",
    "--trainer.callbacks.num_chains",
    "2",
    "--trainer.callbacks.num_samples",
    "150",
    "--trainer.callbacks.warmup_steps",
    "100",
    "--trainer.callbacks.lambdas",
    "[0.1, 1.0, 10.0, 100.0]",
]


pytestmark = pytest.mark.usefixtures("quiet_one_thread")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("bayes") / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["--config", CONFIG, "--run_dir", str(run), *SMALL]) == 0
    return run


def test_report_table_and_metrics(run_dir):
    report = json.loads((run_dir / "bayes.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(report["test"]) == {"MAP", "Laplace", "Variational", "MCMC"}
    for row in report["test"].values():
        assert set(row) == {"nll", "accuracy", "ece"}
    # the MAP row is the trained model's own test NLL and accuracy (an independent evaluation)
    assert report["test"]["MAP"]["nll"] == pytest.approx(
        metrics["test"]["nll"], rel=1e-6
    )  # torchmetrics: float32 sums
    assert report["test"]["MAP"]["accuracy"] == pytest.approx(metrics["test"]["accuracy"], rel=1e-6)
    assert report["mcmc"]["max_rhat"] < 1.05 and report["mcmc"]["num_chains"] == 2
    n_train = metrics["data"]["n_train"]
    assert report["prior"]["variance"] == pytest.approx(1 / (0.02 * n_train))
    assert report["prior"]["refit_map"] is False
    curves = json.loads((run_dir / "lambda_curves.json").read_text())
    assert curves["evidence"]["lambdas"] == [0.1, 1.0, 10.0, 100.0]
    assert len(curves["validation"]["scores"]["val_nll"]) == 4


def test_saved_posterior_is_the_closed_form_laplace(run_dir):
    state = torch.load(run_dir / "posterior.pt", weights_only=False)
    post = LaplacePosterior.from_state_dict(state["laplace"])
    assert state["samples"]["samples"].shape == (2, 150, 3)
    dm = GLMDataModule("gaussians2", dataset_options={"n_samples": 200}, batch_size=None)
    dm.setup()
    x, y = dm.split("train")
    ckpt = next((run_dir / "checkpoints").glob("*.ckpt"))
    saved = torch.load(ckpt, weights_only=False)
    w = saved["state_dict"]["model.linear.weight"][0]
    b = saved["state_dict"]["model.linear.bias"]
    torch.testing.assert_close(post.mean, torch.cat([w, b]))
    torch.testing.assert_close(saved["bayes_posterior"]["laplace"]["covariance"], post.covariance)
    # H = sum_i s_i (1 - s_i) x~_i x~_i^T + diag(1/lambda, 1/lambda, 0)   (lecture notes §14)
    xt = np.hstack([x.numpy(), np.ones((len(x), 1))])
    s = 1 / (1 + np.exp(-(xt @ post.mean.numpy())))
    H = (xt * (s * (1 - s))[:, None]).T @ xt + np.diag([1 / post.prior.variance] * 2 + [0.0])
    np.testing.assert_allclose(post.covariance.numpy(), np.linalg.inv(H), rtol=1e-8)
    cb = BayesianEvaluation()
    cb.on_load_checkpoint(None, None, saved)
    torch.testing.assert_close(cb.laplace.covariance, post.covariance)


def test_tensorboard_has_table_and_curves(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = {"scalars": [], "images": []}
    for f in run_dir.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(f))
        acc.Reload()
        for k in tags:
            tags[k] += acc.Tags()[k]
    for name in ("MAP", "Laplace", "Variational", "MCMC"):
        assert f"bayes/test_{name}/ece" in tags["scalars"]
    assert "bayes/lambda_curve/evidence/log_evidence" in tags["scalars"]
    assert "bayes/lambda_curves" in tags["images"]


def test_select_lambda_refits_and_softmax(tmp_path):
    run = tmp_path / "soft"
    args = [
        "--config",
        CONFIG,
        "--run_dir",
        str(run),
        "--data.source",
        "gaussians3",
        "--data.dataset_options",
        '{"n_samples": 150}',
        "--model.model",
        "torchglm.SoftmaxRegression",
        "--model.model.n_classes",
        "3",
        "--model.model.l2",
        "0.01",
        "--trainer.callbacks.num_chains",
        "0",
        "--trainer.callbacks.select_lambda",
        "evidence",
        "--trainer.callbacks.lambdas",
        "[0.1, 1.0, 10.0]",
        "--trainer.callbacks.mc_samples",
        "500",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args) == 0
    report = json.loads((run / "bayes.json").read_text())
    assert set(report["test"]) == {"MAP", "Laplace"}
    assert report["prior"]["variance"] == report["lambda_curves"]["evidence"]["best_lambda"]
    assert report["laplace"]["grad_norm"] < 1e-4  # the refitted MAP is the new prior's mode


def test_bad_arguments():
    from torchglm import InputError

    with pytest.raises(InputError, match="num_chains"):
        BayesianEvaluation(num_chains=1)
    with pytest.raises(InputError, match="select_lambda"):
        BayesianEvaluation(select_lambda="cv")
