"""``train.py`` on a CSV/TSV/Parquet table larger than ``data.memory_budget``: the table
is read chunk by chunk (never whole), the feature spec, labels and standardization are
gathered in passes over it, and the fit and predictions equal the in-memory ones."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from torchglm._validation import InputError
from torchglm.data import files, out_of_core
from torchglm.training.features import FeatureSpec, FillTally, LabelCodes, LevelTally

pytest.importorskip("pytorch_lightning")

from torchglm.training import sources, streamed_table  # noqa: E402
from torchglm.training.cli import main  # noqa: E402
from torchglm.training.data_module import GLMDataModule  # noqa: E402


def _table(n=600, seed=0, labels=("1", "2")):
    """x1, x2 numeric (some empty / NA cells), site a category A/B/C, w a weight,
    label two (or three) classes."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n) * 10 + 3, rng.normal(size=n)
    site = rng.choice(["A", "B", "C"], size=n)
    eta = 0.15 * (x1 - 3) - x2 + 1.0 * (site == "B")
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), labels[1], labels[0])
    if len(labels) > 2:
        y[::4] = labels[2]
    return pd.DataFrame(
        {
            "x1": ["" if i % 37 == 5 else f"{v:.6f}" for i, v in enumerate(x1)],
            "x2": ["NA" if i % 41 == 7 else f"{v:.6f}" for i, v in enumerate(x2)],
            "site": list(site),
            "w": [f"{v:.3f}" for v in rng.uniform(0.5, 2.0, size=n)],
            "label": list(y),
        }
    )


def _write(frame: pd.DataFrame, path):
    if path.suffix == ".parquet":
        frame.replace({"": None, "NA": None}).to_parquet(path)
        return path
    sep = "\t" if path.suffix == ".tsv" else ","
    rows = frame.to_numpy().tolist()
    # a byte-order mark and blank lines: the one reader's rules
    text = sep.join(frame.columns) + "\n\n" + "".join(sep.join(r) + "\n" for r in rows[:50])
    text += "\n" + "".join(sep.join(r) + "\n" for r in rows[50:])
    path.write_text("\ufeff" + text, encoding="utf-8")
    return path


def _config(tmp_path, source, model="LogisticRegression", **data):
    lines = ["model:", "  model:", f"    class_path: torchglm.{model}", "  solver: newton", "data:"]
    lines += [f"  source: {source}", "  target: label", "  batch_size: 64"]
    lines += [f"  {k}: {v}" for k, v in data.items()]
    lines += ["trainer:", "  max_epochs: 30"]
    path = tmp_path / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def small_chunks(monkeypatch):
    """A few dozen rows per parsed chunk, so a small table spans many chunks."""
    monkeypatch.setattr(out_of_core, "TABLE_CHUNK_CELLS", 150)


