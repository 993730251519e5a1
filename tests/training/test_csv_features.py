"""Real tables through ``train.py`` and ``torchglm predict``: a header with a byte-order
mark, a text category, empty and ``NA`` cells, labels that are not ``0..K-1``, a
target named ``label``, CSV/TSV/Parquet by suffix; the feature spec (levels, fill
values, classes) stored with the model and applied at prediction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from torchglm._validation import InputError
from torchglm.training.features import FeatureSpec

pytest.importorskip("pytorch_lightning")

from torchglm.training.cli import main  # noqa: E402
from torchglm.training.data_module import GLMDataModule  # noqa: E402


def _table(n=240, seed=0, labels=(1, 2)):
    """x1, x2 numeric (some empty / NA cells), site a category A/B/C, label two classes."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    site = rng.choice(["A", "B", "C"], size=n)
    eta = 1.5 * x1 - x2 + 1.0 * (site == "B")
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), labels[1], labels[0])
    cells = {
        "x1": ["" if i % 37 == 5 else f"{v:.6f}" for i, v in enumerate(x1)],
        "x2": ["NA" if i % 41 == 7 else f"{v:.6f}" for i, v in enumerate(x2)],
        "site": list(site),
        "label": [str(v) for v in y],
    }
    return pd.DataFrame(cells)


def _write_csv(frame: pd.DataFrame, path, bom=True, sep=","):
    text = sep.join(frame.columns) + "\n" + "".join(sep.join(r) + "\n" for r in frame.to_numpy().tolist())
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def _config(tmp_path, source, model="LogisticRegression", **data):
    lines = [
        "model:",
        "  model:",
        f"    class_path: torchglm.{model}",
        "  solver: newton",
        "data:",
        f"  source: {source}",
        "  target: label",
    ]
    lines += [f"  {k}: {v}" for k, v in data.items()]
    lines += ["trainer:", "  max_epochs: 30"]
    path = tmp_path / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_the_issue_csv_trains_and_predicts_its_own_labels(tmp_path, capsys):
    """The done-when file: header with a BOM, a text category, empty and NA cells,
    labels {1, 2}, target 'label'; the config names only the target and the category
    (plus the missing-value policy). Predictions carry the file's labels."""
    frame = _table()
    data = _write_csv(frame, tmp_path / "real.csv")
    cfg = _config(tmp_path, data, categorical="[site]", missing="mean")
    run = tmp_path / "run"
    assert main(["--config", cfg, "--run_dir", str(run)]) == 0
    out = tmp_path / "pred.csv"
    assert main(["predict", "--run_dir", str(run), "--input", str(data), "--output", str(out)]) == 0
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["p_1", "p_2", "label"]
    assert set(pred["label"]) <= {1, 2} and len(pred) == len(frame)
    np.testing.assert_allclose(pred["p_1"] + pred["p_2"], 1.0, rtol=0, atol=1e-12)
    # the label is the more probable class, written as the file's own label
    np.testing.assert_array_equal(pred["label"], np.where(pred["p_2"] > 0.5, 2, 1))

    # the stored spec: levels, fill values (the training split's means) and classes
    ckpt = torch.load(run / "model.ckpt", weights_only=True)
    state = ckpt["GLMDataModule"]
    assert state["classes"] == [1, 2]
    assert state["features"]["levels"] == {"site": ["A", "B", "C"]}
    dm = GLMDataModule(str(data), target="label", categorical=["site"], missing="mean")
    dm.setup("fit")
    train = dm._parts(len(frame))["train"].numpy()
    x1 = pd.to_numeric(frame["x1"].replace("", np.nan)).to_numpy()[train]
    assert state["features"]["fill"]["x1"] == pytest.approx(np.nanmean(x1), rel=1e-15)
    assert dm.feature_names == ["x1", "x2", "site=B", "site=C"]


def test_the_encoding_is_treatment_contrasts_and_prediction_applies_the_same_spec():
    """One-hot with the first sorted level as reference, fill values applied at
    transform, an unseen level refused with one message."""
    frame = pd.DataFrame({"x": ["1", None, "3", "5"], "site": ["b", "a", None, "c"]})
    spec = FeatureSpec(categorical=["site"], missing="most_frequent")
    spec.fit(frame, ["x", "site"], np.array([0, 1, 2]))
    assert spec.names == ["x", "site=b", "site=c"]
    assert spec.fill == {"x": 1.0, "site": "a"}  # a tie goes to the smallest value
    x = spec.transform(frame, "data")
    np.testing.assert_array_equal(x, [[1, 1, 0], [1, 0, 0], [3, 0, 0], [5, 0, 1]])
    again = FeatureSpec.from_state(spec.state())
    np.testing.assert_array_equal(again.transform(frame, "data"), x)
    with pytest.raises(InputError, match=r"row 1 column 'site': expected a level seen in training .*got 'z'"):
        again.transform(pd.DataFrame({"x": ["1", "2"], "site": ["a", "z"]}), "input")
    spec = FeatureSpec(missing="mean")
    spec.fit(frame[["x"]], ["x"], np.arange(4))
    assert spec.fill == {"x": 3.0}


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"categorical": "[site]"},
            "column 'x1': expected no missing cells (or data.missing: drop, mean or "
            "most_frequent), got missing cells in 7 rows (5, 42, 79, 116, 153, 190, 227) (rows from 0)",
        ),
        (
            {"missing": "mean"},
            "row 0 column 'site': expected numeric values, got 'A' (a category? list the column "
            "in data.categorical)",
        ),
        ({"missing": "sometimes"}, "missing"),
        ({"categorical": "[nope]", "missing": "drop"}, "categorical: expected feature columns of the data"),
    ],
)
def test_one_clear_error(tmp_path, capsys, data, message):
    path = _write_csv(_table(), tmp_path / "real.csv")
    cfg = _config(tmp_path, path, **data)
    assert main(["--config", cfg, "--run_dir", str(tmp_path / "run")]) == 2
    assert message in _one_error(capsys)
    assert not (tmp_path / "run").exists()


