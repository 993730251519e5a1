"""Data layer: file readers, built-in datasets, the data module's split,
standardization, label checks and slice batches."""

import numpy as np
import pytest
import torch

from torchglm import InputError
from torchglm.data import DATASETS, TensorBatches, load_dataset, read_table
from torchglm.training.data_module import GLMDataModule
from torchglm.training.splits import shard


pytestmark = pytest.mark.usefixtures("one_thread")


def _xy(n=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    y = (x[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(np.int64)
    return x, y


def _write_csv(path, x, y, names=None, target="y"):
    names = names or [f"f{j}" for j in range(x.shape[1])]
    rows = [",".join(names + [target])]
    rows += [",".join([repr(float(v)) for v in r] + [str(t)]) for r, t in zip(x, y)]
    path.write_text("\n".join(rows) + "\n")
    return path


# -- readers -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["csv", "npz_X", "npz_columns", "npy_plain", "npy_structured"])
def test_readers_round_trip(tmp_path, fmt):
    x, y = _xy()
    if fmt == "csv":
        path = _write_csv(tmp_path / "d.csv", x, y)
        t = read_table(path, "y")
    elif fmt == "npz_X":
        path = tmp_path / "d.npz"
        np.savez(path, X=x, label=y)
        t = read_table(path, "label")
    elif fmt == "npz_columns":
        path = tmp_path / "d.npz"
        np.savez(path, a=x[:, 0], b=x[:, 1], c=x[:, 2], y=y)
        t = read_table(path, "y")
    elif fmt == "npy_plain":
        path = tmp_path / "d.npy"
        np.save(path, np.column_stack([x, y]))
        t = read_table(path)
    else:
        path = tmp_path / "d.npy"
        arr = np.zeros(len(y), dtype=[("a", "f8"), ("t", "i8"), ("b", "f8"), ("c", "f8")])
        arr["a"], arr["b"], arr["c"], arr["t"] = x[:, 0], x[:, 1], x[:, 2], y
        np.save(path, arr)
        t = read_table(path, "t")
    np.testing.assert_array_equal(t.x, x)
    np.testing.assert_array_equal(t.y, y)
    assert len(t.feature_names) == 3


def test_csv_feature_selection_and_target_anywhere(tmp_path):
    x, y = _xy()
    path = tmp_path / "d.csv"
    rows = ["y,f0,f1,f2"] + [",".join([str(t)] + [repr(float(v)) for v in r]) for r, t in zip(x, y)]
    path.write_text("\n".join(rows))
    t = read_table(path, "y", features=["f2", "f0"])
    np.testing.assert_array_equal(t.x, x[:, [2, 0]])
    assert t.feature_names == ["f2", "f0"]


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "not found"),
        ("suffix", "ending in one of"),
        ("ragged", "line 3: expected 4 comma-separated fields, got 3"),
        ("text", "column 'f1': expected numeric values, got 'abc'"),
        ("no_target", "target: expected a column of"),
        ("header_only", "at least one data row"),
        ("corrupt_npz", "a readable .npz file"),
        ("npz_lengths", "X and the target with the same number of rows"),
    ],
)
def test_reader_errors(tmp_path, case, message):
    x, y = _xy(n=5)
    path = tmp_path / "d.csv"
    if case == "missing":
        path = tmp_path / "absent.csv"
    elif case == "suffix":
        path = tmp_path / "d.txt"
        path.write_text("a,b\n1,2\n")
    elif case == "ragged":
        _write_csv(path, x, y)
        lines = path.read_text().splitlines()
        lines[2] = "1.0,2.0,3"
        path.write_text("\n".join(lines))
    elif case == "text":
        _write_csv(path, x, y)
        lines = path.read_text().splitlines()
        lines[3] = "1.0,abc,3.0,1"
        path.write_text("\n".join(lines))
    elif case == "no_target":
        _write_csv(path, x, y, target="label")
    elif case == "header_only":
        path.write_text("f0,y\n")
    elif case == "corrupt_npz":
        path = tmp_path / "d.npz"
        path.write_bytes(b"PK\x03\x04 not really a zip")
    elif case == "npz_lengths":
        path = tmp_path / "d.npz"
        np.savez(path, X=x, y=y[:-1])
    with pytest.raises(InputError, match=message):
        read_table(path, "y")


# -- datasets ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_builtin_datasets(name):
    ds = load_dataset(name)
    assert ds.x.dtype == np.float64 and ds.x.ndim == 2
    assert len(ds.y) == len(ds.x) and len(ds.feature_names) == ds.x.shape[1]
    assert np.isfinite(ds.x).all()
    if ds.task == "classification":
        assert set(np.unique(ds.y)) == set(range(ds.n_classes))
    else:
        assert ds.n_classes is None