CASES = {
    # the file: BOM, a text category, empty and NA cells imputed, labels {1, 2}
    "csv": ("data.csv", "LogisticRegression", ("1", "2"), {"categorical": "[site]", "missing": "mean"}),
    "tsv": (
        "data.tsv",
        "SoftmaxRegression",
        ("ham", "spam", "eggs"),
        {"categorical": "[site]", "missing": "drop", "weight": "w"},
    ),
    "parquet": (
        "data.parquet",
        "LogisticRegression",
        ("no", "yes"),
        {"categorical": "[site]", "missing": "most_frequent"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_streamed_table_fits_and_predicts_as_in_memory(tmp_path, capsys, small_chunks, case):
    name, model, labels, data = CASES[case]
    frame = _table(labels=labels)
    path = _write(frame, tmp_path / name)
    # predicted rows without missing cells (``drop`` refuses them at prediction)
    new = _write(frame.replace({"": "0.25", "NA": "-1.5"}), tmp_path / f"new{path.suffix}")
    cfg = _config(tmp_path, path, model=model, **data)
    runs, preds = {}, {}
    for how, budget in (("loaded", "1GB"), ("streamed", "100")):
        run = tmp_path / how
        assert main(["--config", cfg, "--data.memory_budget", budget, "--run_dir", str(run)]) == 0, (
            capsys.readouterr().err
        )
        runs[how] = json.loads((run / "metrics.json").read_text())
        runs[how]["state"] = torch.load(run / "model.ckpt", weights_only=True)["state_dict"]
        out = tmp_path / f"{how}.csv"
        assert main(["predict", "--run_dir", str(run), "--input", str(new), "--output", str(out)]) == 0
        preds[how] = pd.read_csv(out)
    loaded, streamed = runs["loaded"], runs["streamed"]
    assert streamed["data"].pop("streamed") and "streamed" not in loaded["data"]
    assert streamed["data"] == loaded["data"]  # rows per split, classes, rows dropped
    assert streamed["fit"]["converged"]
    for k in ("model.linear.weight", "model.linear.bias", "feature_mean", "feature_scale"):
        key = next(s for s in loaded["state"] if s.endswith(k))
        torch.testing.assert_close(streamed["state"][key], loaded["state"][key], rtol=1e-9, atol=1e-9)
    assert streamed["test"]["nll"] == pytest.approx(loaded["test"]["nll"], rel=1e-9)
    a, b = preds["streamed"], preds["loaded"]
    assert list(a.columns) == list(b.columns) and (a["label"] == b["label"]).all()
    p = [c for c in a.columns if c.startswith("p_")]
    np.testing.assert_allclose(a[p], b[p], rtol=0, atol=1e-9)


def test_the_streamed_path_never_reads_the_table_whole(tmp_path, monkeypatch, small_chunks):
    """Chunks only, and a fixed number of parses: the scan passes (rows, fill values,
    encoding) read the text, the fit's passes read the encoded rows."""
    path = _write(_table(), tmp_path / "data.csv")

    def whole(*args, **kwargs):
        raise AssertionError("the table was read whole")

    chunked, parses = files.iter_frames, []

    def only_chunks(path, role="data file", chunk_rows=files.CHUNK_ROWS):
        if chunk_rows is None:
            whole()
        parses.append(path)
        return chunked(path, role, chunk_rows)

    for module in (files, sources):
        for reader in ("read_frame", "read_table"):
            if hasattr(module, reader):
                monkeypatch.setattr(module, reader, whole)
    for module in (files, streamed_table):
        monkeypatch.setattr(module, "iter_frames", only_chunks)
    run = tmp_path / "run"
    cfg = _config(tmp_path, path, categorical="[site]", missing="mean")
    assert main(["--config", cfg, "--data.memory_budget", "100", "--run_dir", str(run)]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["data"]["streamed"] and metrics["fit"]["epochs"] >= 4
    assert len(parses) == 3  # the scan, the fill values, the encoding


def test_the_encoded_rows_are_a_temporary_file_removed_after_the_fit_and_after_a_failure(
    tmp_path, monkeypatch, capsys, small_chunks
):
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    frame = _table()
    path = _write(frame, tmp_path / "data.csv")
    cfg = _config(tmp_path, path, categorical="[site]", missing="mean")
    written = []
    real = out_of_core.TemporaryNpy.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        written.append(self.path)

    monkeypatch.setattr(out_of_core.TemporaryNpy, "__init__", spy)
    assert main(["--config", cfg, "--data.memory_budget", "100", "--run_dir", str(tmp_path / "run")]) == 0
    assert len(written) == 1 and written[0].parent == scratch and not list(scratch.iterdir())
    # a run refused after the rows were encoded (sgd cannot take streamed rows)
    sgd = ["--config", cfg, "--model.solver", "sgd", "--data.memory_budget", "100"]
    assert main([*sgd, "--run_dir", str(tmp_path / "sgd")]) == 2
    assert len(written) == 2 and not list(scratch.iterdir())
    # a failure while the rows are encoded (an infinite cell) leaves nothing behind
    frame.loc[400, "x2"] = "inf"
    _write(frame, path)
    with pytest.raises(InputError, match="finite"):
        GLMDataModule(
            str(path), target="label", categorical=["site"], missing="mean", memory_budget=100
        ).setup("fit")
    assert len(written) == 3 and not list(scratch.iterdir())


def _setup_error(path, **kwargs) -> str:
    dm = GLMDataModule(str(path), target="label", batch_size=64, **kwargs)
    with pytest.raises(InputError) as err:
        dm.setup("fit")
    return str(err.value)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"categorical": ["site"]}, "column 'x1': expected no missing cells"),
        ({"missing": "mean"}, "row 0 column 'site': expected numeric values, got 'B'"),
        ({"categorical": ["nope"], "missing": "mean"}, "categorical: expected feature columns"),
        ({"categorical": ["site"], "missing": "drop", "features": ["x1", "label"]}, "features: expected"),
    ],
)
def test_a_streamed_table_refuses_what_memory_refuses_in_the_same_words(
    tmp_path, small_chunks, options, message
):
    """A missing cell under ``error`` names every row of the column (counted across
    chunks), text in a numeric column names its row: the in-memory messages."""
    path = _write(_table(), tmp_path / "data.csv")
    loaded = _setup_error(path, **options)
    assert message in loaded
    assert _setup_error(path, memory_budget=100, **options) == loaded


def test_rows_named_after_dropped_rows_are_counted_as_in_memory(tmp_path, small_chunks):
    """Under ``drop`` the rows are renumbered after the dropped ones, in memory and
    streamed alike (a bad cell in a later chunk)."""
    frame = _table()
    frame.loc[500, "x2"] = "oops"
    path = _write(frame, tmp_path / "data.csv")
    loaded = _setup_error(path, categorical=["site"], missing="drop")
    assert "column 'x2': expected numeric values, got 'oops'" in loaded
    assert _setup_error(path, categorical=["site"], missing="drop", memory_budget=100) == loaded


