"""Sample-weight and offset columns through train.py: Poisson with exposure and
binomial proportions with trials match statsmodels GLM fitted on the training split."""

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import torch

from torchglm import InputError
from torchglm.data import GLMDataModule
from torchglm.training.cli import main


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch.set_num_threads(n)


def _write(tmp_path: Path, family: str) -> Path:
    rng = np.random.default_rng(3)
    n = 400
    x = rng.normal(size=(n, 2))
    df = pd.DataFrame(x, columns=["a", "b"])
    if family == "poisson":
        exposure = rng.uniform(0.5, 3.0, size=n)
        df["log_exposure"] = np.log(exposure)
        df["y"] = rng.poisson(exposure * np.exp(0.3 + x @ [0.5, -0.4]))
    else:
        trials = rng.integers(1, 12, size=n).astype(float)
        df["trials"] = trials
        df["y"] = rng.binomial(trials.astype(int), 1 / (1 + np.exp(-(0.2 + x @ [0.8, -0.6])))) / trials
    path = tmp_path / f"{family}.csv"
    df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("family,column", [("poisson", "offset"), ("binomial", "weight")])
def test_weight_and_offset_columns_match_statsmodels(tmp_path, family, column):
    path = _write(tmp_path, family)
    name = "log_exposure" if column == "offset" else "trials"
    run_dir = tmp_path / "run"
    config = tmp_path / "config.yaml"
    config.write_text(f"""
model:
  model:
    class_path: torchglm.GeneralizedLinearModel
    init_args:
      family: {family}
  solver: irls
data:
  source: {path}
  target: y
  {column}: {name}
  standardize: false
  batch_size: 64
trainer:
  max_epochs: 50
  enable_progress_bar: false
""")
    code = main(["--config", str(config), "--run_dir", str(run_dir)])
    assert code == 0
    dm = GLMDataModule(str(path), target="y", standardize=False, **{column: name})
    dm.setup()
    idx = dm.split("train")
    x, y = (t.numpy() for t in idx)
    w, o = (None if t is None else t.numpy() for t in dm._extras["train"])
    assert dm.feature_names == ["a", "b"]
    fam = sm.families.Poisson() if family == "poisson" else sm.families.Binomial()
    ref = sm.GLM(y, sm.add_constant(x), family=fam, offset=o, var_weights=w).fit()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    state = torch.load(metrics["checkpoint"], weights_only=False)["state_dict"]
    coef = np.r_[state["model.linear.bias"].numpy(), state["model.linear.weight"].numpy().ravel()]
    np.testing.assert_allclose(coef, ref.params, rtol=1e-6, atol=1e-8)
    assert metrics["fit"]["converged"]


def test_weight_column_errors(tmp_path):
    path = _write(tmp_path, "binomial")
    with pytest.raises(InputError, match="weight: expected a column of"):
        GLMDataModule(str(path), target="y", weight="nope").setup()
    df = pd.read_csv(path)
    df.loc[3, "trials"] = -1.0
    df.to_csv(path, index=False)
    with pytest.raises(InputError, match="weight: expected non-negative sample weights"):
        GLMDataModule(str(path), target="y", weight="trials").setup()
    with pytest.raises(InputError, match="unset for the built-in dataset"):
        GLMDataModule("iris", weight="w").setup()