def test_builtin_matches_sklearn():
    from sklearn.datasets import load_breast_cancer

    ref = load_breast_cancer()
    ds = load_dataset("breast_cancer")
    np.testing.assert_array_equal(ds.x, ref.data)
    np.testing.assert_array_equal(ds.y, ref.target)


def test_gaussian_classes_moments():
    cov = [[[1.0, 0.8], [0.8, 1.0]], [[2.0, 0.0], [0.0, 0.5]]]
    ds = load_dataset("gaussians2", n_samples=40000, means=[[0, 0], [3, 1]], covariances=cov, seed=3)
    for k in range(2):
        xk = ds.x[ds.y == k]
        np.testing.assert_allclose(xk.mean(0), [[0, 0], [3, 1]][k], atol=0.03)
        np.testing.assert_allclose(np.cov(xk.T), cov[k], atol=0.05)
    assert abs((ds.y == 1).mean() - 0.5) < 0.01


def test_xor_is_not_linearly_separable():
    from sklearn.linear_model import LogisticRegression

    ds = load_dataset("xor", n_samples=2000)
    lin = LogisticRegression().fit(ds.x, ds.y).score(ds.x, ds.y)
    prod = (
        LogisticRegression()
        .fit(np.column_stack([ds.x, ds.x[:, 0] * ds.x[:, 1]]), ds.y)
        .score(np.column_stack([ds.x, ds.x[:, 0] * ds.x[:, 1]]), ds.y)
    )
    assert lin < 0.6 and prod > 0.9


def test_dataset_registry_is_extensible():
    from torchglm.data import Dataset

    DATASETS["_unit_test_ds"] = lambda seed=0: Dataset(
        np.eye(6)[:, :2] + np.arange(6)[:, None], np.arange(6) % 2, "classification", 2
    )
    try:
        dm = GLMDataModule("_unit_test_ds", val_fraction=0.34, test_fraction=0.34)
        dm.setup()
        assert dm.n_features == 2
    finally:
        del DATASETS["_unit_test_ds"]


def test_unknown_dataset_and_options():
    with pytest.raises(InputError, match="built-in dataset"):
        GLMDataModule("nope").setup()
    with pytest.raises(InputError, match="dataset_options for 'moons'"):
        GLMDataModule("moons", dataset_options={"bogus": 1}).setup()


# -- data module -------------------------------------------------------------------------
def test_split_is_seeded_disjoint_and_complete():
    a, b, c = (GLMDataModule("moons", split_seed=s, standardize=False) for s in (0, 0, 1))
    for dm in (a, b, c):
        dm.setup()
    ds = load_dataset("moons")
    rows = torch.cat([a.split(s)[0] for s in ("train", "val", "test")])
    # every row exactly once
    assert rows.shape[0] == len(ds.x)
    assert torch.unique(rows, dim=0).shape[0] == len(ds.x)
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, ds.x.tolist()))
    assert torch.equal(a.split("test")[0], b.split("test")[0])
    assert not torch.equal(a.split("test")[0], c.split("test")[0])
    assert (a.summary()["n_train"], a.summary()["n_val"], a.summary()["n_test"]) == (240, 80, 80)


def test_standardization_fitted_on_train_only():
    dm = GLMDataModule("wine")
    dm.setup()
    raw = torch.as_tensor(load_dataset("wine").x)
    xt, _ = dm.split("train")
    torch.testing.assert_close(xt.mean(0), torch.zeros(13), atol=1e-12, rtol=0)
    torch.testing.assert_close(xt.std(0, unbiased=False), torch.ones(13), atol=1e-12, rtol=0)
    # the val split uses the training statistics, so its moments are not exactly 0/1
    xv, _ = dm.split("val")
    assert xv.mean(0).abs().max() > 1e-3
    # the transform reproduces the stored splits from raw rows
    perm = torch.randperm(len(raw), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(dm.transform(raw[perm[: xt.shape[0]]]), xt)


def test_constant_column_is_not_divided_by_zero(tmp_path):
    x, y = _xy(n=40)
    x[:, 1] = 7.0
    dm = GLMDataModule(str(_write_csv(tmp_path / "d.csv", x, y)), target="y", task="classification")
    dm.setup()
    assert torch.isfinite(dm.split("train")[0]).all()
    assert float(dm.feature_scale[1]) == 1.0


def test_dtype_and_label_types():
    dm = GLMDataModule("iris", dtype="float32")
    dm.setup()
    x, y = dm.split("train")
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    reg = GLMDataModule("diabetes")
    reg.setup()
    assert reg.split("train")[1].dtype == torch.float64 and reg.task == "regression"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size: expected a positive number, got 0"),
        ({"batch_size": -5}, "batch_size: expected a positive number, got -5"),
        ({"val_fraction": 0.0}, "val_fraction: expected a fraction strictly between 0 and 1"),
        ({"val_fraction": 0.5, "test_fraction": 0.5}, "val_fraction \\+ test_fraction"),
        ({"n_classes": 1}, "n_classes: expected an integer >= 2"),
        ({"dtype": "float16"}, "dtype: expected one of"),
    ],
)
def test_module_argument_errors(kwargs, message):
    with pytest.raises(InputError, match=message):
        GLMDataModule("iris", **kwargs)


