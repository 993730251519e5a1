"""No file runs code when torchglm reads it.

A payload is a real checkpoint (``torch.save`` of a finished run's dict) with a
pickled object whose ``__reduce__`` creates a marker file, placed in various keys;
or a checkpoint of plain data whose hyper-parameters name a function or a module
that would run code when the loader imports and calls it. Every path that reads a
checkpoint (``torchglm predict --ckpt_path`` and ``--run_dir``, ``train --resume``,
the CLI's ``trainer.fit/validate/test(ckpt_path=...)``, ``GLMTask.load_from_checkpoint``,
``load_checkpoint``, ``predict()``) is fed every payload: the marker must never
appear, and the CLI answers with one ``error:`` line and exit status 2. NumPy
inputs (``.npy``/``.npz`` with object arrays, i.e. pickles) likewise.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from torchglm import InputError
from torchglm.training import cli
from torchglm.training.checkpoints import load_checkpoint
from torchglm.training.cli import main
from torchglm.training.predict import predict
from torchglm.training.task import GLMTask
from run_util import one_error, snapshot

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
EVIL_MODULE = "torchglm_test_evil_module"

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


class Payload:
    """Unpickling it calls ``open(marker, "w")``: the marker file appears."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _pickled(ckpt: dict, marker: Path, where: str) -> dict:
    if where == "top_level":
        ckpt["extra"] = Payload(marker)
    elif where == "hyper_parameters":
        ckpt["hyper_parameters"]["solver_options"] = {"tol": Payload(marker)}
    elif where == "callback_state":
        key = next(iter(ckpt["callbacks"]))
        ckpt["callbacks"][key]["extra"] = Payload(marker)
    elif where == "torchglm_record":
        ckpt["torchglm"]["fit_seconds"] = Payload(marker)
    elif where == "state_dict":
        ckpt["state_dict"]["model.extra"] = Payload(marker)
    return ckpt


# Plain data that would run code if the loader imported and called what it names.
def _named(ckpt: dict, marker: Path, where: str) -> dict:
    hp = ckpt["hyper_parameters"]
    if where == "class_path_function":  # jsonargparse calls os.system(command=...)
        hp["model"] = {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}
    elif where == "class_path_import":  # importing the module creates the marker
        hp["model"] = {"class_path": f"{EVIL_MODULE}.Model", "init_args": {}}
    elif where == "nested_import":  # a dotted string jsonargparse may import
        hp["model"]["init_args"]["l2"] = 0.001
        hp["optimizer"] = {"class_path": "torch.optim.SGD", "init_args": {"lr": f"{EVIL_MODULE}.rate"}}
    elif where == "basis_not_a_module":
        hp["basis"] = {"class_path": "subprocess.Popen", "init_args": {"args": ["touch", str(marker)]}}
    elif where == "class_path_under_any":  # solver_options is dict[str, Any]: jsonargparse builds it
        hp["solver_options"] = {
            "x": {"class_path": "subprocess.Popen", "init_args": {"args": f"touch {marker}", "shell": True}}
        }
    elif where == "callable_string":  # a Callable argument resolves the string to os.system
        hp["lr_scheduler"] = {
            "class_path": "torch.optim.lr_scheduler.LambdaLR",
            "init_args": {"lr_lambda": "os.system"},
        }
    return ckpt