def test_an_unseen_level_at_predict_is_the_in_memory_error(tmp_path, capsys, small_chunks):
    path = _write(_table(), tmp_path / "data.csv")
    cfg = _config(tmp_path, path, categorical="[site]", missing="mean")
    new = _table(n=30, seed=3)
    new.loc[17, "site"] = "D"
    new_path = _write(new, tmp_path / "new.csv")
    errors = []
    for how, budget in (("loaded", "1GB"), ("streamed", "100")):
        run = tmp_path / how
        assert main(["--config", cfg, "--data.memory_budget", budget, "--run_dir", str(run)]) == 0
        capsys.readouterr()
        out = tmp_path / f"{how}.csv"
        assert main(["predict", "--run_dir", str(run), "--input", str(new_path), "--output", str(out)]) == 2
        errors.append(capsys.readouterr().err.strip())
    assert "row 17 column 'site': expected a level seen in training" in errors[0]
    assert errors[0] == errors[1]


def test_sgd_on_a_streamed_table_is_one_clear_error(tmp_path, capsys):
    path = _write(_table(), tmp_path / "data.csv")
    cfg = _config(tmp_path, path, categorical="[site]", missing="mean")
    run = tmp_path / "run"
    code = main(
        ["--config", cfg, "--model.solver", "sgd", "--data.memory_budget", "100", "--run_dir", str(run)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "data.memory_budget: expected a pass-based solver" in err[0]
    assert not run.exists()


def test_a_parquet_file_streams_by_its_uncompressed_size(tmp_path):
    path = _write(_table(), tmp_path / "data.parquet")
    size = out_of_core.file_bytes(path)
    assert size > 0 and size != path.stat().st_size
    kwargs = dict(target="label", categorical=["site"], missing="mean")
    for budget, streamed in ((size - 1, True), (size, False)):
        dm = GLMDataModule(str(path), memory_budget=budget, **kwargs)
        dm.setup("fit")
        assert dm.streamed is streamed


def test_label_codes_by_chunks_equal_one_chunk():
    """Text labels met after numbers in an earlier chunk: the same sorted classes and
    codes as the whole column; numbers stay numbers."""
    column = pd.Series(["2", "10", "b", "a", "10", "nan", "b"], dtype=object)
    whole, chunked = LabelCodes(), LabelCodes()
    whole.add(column)
    for k in range(0, len(column), 2):
        chunked.add(column.iloc[k : k + 2])
    (y1, c1), (y2, c2) = whole.result(), chunked.result()
    assert c1 == c2 == ["10", "2", "a", "b", "nan"]
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, [1, 0, 3, 2, 0, 4, 3])
    numbers = LabelCodes()
    numbers.add(pd.Series(["1", "2", " nan"], dtype=object))
    y, classes = numbers.result()
    assert classes is None and y[:2].tolist() == [1.0, 2.0] and np.isnan(y[2])


def test_the_feature_spec_fit_is_a_sum_over_chunks():
    """FeatureSpec.fit (one chunk) and the tallies over many chunks give the same
    levels and fill values."""
    frame = _table(n=200).drop(columns=["label"]).replace({"": None, "NA": None})
    train = np.arange(200) % 3 != 0
    for missing in ("mean", "most_frequent"):
        one = FeatureSpec(["site"], missing)
        one.fit(frame, ["x1", "x2", "site"], np.flatnonzero(train))
        many = FeatureSpec(["site"], missing)
        many.start_fit(["x1", "x2", "site"])
        levels = LevelTally(["site"])
        for k in range(0, 200, 30):
            levels.add(frame.iloc[k : k + 30])
        many.levels = levels.result("data")
        fills = FillTally(many)
        for k in range(0, 200, 30):
            fills.add(frame.iloc[k : k + 30], train[k : k + 30], "data", k)
        many.fill = fills.result("data")
        assert many.levels == one.levels and many.fill.keys() == one.fill.keys()
        assert many.fill["site"] == one.fill["site"]
        for c in ("x1", "x2"):  # partial sums added exactly: equal to rounding
            assert many.fill[c] == pytest.approx(one.fill[c], rel=1e-14)


def test_a_streamed_table_refuses_magnitudes_as_memory_does(tmp_path, small_chunks):
    frame = _table()
    frame["x1"] = [c if c == "" else f"{float(c) * 1e200:.6g}" for c in frame["x1"]]
    path = _write(frame, tmp_path / "data.csv")
    options = {"categorical": ["site"], "missing": "mean", "standardize": False}
    loaded = _setup_error(path, **options)
    assert "sums of squares cannot overflow" in loaded
    assert _setup_error(path, memory_budget=100, **options) == loaded