@pytest.mark.parametrize(
    "case, message",
    [
        ("nan", "X: expected finite values \\(no NaN or inf\\), got 1 non-finite entries \\(1 NaN, 0 inf\\)"),
        ("inf", "X: expected finite values \\(no NaN or inf\\), got 1 non-finite entries \\(0 NaN, 1 inf\\)"),
        ("label_outside", "y: expected labels in \\{0, ..., 1\\}, got label 2"),
        ("single_class", "y: expected at least two classes, got a single class 1"),
        ("non_integer", "expected integer class labels"),
    ],
)
def test_module_data_errors(tmp_path, case, message):
    x, y = _xy(n=30)
    y = y.astype(np.float64)
    if case == "nan":
        x[4, 1] = np.nan
    elif case == "inf":
        x[4, 1] = np.inf
    elif case == "label_outside":
        y[7] = 2
    elif case == "single_class":
        y[:] = 1
    elif case == "non_integer":
        y[3] = 0.5
    path = tmp_path / "d.npz"
    np.savez(path, X=x, y=y)
    with pytest.raises(InputError, match=message):
        GLMDataModule(str(path), task="classification", n_classes=2).setup()


def test_module_class_missing_from_the_training_split_only(tmp_path):
    """Every row holds two classes (model.fit on them would fit), but the training
    split holds one: the split is named."""
    x, _ = _xy(n=30)
    dm = GLMDataModule(str(tmp_path / "d.npz"), task="classification", n_classes=2)
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(dm.split_seed))
    y = np.zeros(30)
    y[perm[-3:].numpy()] = 1  # the last rows of the permutation: the test split
    np.savez(tmp_path / "d.npz", X=x, y=y)
    with pytest.raises(
        InputError, match=r"^y \(train split\): expected at least two classes, got a single class 0"
    ):
        dm.setup()


def test_labels_checked_against_model_classes():
    dm = GLMDataModule("iris")
    dm.setup()
    with pytest.raises(InputError, match="n_classes: expected 3 \\(declared for the data\\), got 2"):
        dm.check_labels(2)


def test_task_mismatch():
    dm = GLMDataModule("iris")
    dm.setup()
    with pytest.raises(InputError, match="'regression' for a regression family"):
        dm.check_regression()
    with pytest.raises(InputError, match="task: expected 'classification'"):
        GLMDataModule("iris", task="regression").setup()