def test_drop_drops_rows_and_prediction_refuses_a_missing_cell(tmp_path, capsys):
    frame = _table()
    path = _write_csv(frame, tmp_path / "real.csv")
    cfg = _config(tmp_path, path, categorical="[site]", missing="drop")
    run = tmp_path / "run"
    assert main(["--config", cfg, "--run_dir", str(run)]) == 0
    import json

    summary = json.loads((run / "metrics.json").read_text())["data"]
    assert summary["rows_dropped"] == 7 + 6 and summary["classes"] == [1, 2]
    capsys.readouterr()
    out = tmp_path / "p.csv"
    assert main(["predict", "--run_dir", str(run), "--input", str(path), "--output", str(out)]) == 2
    assert "missing cells in 13 rows (5, 7, 42, 48" in _one_error(capsys)
    assert not out.exists()


def test_softmax_without_n_classes_text_labels_tsv_and_parquet(tmp_path, capsys):
    """SoftmaxRegression in a config without n_classes (a parser error about
    typing.Callable before): the data's three text labels; a TSV and a Parquet file;
    predictions written as Parquet (CSV text before) with the text labels."""
    frame = _table()
    frame["label"] = np.where(frame["label"] == "1", "ham", "spam")
    frame.loc[::3, "label"] = "eggs"
    tsv = _write_csv(frame, tmp_path / "real.tsv", bom=False, sep="\t")
    parquet = tmp_path / "real.parquet"
    frame.replace({"": None, "NA": None}).to_parquet(parquet)
    preds = {}
    for source in (tsv, parquet):
        run = tmp_path / f"run_{source.suffix[1:]}"
        cfg = _config(tmp_path, source, model="SoftmaxRegression", categorical="[site]", missing="mean")
        assert main(["--config", cfg, "--run_dir", str(run)]) == 0, capsys.readouterr().err
        out = tmp_path / f"pred_{source.suffix[1:]}.parquet"
        assert main(["predict", "--run_dir", str(run), "--input", str(source), "--output", str(out)]) == 0
        assert out.read_bytes()[:4] == b"PAR1"
        preds[source.suffix] = pd.read_parquet(out)
    a, b = preds[".tsv"], preds[".parquet"]
    assert list(a.columns) == ["p_eggs", "p_ham", "p_spam", "label"]
    assert set(a["label"]) <= {"eggs", "ham", "spam"}
    # the same table through either format: the same model and predictions
    np.testing.assert_allclose(a[["p_eggs", "p_ham", "p_spam"]], b[["p_eggs", "p_ham", "p_spam"]], atol=1e-10)


def test_labels_beyond_a_binary_model_stay_refused(tmp_path):
    """Three distinct labels for a two-class model: still the target gate's message."""
    frame = _table()
    frame.loc[::5, "label"] = "3"
    path = _write_csv(frame, tmp_path / "three.csv")
    dm = GLMDataModule(str(path), target="label", categorical=["site"], missing="mean")
    dm.setup("fit")
    assert dm.class_count() == 3
    with pytest.raises(InputError, match=r"y: expected labels in \{0, ..., 1\}, got label 3"):
        dm.check_labels(2)


def test_a_file_suffix_is_never_taken_for_a_builtin_dataset(tmp_path):
    """An absent .tsv was looked up as a built-in dataset ('expected unset for the
    built-in dataset')."""
    with pytest.raises(InputError, match="data file: expected an existing file"):
        GLMDataModule(str(tmp_path / "absent.tsv"), target="label").setup("fit")


def test_predict_refuses_an_unknown_output_suffix(tmp_path, capsys):
    path = _write_csv(_table(), tmp_path / "real.csv")
    run = tmp_path / "run"
    assert (
        main(
            ["--config", _config(tmp_path, path, categorical="[site]", missing="mean"), "--run_dir", str(run)]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "p.txt"
    assert main(["predict", "--run_dir", str(run), "--input", str(path), "--output", str(out)]) == 2
    assert "output: expected a file ending in one of ['.csv', '.tsv', '.parquet', '.npz']" in _one_error(
        capsys
    )
    assert not out.exists()