PICKLED = ["top_level", "hyper_parameters", "callback_state", "torchglm_record", "state_dict"]
NAMED = [
    "class_path_function",
    "class_path_import",
    "nested_import",
    "basis_not_a_module",
    "class_path_under_any",
    "callable_string",
]
PAYLOADS = PICKLED + NAMED


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished tiny run (sgd, 2 epochs): its model.ckpt and last.ckpt are the payloads' base."""
    root = tmp_path_factory.mktemp("security")
    assert main(["--config", TINY, "--run_dir", str(root / "run"), "--trainer.max_epochs", "2"]) == 0
    return root / "run"


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """The marker file, and a module on the path whose import creates it."""
    path = tmp_path / "marker"
    (tmp_path / f"{EVIL_MODULE}.py").write_text(
        f"open({str(path)!r}, 'w').close()\n\nclass Model:\n    pass\n\nrate = 0.1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield path
    sys.modules.pop(EVIL_MODULE, None)


def _payload(base: Path, marker: Path, where: str, out: Path) -> Path:
    ckpt = torch.load(base, map_location="cpu", weights_only=True)
    ckpt = _pickled(ckpt, marker, where) if where in PICKLED else _named(ckpt, marker, where)
    torch.save(ckpt, out)
    return out


def _rows(tmp_path: Path) -> Path:
    data = tmp_path / "in.csv"
    data.write_text("x0,x1\n0.5,1.5\n-1.0,0.25\n")
    return data


def test_payloads_would_run_code(tmp_path, run, marker):
    """The payloads are real: loaded with weights_only=False a pickled one creates the
    marker, and a class_path one runs its command under Lightning's own loader."""
    path = _payload(run / "model.ckpt", marker, "callback_state", tmp_path / "p.ckpt")
    torch.load(path, weights_only=False)
    assert marker.exists()
    marker.unlink()
    path = _payload(run / "model.ckpt", marker, "class_path_function", tmp_path / "q.ckpt")
    with pytest.raises(TypeError):  # os.system's int return is then called as the model factory
        pl.LightningModule.load_from_checkpoint.__func__(GLMTask, path, weights_only=True)
    assert marker.exists()
    marker.unlink()
    path = _payload(run / "model.ckpt", marker, "class_path_under_any", tmp_path / "r.ckpt")
    with pytest.raises(TypeError):  # the Popen object is then saved (pickled) as a hyper-parameter
        pl.LightningModule.load_from_checkpoint.__func__(GLMTask, path, weights_only=True)
    for _ in range(100):  # the shell runs asynchronously
        if marker.exists():
            break
        time.sleep(0.05)
    assert marker.exists()


@pytest.mark.parametrize("where", PAYLOADS)
def test_predict_ckpt_path_refuses(tmp_path, capsys, run, marker, where):
    ckpt = _payload(run / "model.ckpt", marker, where, tmp_path / "payload.ckpt")
    out = tmp_path / "o.csv"
    code = main(["predict", "--ckpt_path", str(ckpt), "--input", str(_rows(tmp_path)), "--output", str(out)])
    assert "ckpt_path: expected" in one_error(capsys, code)
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize("where", PAYLOADS)
def test_predict_run_dir_refuses(tmp_path, capsys, run, marker, where):
    run_dir = tmp_path / "shared_run"
    run_dir.mkdir()
    _payload(run / "model.ckpt", marker, where, run_dir / "model.ckpt")
    out = tmp_path / "o.csv"
    code = main(["predict", "--run_dir", str(run_dir), "--input", str(_rows(tmp_path)), "--output", str(out)])
    one_error(capsys, code)
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize("where", PAYLOADS)
def test_resume_refuses_and_leaves_the_run_dir(tmp_path, capsys, run, marker, where):
    ckpt = _payload(run / "checkpoints" / "last.ckpt", marker, where, tmp_path / "last.ckpt")
    run_dir = tmp_path / "run"
    assert main(["--config", TINY, "--run_dir", str(run_dir), "--trainer.max_epochs", "1"]) == 0
    capsys.readouterr()
    before = snapshot(run_dir)
    code = main(
        ["--config", TINY, "--run_dir", str(run_dir), "--trainer.max_epochs", "3", "--resume", str(ckpt)]
    )
    assert "resume: expected" in one_error(capsys, code)
    assert not marker.exists()
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("where", PAYLOADS)
def test_python_loaders_refuse(tmp_path, run, marker, where):
    ckpt = _payload(run / "model.ckpt", marker, where, tmp_path / "payload.ckpt")
    with pytest.raises(InputError, match="checkpoint_path: expected"):
        GLMTask.load_from_checkpoint(ckpt)
    with pytest.raises(InputError, match="checkpoint_path: expected"):
        with open(ckpt, "rb") as fh:
            GLMTask.load_from_checkpoint(fh)
    with pytest.raises(InputError, match="ckpt_path: expected"):
        load_checkpoint(ckpt)
    with pytest.raises(InputError, match="ckpt_path: expected"):
        predict(ckpt, _rows(tmp_path), tmp_path / "o.csv")
    assert not marker.exists()


def test_load_from_checkpoint_never_unpickles(tmp_path, run):
    with pytest.raises(InputError, match="weights_only: expected True"):
        GLMTask.load_from_checkpoint(run / "model.ckpt", weights_only=False)
    hparams = tmp_path / "h.yaml"
    hparams.write_text("solver: sgd\n")
    with pytest.raises(InputError, match="hparams_file: expected None"):
        GLMTask.load_from_checkpoint(run / "model.ckpt", hparams_file=hparams)
    # the finished run's own checkpoint loads and predicts
    task = GLMTask.load_from_checkpoint(run / "model.ckpt")
    assert task.model.is_fitted


@pytest.mark.parametrize("where", ["top_level", "callback_state"])
def test_cli_fit_refuses_a_checkpoint_swapped_after_its_check(
    tmp_path, capsys, run, marker, where, monkeypatch
):
    """trainer.fit(ckpt_path=...) reads with weights_only=True itself: a file that
    changed after load_checkpoint read it is refused all the same."""
    good = load_checkpoint(run / "checkpoints" / "last.ckpt")
    monkeypatch.setattr(cli, "load_checkpoint", lambda path, name: good)
    ckpt = _payload(run / "checkpoints" / "last.ckpt", marker, where, tmp_path / "last.ckpt")
    run_dir = tmp_path / "run"
    code = main(
        ["--config", TINY, "--run_dir", str(run_dir), "--trainer.max_epochs", "3", "--resume", str(ckpt)]
    )
    assert "resume: expected a checkpoint of tensors and plain data" in one_error(capsys, code)
    assert not marker.exists() and not run_dir.exists()


@pytest.mark.parametrize("where", ["top_level", "hyper_parameters"])
def test_cli_validate_and_test_refuse_a_pickled_model_ckpt(tmp_path, capsys, marker, where, monkeypatch):
    """trainer.validate/test(ckpt_path=...) read the staged model.ckpt with
    weights_only=True: a pickled object in it (written here in place of the real
    file) is refused, and the run leaves nothing behind."""
    save = pl.Trainer.save_checkpoint

    def save_with_payload(self, filepath, weights_only=None, storage_options=None):
        save(self, filepath, weights_only)
        if Path(filepath).name == ".model.ckpt.tmp":
            ckpt = torch.load(filepath, weights_only=True)
            torch.save(_pickled(ckpt, marker, where), filepath)

    monkeypatch.setattr(pl.Trainer, "save_checkpoint", save_with_payload)
    run_dir = tmp_path / "run"
    args = [
        "--config",
        TINY,
        "--run_dir",
        str(run_dir),
        "--model.solver",
        "newton",
        "--trainer.max_epochs",
        "5",
    ]
    assert "model.ckpt: expected" in one_error(capsys, main(args))
    assert not marker.exists() and not run_dir.exists()


def test_subprocess_predict_refuses(tmp_path, run, marker):
    """The real command in its own process: exit status 2, one line on stderr."""
    ckpt = _payload(run / "model.ckpt", marker, "top_level", tmp_path / "payload.ckpt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    args = [
        "predict",
        "--ckpt_path",
        str(ckpt),
        "--input",
        str(_rows(tmp_path)),
        "--output",
        str(tmp_path / "o"),
    ]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ckpt_path: expected"), lines
    assert not marker.exists()


# -- NumPy files: np.load(allow_pickle=False) on every path ------------------------------------


def _object_arrays(tmp_path: Path, marker: Path) -> dict[str, Path]:
    """``.npy`` and ``.npz`` files whose arrays are object arrays (pickles) of a payload."""
    obj = np.empty((2, 2), dtype=object)
    obj[0, 0] = Payload(marker)
    npy, npz = tmp_path / "payload.npy", tmp_path / "payload.npz"
    np.save(npy, obj, allow_pickle=True)
    np.savez(npz, X=obj, x0=obj[:, 0], x1=obj[:, 1], y=obj[:, 0])
    return {"npy": npy, "npz": npz}


def test_numpy_payloads_would_run_code(tmp_path, marker):
    files = _object_arrays(tmp_path, marker)
    np.load(files["npy"], allow_pickle=True)
    assert marker.exists()
    marker.unlink()
    with np.load(files["npz"], allow_pickle=True) as z:
        z["X"]
    assert marker.exists()


@pytest.mark.parametrize("kind", ["npy", "npz"])
def test_predict_refuses_pickled_numpy_input(tmp_path, capsys, run, marker, kind):
    data = _object_arrays(tmp_path, marker)[kind]
    out = tmp_path / "o.csv"
    code = main(["predict", "--run_dir", str(run), "--input", str(data), "--output", str(out)])
    assert "input: expected" in one_error(capsys, code)
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize("kind", ["npy", "npz"])
def test_data_module_refuses_pickled_numpy_file(tmp_path, capsys, marker, kind):
    data = _object_arrays(tmp_path, marker)[kind]
    run_dir = tmp_path / "run"
    code = main(
        [
            "--config",
            TINY,
            "--run_dir",
            str(run_dir),
            "--data.source",
            str(data),
            "--data.target",
            "y",
            "--data.dataset_options",
            "null",
        ]
    )
    assert "data file: expected" in one_error(capsys, code)
    assert not marker.exists() and not run_dir.exists()


# -- what train.py writes: plain data, read back with weights_only=True ------------------------


@pytest.mark.parametrize(
    "config, extra",
    [
        (TINY, []),
        (TINY, ["--model.solver", "newton"]),
        (TINY, ["--model.solver", "lbfgs"]),
        (str(ROOT / "configs" / "gda.yaml"), []),
        (str(ROOT / "configs" / "naive_bayes_gaussian.yaml"), []),
        (str(ROOT / "configs" / "figures" / "moons_rbf.yaml"), ["--trainer.callbacks", "[]"]),
        (str(ROOT / "configs" / "logistic.yaml"), ["--trainer.max_epochs", "2"]),
    ],
    ids=["sgd", "newton", "lbfgs", "gda", "naive_bayes", "rbf_basis", "sgd_scheduler"],
)
def test_every_checkpoint_train_py_writes_is_plain(tmp_path, config, extra):
    run = tmp_path / "run"
    assert main(["--config", config, "--run_dir", str(run), "--trainer.max_epochs", "3", *extra]) == 0
    written = sorted(run.rglob("*.ckpt"))
    assert [p.name for p in written] == ["last.ckpt", "model.ckpt"]
    for path in written:
        assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
        load_checkpoint(path)
    assert GLMTask.load_from_checkpoint(run / "model.ckpt").model.is_fitted


def test_hyper_parameters_and_fit_record_from_python_are_saved_plain(tmp_path):
    """Values given from Python (a NumPy number in solver_options) and the fit record
    are written as plain data: the checkpoint loads with weights_only=True."""
    from functools import partial

    from torchglm import LogisticRegression
    from torchglm.training import GLMDataModule

    task = GLMTask(
        partial(LogisticRegression, l2=1e-3),
        solver="newton",
        solver_options={"tol": np.float64(1e-10)},
    )
    trainer = pl.Trainer(max_epochs=20, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(
        task, datamodule=GLMDataModule("gaussians2", batch_size=None, dataset_options={"n_samples": 200})
    )
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["hyper_parameters"]["solver_options"] == {"tol": 1e-10}
    assert type(ckpt["hyper_parameters"]["solver_options"]["tol"]) is float
    assert ckpt["torchglm"]["fit_result"]["converged"] is True
    loaded = GLMTask.load_from_checkpoint(path, model=partial(LogisticRegression, l2=1e-3))
    x = torch.randn(5, 2, dtype=torch.float64)
    torch.testing.assert_close(loaded.predict_proba(x), task.predict_proba(x), rtol=0, atol=0)