# -- batches ------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 7, 64, None])
def test_batches_partition_the_split(batch_size):
    dm = GLMDataModule("breast_cancer", batch_size=batch_size, shuffle_seed=5)
    dm.setup()
    x, y = dm.split("train")
    for shuffle in (False, True):
        batches = list(dm.train_batches(shuffle=shuffle))
        bx = torch.cat([b.x for b in batches])
        by = torch.cat([b.y for b in batches])
        assert len(batches) == len(dm.train_batches()) == -(-x.shape[0] // (batch_size or x.shape[0]))
        if shuffle:
            rows = sorted(map(tuple, torch.column_stack([bx, by]).tolist()))
            assert rows == sorted(map(tuple, torch.column_stack([x, y]).tolist()))
            assert not torch.equal(bx, x)
        else:
            assert torch.equal(bx, x) and torch.equal(by, y)


def test_one_batch_of_every_row_is_the_tensors_themselves():
    """Without a batch size (or one covering every row) and without shuffling, a dense
    pass's one batch holds the given tensors themselves, every pass (no slices made);
    a sparse design, a shuffled or a smaller batch size is sliced as before."""
    x, y = torch.randn(30, 3), torch.rand(30)
    w = torch.rand(30)
    for batches in (
        TensorBatches(x, y, w),
        TensorBatches(x, y, w, batch_size=30),
        TensorBatches(x, y, w, batch_size=64),
    ):
        for _ in range(2):
            (b,) = list(batches)
            assert b.x is x and b.y is y and b.weight is w and b.offset is None
    (b,) = list(TensorBatches(x.to_sparse_csr(), y))
    assert b.x.layout == torch.sparse_csr and torch.equal(b.x.to_dense(), x)
    parts = list(TensorBatches(x, y, batch_size=16))
    assert [p.x.shape[0] for p in parts] == [16, 14] and torch.equal(torch.cat([p.x for p in parts]), x)
    (b,) = list(TensorBatches(x, y, shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert b.x is not x and torch.allclose(b.x.sum(0), x.sum(0))


def test_sum_over_batches_equals_full_objective():
    from torchglm import LogisticRegression

    dm = GLMDataModule("breast_cancer", batch_size=50)
    dm.setup()
    x, y = dm.split("train")
    m = LogisticRegression(30)
    torch.nn.init.normal_(m.linear.weight, std=0.1, generator=torch.Generator().manual_seed(0))
    full = m.family.nll(m(x), y).sum()
    parts = sum(m.family.nll(m(b.x), b.y).sum() for b in dm.train_batches(shuffle=True))
    torch.testing.assert_close(parts, full, rtol=1e-13, atol=0)


def test_shuffling_is_seeded_and_changes_each_epoch():
    def orders(seed):
        dm = GLMDataModule("moons", batch_size=16, shuffle_seed=seed)
        dm.setup()
        batches = dm.train_batches()
        return [torch.cat([b.x[:, 0] for b in batches]) for _ in range(2)]

    a, b = orders(1), orders(1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], a[1])


def test_shards_partition_rows():
    n, world = 11, 3
    idx = torch.cat([shard(n, r, world) for r in range(world)])
    assert sorted(idx.tolist()) == list(range(n))


def test_dataloaders_are_slice_batches():
    dm = GLMDataModule("iris", batch_size=8)
    dm.setup()
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        assert isinstance(loader, TensorBatches)


def test_a_missing_optional_dependency_is_one_clear_input_error(tmp_path, monkeypatch):
    """pyarrow is the ``parquet`` extra: without it the Parquet reader says what to
    install instead of raising ModuleNotFoundError from inside the library. (pandas is a
    core dependency: the one CSV reader of training and predict.)"""
    import sys

    from torchglm import InputError
    from torchglm.data.out_of_core import ParquetBatches

    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it then raises ImportError
    (tmp_path / "t.parquet").write_bytes(b"")
    with pytest.raises(InputError, match=r"ParquetBatches: needs the optional dependency 'pyarrow'"):
        ParquetBatches(tmp_path / "t.parquet", target="y")


# -- standardization at extreme magnitudes ------------------------------------------------
@pytest.mark.parametrize("magnitude", [1e200, 1e-200, 1e160, 1e-160])
def test_standardization_at_extreme_magnitudes(tmp_path, magnitude):
    """Columns at 1e200 (squares overflow) or 1e-200 (squares underflow) standardize to
    the same z as the unscaled columns: zero mean and unit variance on the training
    split, and the same fit (the scale is max|x| first, then a shifted sum of squares)."""
    from torchglm.models import LogisticRegression

    x, y = _xy(n=80, d=3)
    x[:, 2] += 5.0  # a mean far from 0 relative to the spread
    fits = []
    for name, scale in (("plain", 1.0), ("scaled", magnitude)):
        np.savez(tmp_path / f"{name}.npz", X=x * scale, y=y)
        dm = GLMDataModule(str(tmp_path / f"{name}.npz"), task="classification")
        dm.setup()
        z, labels = dm.split("train")
        torch.testing.assert_close(z.mean(0), torch.zeros(3, dtype=z.dtype), atol=1e-12, rtol=0)
        torch.testing.assert_close(z.var(0, unbiased=False), torch.ones(3, dtype=z.dtype), atol=1e-12, rtol=0)
        model = LogisticRegression(3, dtype=torch.float64)
        assert model.fit(z, labels, solver="newton").converged
        fits.append((z, model.coef.clone(), model.intercept.clone()))
    torch.testing.assert_close(fits[1][0], fits[0][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fits[1][1], fits[0][1], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fits[1][2], fits[0][2], rtol=1e-10, atol=1e-12)


def test_unstandardized_underflowing_features_are_refused(tmp_path):
    """Without standardization, columns at 1e-200 would give a zero Hessian: refused with
    the remedy, as model.fit refuses them."""
    x, y = _xy(n=60)
    np.savez(tmp_path / "tiny.npz", X=x * 1e-200, y=y)
    dm = GLMDataModule(str(tmp_path / "tiny.npz"), task="classification", standardize=False)
    with pytest.raises(InputError, match=r"X: expected every nonzero column .* underflow \(standardize"):
        dm.setup()
