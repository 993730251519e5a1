"""The console (quiet by default, -v), --help, the torchglm entry point,
predict's input handling and what a run logs to TensorBoard."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from run_util import TINY, run_train_py
from torchglm import InputError
from torchglm.solvers import SOLVERS
from torchglm.training.cli import main
from torchglm.training.entry import MODELS
from torchglm.training.entry import main as entry_main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def test_quiet_console_without_a_terminal_and_verbose(tmp_path):
    proc = run_train_py("--config", TINY, "--run_dir", str(tmp_path / "q"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the results table only: no tips, banners, warnings or progress-bar control characters
    assert proc.stderr == ""
    assert len(proc.stdout) < 1000 and len(proc.stdout.splitlines()) <= 10, proc.stdout
    for noise in ("Tip", "GPU available", "Warning", "\r", "\x1b"):
        assert noise not in proc.stdout
    verbose = run_train_py("--config", TINY, "--run_dir", str(tmp_path / "v"), "-v", cwd=tmp_path)
    assert verbose.returncode == 0
    assert "GPU available" in verbose.stdout + verbose.stderr


def test_short_help_lists_models_solvers_and_predict_without_lightning():
    code = (
        "import sys; from torchglm.training.entry import main; main(['--help']); "
        "print('lightning imported:', 'pytorch_lightning' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=ENV, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.rstrip().endswith("lightning imported: False")
    assert len(text.splitlines()) < 60
    for name in [*SOLVERS, "sgd", "auto", "closed_form", "predict", "figures", "--config", "--help-all"]:
        assert name in text, name
    for model in MODELS:
        assert f"torchglm.{model}" in text
        import torchglm

        assert hasattr(torchglm, model)  # the list names real classes


def test_no_arguments_hints_at_config(capsys):
    assert entry_main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--config" in err[0]


def test_console_entry_point_declared_and_train_py_is_its_alias():
    text = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python >= 3.11 only)
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    assert 'torchglm = "torchglm.training.entry:main"' in section
    assert "from torchglm.training.entry import main" in (ROOT / "train.py").read_text()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("console") / "run"
    assert (
        main(
            [
                "--config",
                TINY,
                "--run_dir",
                str(run),
                "--model.solver",
                "newton",
                "--model.model.init_args.l2",
                "0.01",
                "--trainer.max_epochs",
                "50",
                "--trainer.callbacks+=torchglm.training.inference_callback.InferenceSummary",
                "--trainer.callbacks.verbose",
                "false",
            ]
        )
        == 0
    )
    return run


def _rows(path: Path, header: bool, bom: bool = False, extra: bool = False) -> Path:
    x = np.random.default_rng(0).normal(size=(5, 2))
    lines = [("\ufeff" if bom else "") + ("x0,x1,note" if extra else "x0,x1")] if header else []
    lines += [f"{float(a)!r},{float(b)!r}" + (",7" if extra else "") for a, b in x]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _predict(run_dir: Path, data: Path, out: Path, *extra: str) -> int:
    return main(["predict", "--run_dir", str(run_dir), "--input", str(data), "--output", str(out), *extra])


def test_predict_header_detection_bom_and_named_extra_columns(tmp_path, run_dir):
    want = tmp_path / "want.csv"
    assert _predict(run_dir, _rows(tmp_path / "h.csv", header=True), want) == 0
    for name, kwargs, extra in [
        ("nohead.csv", {"header": False}, []),
        ("nohead_forced.csv", {"header": False}, ["--no-header"]),
        ("bom.csv", {"header": True, "bom": True}, []),
        ("named_extra.csv", {"header": True, "extra": True}, ["--header"]),
    ]:
        out = tmp_path / f"out_{name}"
        assert _predict(run_dir, _rows(tmp_path / name, **kwargs), out, *extra) == 0, name
        assert out.read_text() == want.read_text(), name


@pytest.mark.parametrize(
    "case, message",
    [
        (
            "nohead_wide",
            (
                "expected the model's 2 feature columns [x0, x1] (2 columns) (a CSV without a header is "
                "matched by position), got"
            ),
        ),
        (
            "missing",
            (
                "expected the model's feature columns [x0, x1] (2 columns) (by name; --no-header to match them "
                "by position), got"
            ),
        ),
        ("npz_wide", "expected an 'X' array with the model's 2 feature columns"),
        ("npy_wide", "expected a 2-D array with the model's 2 feature columns"),
        ("directory", "input: expected a data file, got"),
    ],
)
def test_predict_rejects_inputs_with_a_clear_line(tmp_path, capsys, run_dir, case, message):
    x = np.random.default_rng(0).normal(size=(5, 5))
    if case == "nohead_wide":
        data = tmp_path / "d.csv"
        data.write_text("".join(",".join(map(repr, map(float, r))) + "\n" for r in x))
    elif case == "missing":
        data = tmp_path / "d.csv"
        data.write_text("x0,other\n1.0,2.0\n")
    elif case == "npz_wide":
        data = tmp_path / "d.npz"
        np.savez(data, X=x)
    elif case == "npy_wide":
        data = tmp_path / "d.npy"
        np.save(data, x)
    else:
        data = tmp_path
    assert _predict(run_dir, data, tmp_path / "o.csv") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and len(err[0]) < 400 and message in err[0], err
    assert not (tmp_path / "o.csv").exists()


def test_tensorboard_hparams_history_and_summary(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = json.loads((run_dir / "metrics.json").read_text())
    scalars, tensors, hparams = {}, set(), False
    for events in run_dir.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend(e.step for e in acc.Scalars(tag))
        tensors |= set(acc.Tags()["tensors"])
        hparams |= "_hparams_/session_start_info" in acc.summary_metadata
    # the whole solver history, one point per accepted iteration (and the start)
    n_iter = metrics["fit"]["n_iter"]
    assert sorted(scalars["fit_history/loss"]) == list(range(n_iter + 1))
    assert "fit_history/newton_decrement" in scalars and "fit_history/grad_norm" in scalars
    assert "final/test_nll" in scalars  # the final metrics, beside the hparams
    assert hparams
    assert {"glm_summary/text_summary", "fit/text_summary"} <= tensors


def test_heartbeat_reports_long_fits(tmp_path, capsys):
    """A long fit without a progress bar prints a line per `every` seconds (here: every epoch)."""
    assert (
        main(
            [
                "--config",
                TINY,
                "--run_dir",
                str(tmp_path / "run"),
                "--model.solver",
                "lbfgs",
                "--model.model.init_args.l2",
                "0.01",
                "--trainer.max_epochs",
                "4",
                "--trainer.callbacks+=torchglm.training.progress.Heartbeat",
                "--trainer.callbacks.every",
                "0",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"epoch {i}" for i in range(4)]
    # the first pass evaluates the (intercept-only) start; then every line shows the solver's state
    assert all("loss" in line and "grad_norm" in line for line in lines[1:])


def test_warnings_are_one_line_without_library_paths(tmp_path):
    proc = run_train_py(
        "--config",
        TINY,
        "--run_dir",
        str(tmp_path / "w"),
        "--model.solver",
        "newton",
        "--trainer.max_epochs",
        "2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "ConvergenceWarning: stopped by the trainer after 2 passes, before the 'newton' solver's stopping rule held"
    ]


def test_predict_streams_in_blocks_with_the_same_output(tmp_path, run_dir, monkeypatch):
    """Blocks of 7 rows (CSV, plain and structured .npy, NPZ; CSV and NPZ outputs) give
    the output of one block (same columns and format; values to the last bits, which
    the matrix product may round differently for another number of rows); a bad row in
    a later block names its row in the whole input and leaves no output and no
    temporary file."""
    import torchglm.training.predict as predict_module

    x = np.random.default_rng(3).normal(size=(50, 2))
    body = [f"{float(a)!r},{float(b)!r}" for a, b in x]
    inputs = {"csv": tmp_path / "rows.csv", "npy": tmp_path / "rows.npy"}
    inputs["csv"].write_text("\n".join(["x0,x1", *body]) + "\n")
    np.save(inputs["npy"], x)
    inputs["npy_fields"] = tmp_path / "fields.npy"
    fields = np.zeros(50, dtype=[("note", "f8"), ("x1", "f8"), ("x0", "f8")])
    fields["x0"], fields["x1"] = x[:, 0], x[:, 1]
    np.save(inputs["npy_fields"], fields)
    inputs["npz"] = tmp_path / "rows.npz"
    np.savez(inputs["npz"], X=x)
    for kind, data in inputs.items():
        for suffix in ("csv", "npz"):
            outs = []
            for rows in (10**6, 7):
                monkeypatch.setattr(predict_module, "CHUNK_ROWS", rows)
                out = tmp_path / f"{kind}_{rows}.{suffix}"
                assert _predict(run_dir, data, out) == 0, (kind, suffix)
                if suffix == "csv":
                    text = out.read_text().splitlines()
                    assert text[0] == "p_0,p_1,label" and len(text) == 51
                    table = np.array([[float(v) for v in line.split(",")] for line in text[1:]])
                    outs.append({"proba": table[:, :2], "label": table[:, 2]})
                    assert all(line.split(",")[2] in ("0", "1") for line in text[1:])
                else:
                    outs.append(dict(np.load(out)))
            assert outs[0].keys() == outs[1].keys() == {"proba", "label"}
            np.testing.assert_array_equal(outs[0]["label"], outs[1]["label"])
            np.testing.assert_allclose(outs[0]["proba"], outs[1]["proba"], rtol=1e-14, atol=0)
            assert outs[1]["proba"].shape == (50, 2)
    bad = tmp_path / "bad"
    bad.mkdir()
    body[30] = "1.0,nan"
    (bad / "in.csv").write_text("\n".join(["x0,x1", *body]) + "\n")
    monkeypatch.setattr(predict_module, "CHUNK_ROWS", 7)
    with pytest.raises(InputError, match=r"X: expected finite values .* first at index \(30, 1\)"):
        predict_module.predict(run_dir / "model.ckpt", bad / "in.csv", bad / "out.csv")
    assert sorted(p.name for p in bad.iterdir()) == ["in.csv"]


def test_a_model_predicts_on_its_own_training_file_with_a_byte_order_mark(tmp_path):
    """The training reader kept a byte-order mark in the first column name while predict
    dropped it: the model's first feature was then missing from its own training file."""
    from torchglm.data import read_table
    from torchglm.training.predict import read_inputs

    x = np.random.default_rng(0).normal(size=(6, 2))
    path = tmp_path / "excel.csv"
    lines = ["\ufeffx0,x1,y"] + [f"{float(a)!r},{float(b)!r},{i % 2}" for i, (a, b) in enumerate(x)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = read_table(path, "y")
    assert table.feature_names == ["x0", "x1"]
    np.testing.assert_array_equal(read_inputs(path, table.feature_names)[0], x)
