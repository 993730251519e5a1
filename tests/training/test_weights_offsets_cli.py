"""Sample-weight and offset columns through train.py: Poisson with exposure and
binomial proportions with trials match statsmodels GLM fitted on the training split."""

import json
from pathlib import Path

import re

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import torch

from torchglm import InputError
from torchglm.training import GLMDataModule
from torchglm.training.cli import main


pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore")]


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


def _train(tmp_path: Path, family: str, column: str, name: str, standardize: bool) -> tuple[Path, Path]:
    """An IRLS train.py run on ``_write``'s file with the ``data.<column>: <name>`` column."""
    path = _write(tmp_path, family)
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
  standardize: {str(standardize).lower()}
  batch_size: 64
trainer:
  max_epochs: 50
  enable_progress_bar: false
""")
    assert main(["--config", str(config), "--run_dir", str(run_dir)]) == 0
    return path, run_dir


@pytest.mark.parametrize("family,column", [("poisson", "offset"), ("binomial", "weight")])
def test_weight_and_offset_columns_match_statsmodels(tmp_path, family, column):
    name = "log_exposure" if column == "offset" else "trials"
    path, run_dir = _train(tmp_path, family, column, name, standardize=False)
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


def test_predict_adds_the_offset_column(tmp_path, capsys):
    """A model trained with ``data.offset: log_exposure`` predicts
    ``exp(b + x w + log_exposure)``: equal to statsmodels' ``GLM.predict(exog,
    offset=...)`` of the same fit on the training split (features standardized by the
    run, the offset not), from a CSV (the column among others, in any order) and from an
    NPZ of column arrays. A file without the column is one ``error:`` line, exit 2."""
    path, run_dir = _train(tmp_path, "poisson", "offset", "log_exposure", standardize=True)
    dm = GLMDataModule(str(path), target="y", offset="log_exposure")
    dm.setup()
    x_tr, y_tr = (t.numpy() for t in dm.split("train"))
    o_tr = dm._extras["train"][1].numpy()
    ref = sm.GLM(y_tr, sm.add_constant(x_tr), family=sm.families.Poisson(), offset=o_tr).fit()
    df = pd.read_csv(path)
    new = df.sample(frac=1.0, random_state=1).iloc[:60]
    new = new[["log_exposure", "y", "b", "a"]]  # other order, target kept
    z = (new[["a", "b"]].to_numpy() - dm.feature_mean.numpy()) / dm.feature_scale.numpy()
    want = ref.predict(sm.add_constant(z, has_constant="add"), offset=new["log_exposure"].to_numpy())
    inp, out = tmp_path / "new.csv", tmp_path / "pred.csv"
    new.to_csv(inp, index=False)
    assert main(["predict", "--run_dir", str(run_dir), "--input", str(inp), "--output", str(out)]) == 0
    got = pd.read_csv(out)["mean"].to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # the offset matters here: without it the means would be off by the exposure
    assert np.abs(np.log(got) - np.log(want / np.exp(new["log_exposure"].to_numpy()))).max() > 0.5
    npz, out_npz = tmp_path / "new.npz", tmp_path / "pred.npz"
    np.savez(npz, **{c: new[c].to_numpy() for c in new.columns})
    assert main(["predict", "--run_dir", str(run_dir), "--input", str(npz), "--output", str(out_npz)]) == 0
    np.testing.assert_allclose(np.load(out_npz)["mean"], want, rtol=1e-6)
    capsys.readouterr()

    def refused(frame_or_path, message):
        code = main(
            [
                "predict",
                "--run_dir",
                str(run_dir),
                "--input",
                str(frame_or_path),
                "--output",
                str(tmp_path / "never.csv"),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert (
            len(err) == 1
            and err[0].startswith("error: input: expected the offset column 'log_exposure'")
            and message in err[0]
        ), err
        assert not (tmp_path / "never.csv").exists()

    no_offset = tmp_path / "no_offset.csv"
    new[["a", "b"]].to_csv(no_offset, index=False)
    refused(no_offset, "with columns [a, b]")
    no_header = tmp_path / "no_header.csv"
    new[["a", "b", "log_exposure"]].to_csv(no_header, index=False, header=False)
    refused(no_header, "its columns have no names")
    plain = tmp_path / "plain.npy"
    np.save(plain, new[["a", "b"]].to_numpy())
    refused(plain, "its columns have no names")
    npz_without = tmp_path / "without.npz"
    np.savez(npz_without, a=new["a"].to_numpy(), b=new["b"].to_numpy())
    refused(npz_without, "with columns [a, b]")


def test_a_numeric_file_takes_its_roles_as_a_table_does(tmp_path):
    """The weight/offset and feature checks of a numeric .npz are the table's
    (one function): the same words, and a file left without a feature column is refused."""
    rng = np.random.default_rng(0)
    columns = {"a": rng.normal(size=40), "w": rng.uniform(1, 2, size=40), "y": rng.integers(0, 2, size=40)}
    np.savez(tmp_path / "d.npz", **columns)
    pd.DataFrame(columns).to_csv(tmp_path / "d.csv", index=False)
    for options, message in (
        ({"weight": "w", "features": ["a", "w"]}, "features: expected feature columns of '{}' other than"),
        ({"weight": "w", "features": []}, "data file '{}': expected at least one feature column"),
    ):
        for name in ("d.npz", "d.csv"):
            path = str(tmp_path / name)
            with pytest.raises(InputError, match=re.escape(message.format(path))):
                GLMDataModule(path, target="y", **options).setup()
