"""``train.py`` on a ``.npy`` file larger than ``data.memory_budget``: the features are
streamed from disk through the pass-based fitters (the Python out-of-core path) and
the fit equals the in-memory one."""

from __future__ import annotations

import json
import itertools
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("pytorch_lightning")

from torchglm._validation import InputError  # noqa: E402
from torchglm.data.out_of_core import parse_size  # noqa: E402
from torchglm.training.cli import main  # noqa: E402
from torchglm.training.data_module import GLMDataModule  # noqa: E402


def _npy(tmp_path, n=3000, d=4):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, d)) * [1.0, 10.0, 0.1, 1e3] + [0.0, 5.0, -1.0, 2e3]
    eta = (x - [0.0, 5.0, -1.0, 2e3]) / [1.0, 10.0, 0.1, 1e3] @ np.array([1.0, -0.5, 0.8, 0.3])
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(np.float64)
    path = tmp_path / "xy.npy"
    np.save(path, np.column_stack([x, y]))
    return path


def _config(tmp_path, source, solver="newton"):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model:\n  model:\n    class_path: torchglm.LogisticRegression\n"
        f"  solver: {solver}\ndata:\n  source: {source}\n  batch_size: 500\n"
        "trainer:\n  max_epochs: 30\n"
    )
    return str(path)


def test_the_streamed_split_and_statistics_equal_the_in_memory_ones(tmp_path):
    path = _npy(tmp_path)
    loaded = GLMDataModule(str(path), batch_size=500)
    streamed = GLMDataModule(str(path), batch_size=500, memory_budget=1000)
    loaded.setup("fit"), streamed.setup("fit")
    assert streamed.streamed and not loaded.streamed
    torch.testing.assert_close(streamed.feature_mean, loaded.feature_mean, rtol=1e-14, atol=1e-12)
    torch.testing.assert_close(streamed.feature_scale, loaded.feature_scale, rtol=1e-14, atol=0)
    for name in ("train", "val", "test"):
        xs = torch.cat([b.x for b in streamed._batches(name, 500, False)])
        ys = torch.cat([b.y for b in streamed._batches(name, 500, False)])
        xl, yl = loaded.split(name)
        # the same rows, in file order when streamed (a pass is a sum over rows)
        idx = torch.as_tensor(np.argsort(loaded._parts(3000)[name].numpy()))
        torch.testing.assert_close(xs, xl[idx], rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(ys, yl[idx])


def test_train_py_streams_a_file_over_the_budget_to_the_same_fit(tmp_path, capsys):
    path = _npy(tmp_path)
    cfg = _config(tmp_path, path)
    runs = {}
    for name, budget in (("loaded", "1GB"), ("streamed", "10kB")):
        run = tmp_path / name
        assert main(["--config", cfg, "--data.memory_budget", budget, "--run_dir", str(run)]) == 0
        runs[name] = json.loads((run / "metrics.json").read_text())
        runs[name]["state"] = torch.load(run / "model.ckpt", weights_only=True)["state_dict"]
    assert runs["streamed"]["data"].get("streamed") and not runs["loaded"]["data"].get("streamed")
    assert runs["streamed"]["fit"]["converged"]
    for k in ("model.linear.weight", "model.linear.bias"):
        torch.testing.assert_close(
            runs["streamed"]["state"][k], runs["loaded"]["state"][k], rtol=1e-9, atol=1e-10
        )
    assert runs["streamed"]["test"]["nll"] == pytest.approx(runs["loaded"]["test"]["nll"], rel=1e-9)


def test_sgd_on_a_streamed_file_is_one_clear_error(tmp_path, capsys):
    path = _npy(tmp_path)
    run = tmp_path / "run"
    code = main(
        ["--config", _config(tmp_path, path, "sgd"), "--data.memory_budget", "10kB", "--run_dir", str(run)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "data.memory_budget: expected a pass-based solver" in err[0]
    assert not run.exists()


@pytest.mark.parametrize(
    "value, size", [(1024, 1024), ("2GB", 2 * 10**9), ("512MiB", 512 * 2**20), ("1.5kB", 1500)]
)
def test_parse_size(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["lots", -1, 0, True, "2 parsecs"])
def test_parse_size_refuses(value):
    with pytest.raises(InputError, match="memory_budget: expected"):
        parse_size(value)


_FREED = """
import numpy as np
from torchglm.training.streamed import trim_heap

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

a = np.ones(20 * 2**20 // 8)
del a  # glibc's mmap threshold rises to 20 MiB
b = np.ones(16 * 2**20 // 8)  # then a 16 MiB batch comes from the heap
keep = [np.ones(100) for _ in range(100)]  # small long-lived blocks above it
before = rss()
del b
freed = before - rss()
assert trim_heap()
print(freed / 1024, (before - rss()) / 1024)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_a_trimmed_heap_gives_a_freed_batch_buffer_back():
    """A batch-sized buffer freed below longer-lived small blocks stays resident until
    the heap is trimmed (a streamed run's peak grew with each pass)."""
    out = subprocess.run([sys.executable, "-c", _FREED], capture_output=True, text=True, check=True)
    freed, trimmed = map(float, out.stdout.split())
    assert freed < 4 and trimmed >= 15, (freed, trimmed)


def test_streamed_passes_trim_the_heap_even_when_the_last_batch_is_not_followed(tmp_path, monkeypatch):
    """Lightning's loops take ``len(batches)`` batches and never ask for another: the
    trims come when a pass starts and before its last batch, not after it."""
    import torchglm.training.streamed as streamed

    taken = []
    monkeypatch.setattr(streamed, "trim_heap", lambda: taken.append(len(seen)))
    dm = GLMDataModule(str(_npy(tmp_path)), batch_size=500, memory_budget=1000)
    dm.setup("fit")
    batches = dm.train_batches()
    for _ in range(2):
        seen = []
        for batch in itertools.islice(iter(batches), len(batches)):
            seen.append(batch)
        assert len(seen) == len(batches) == 4
    assert taken == [0, 3, 0, 3]


def test_streamed_splits_keep_compact_row_numbers(tmp_path):
    dm = GLMDataModule(str(_npy(tmp_path)), batch_size=500, memory_budget=1000)
    dm.setup("fit")
    assert [dm.split(k)[0].rows.dtype for k in ("train", "val", "test")] == [np.dtype(np.int32)] * 3


@pytest.mark.parametrize(
    "scale, dtype, message",
    [(1e200, "float64", "sums of squares cannot overflow"), (1e-30, "float32", "do not underflow")],
)
def test_a_streamed_npy_refuses_magnitudes_as_memory_does(tmp_path, scale, dtype, message):
    """Unstandardized features whose squares overflow (or underflow) the model's dtype
    are refused streamed as they are loaded: the same check, the same words."""
    xy = np.load(_npy(tmp_path))
    xy[:, 1] *= scale
    np.save(tmp_path / "big.npy", xy)
    errors = []
    for budget in ("1GB", 1000):
        dm = GLMDataModule(str(tmp_path / "big.npy"), standardize=False, dtype=dtype, memory_budget=budget)
        with pytest.raises(InputError, match=message) as err:
            dm.setup("fit")
        errors.append(str(err.value))
    assert errors[0] == errors[1]
