"""configs/glm_*.yaml under train.py with the InferenceSummary callback.

The summary written to the run directory must equal statsmodels' GLM on the same
training split (the data module's split, rebuilt here from its own arguments).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm

from torchglm.training import GLMDataModule
from torchglm.training.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("glm_*.yaml"))


pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _run(config, tmp_path, *overrides):
    run_dir = tmp_path / "run"
    assert main(["--config", str(config), "--run_dir", str(run_dir), *overrides]) == 0
    return run_dir


def test_poisson_config_summary_matches_statsmodels_on_the_training_split(tmp_path, capsys):
    run_dir = _run(
        ROOT / "configs" / "glm_poisson.yaml",
        tmp_path,
        "--data.dataset_options.n_samples",
        "500",
        "--model.solver_options",
        '{"tol": 1e-20, "gtol": 1e-13}',
    )
    out = capsys.readouterr().out
    assert "Generalized linear model results" in out and "intercept" in out
    text = (run_dir / "summary.txt").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["family"] == "poisson" and summary["solver"] == "newton" and summary["converged"]
    assert "x0" in text and "Deviance" in text
    dm = GLMDataModule(
        "glm_poisson", dataset_options={"n_samples": 500, "n_features": 3}, batch_size=None, standardize=False
    )
    dm.setup("fit")
    x, y = dm.split("train")
    r = sm.GLM(y.numpy(), sm.add_constant(x.numpy(), prepend=False), family=sm.families.Poisson()).fit(
        tol=1e-14
    )
    coef = summary["coefficients"]
    names = ["x0", "x1", "x2", "intercept"]
    np.testing.assert_allclose([coef[n]["coef"] for n in names], r.params, rtol=1e-6)
    np.testing.assert_allclose([coef[n]["std_err"] for n in names], r.bse, rtol=1e-6)
    for k in ("llf", "deviance", "null_deviance", "aic", "bic"):
        assert summary[k] == pytest.approx(float(getattr(r, k)), rel=1e-6), k


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_glm_config_runs_and_writes_a_converged_summary(config, tmp_path):
    run_dir = _run(config, tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["converged"] is True
    assert all(v["std_err"] is not None and v["std_err"] > 0 for v in summary["coefficients"].values())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["fit"]["converged"] is True


@pytest.mark.parametrize(
    "solver_args",
    [
        pytest.param(
            [
                "--model.solver",
                "sgd",
                "--model.optimizer",
                "torch.optim.Adam",
                "--model.optimizer.lr",
                "0.01",
                "--trainer.max_epochs",
                "300",
                "--data.batch_size",
                "50",
                "--early_stopping.patience",
                "1000",
            ],
            marks=pytest.mark.slow,
            id="sgd-adam",
        ),
        pytest.param(["--model.solver", "lbfgs"], id="lbfgs"),
    ],
)
def test_poisson_config_with_other_solvers_reaches_the_newton_estimate(solver_args, tmp_path):
    newton = json.loads(
        (
            _run(
                ROOT / "configs" / "glm_poisson.yaml",
                tmp_path / "a",
                "--data.dataset_options.n_samples",
                "500",
            )
            / "summary.json"
        ).read_text()
    )
    other = json.loads(
        (
            _run(
                ROOT / "configs" / "glm_poisson.yaml",
                tmp_path / "b",
                "--data.dataset_options.n_samples",
                "500",
                *solver_args,
            )
            / "summary.json"
        ).read_text()
    )
    for name, c in newton["coefficients"].items():
        # SGD ends near, not at, the optimum: within a fifth of a standard error
        assert other["coefficients"][name]["coef"] == pytest.approx(c["coef"], abs=0.2 * c["std_err"]), name
