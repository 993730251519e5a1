"""The core API takes NumPy arrays, pandas DataFrames/Series,
scipy.sparse matrices and lists, converted once at the boundary; results equal the
tensor path's bit for bit, DataFrame columns name the coefficients, outputs are
detached, and a float64 array works with a float32 model."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn.exceptions
import torch

import torchglm
from torchglm import (
    GaussianNB,
    GeneralizedLinearModel,
    InputError,
    LinearDiscriminantAnalysis,
    LogisticRegression,
    MultinomialNB,
    PoissonNB,
    SoftmaxRegression,
    fit_glm,
    glm_results,
)
from torchglm._validation import to_tensor
from run_util import python_stdout


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3))
    y = (x @ [1.0, -1.0, 0.5] + rng.normal(size=120) > 0).astype(np.int64)
    counts = rng.poisson(np.exp(0.3 * x[:, 0] + 0.5)).astype(np.float64)
    return x, y, counts


def _same(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["numpy", "pandas", "list", "float32-numpy"])
def test_glm_fit_and_predict_on_array_likes_equal_the_tensor_path(data, kind):
    x, y, _ = data
    w = np.linspace(0.5, 1.5, len(y))
    if kind == "numpy":
        xa, ya, wa = x, y, w
    elif kind == "pandas":
        xa, ya, wa = pd.DataFrame(x, columns=["a", "b", "c"]), pd.Series(y), pd.Series(w)
    elif kind == "list":
        xa, ya, wa = x.tolist(), y.tolist(), w.tolist()
    else:
        x = x.astype(np.float32)
        xa, ya, wa = x, y, w
    ref, m = LogisticRegression(3, l2=1e-2), LogisticRegression(3, l2=1e-2)
    ref.fit(
        torch.from_numpy(x), torch.from_numpy(y), weight=torch.from_numpy(w).to(torch.from_numpy(x).dtype)
    )
    m.fit(xa, ya, weight=wa)
    for a, b in zip(m.parameters(), ref.parameters()):
        _same(a, b)
    _same(m.predict_proba(xa), ref.predict_proba(torch.from_numpy(x)))
    _same(m.predict(xa), ref.predict(torch.from_numpy(x)))


def test_float64_array_into_float32_model_predicts_detached_float32(data):
    x, y, _ = data
    m = LogisticRegression(3, l2=1e-2, dtype=torch.float32)
    m.fit(x, y)
    for p in (m.predict_proba(x), m.predict_proba(torch.from_numpy(x))):
        assert p.dtype == torch.float32 and not p.requires_grad
        assert p.numpy().shape == (120,)  # .numpy() works: detached
    assert m.predict(x).dtype == torch.long


def test_integer_features_become_the_model_dtype(data):
    x, y, _ = data
    xi = np.round(3 * x).astype(np.int32)
    m, ref = LogisticRegression(3, l2=1e-2), LogisticRegression(3, l2=1e-2)
    m.fit(xi, y)
    ref.fit(torch.from_numpy(xi).to(torch.get_default_dtype()), torch.from_numpy(y))
    _same(m.linear.weight, ref.linear.weight)


def test_scipy_sparse_stays_sparse_and_fits_like_dense(data):
    x, y, _ = data
    x = np.where(np.abs(x) > 0.8, x, 0.0)
    csr = sp.csr_matrix(x)
    t = to_tensor("X", csr)
    assert t.layout == torch.sparse_csr and t._nnz() == csr.nnz
    assert to_tensor("X", sp.coo_matrix(x)).layout == torch.sparse_csr
    dense, sparse = SoftmaxRegression(3, 2, l2=1e-2), SoftmaxRegression(3, 2, l2=1e-2)
    dense.fit(x, y, solver="newton")
    sparse.fit(csr, y, solver="newton")
    torch.testing.assert_close(sparse.linear.weight, dense.linear.weight, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(sparse.predict_proba(csr), dense.predict_proba(x), rtol=1e-9, atol=1e-12)


def test_count_models_take_scipy_sparse_and_pandas(data):
    _, y, _ = data
    z = np.random.default_rng(1).poisson(2.0, size=(120, 5)).astype(np.float64)
    for cls in (MultinomialNB, PoissonNB):
        ref, m = cls(5, 2), cls(5, 2)
        ref.fit(torch.from_numpy(z), torch.from_numpy(y))
        m.fit(sp.csr_matrix(z), pd.Series(y), weight=np.ones(120))
        for (name, a), b in zip(m.state_dict().items(), ref.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=0, msg=name)
        torch.testing.assert_close(m.predict_proba(sp.csr_matrix(z)), ref.predict_proba(torch.from_numpy(z)))


def test_generative_models_take_dataframes_and_record_names(data):
    x, y, _ = data
    df = pd.DataFrame(x, columns=["age", "dose", "weight"])
    for cls in (GaussianNB, LinearDiscriminantAnalysis):
        ref, m = cls(3, 2), cls(3, 2)
        ref.fit(torch.from_numpy(x), torch.from_numpy(y))
        m.fit(df, pd.Series(y))
        assert m.feature_names == ["age", "dose", "weight"] and ref.feature_names is None
        _same(m.predict_proba(df), ref.predict_proba(torch.from_numpy(x)))
        assert not m.predict_proba(df.to_numpy()).requires_grad


def test_dataframe_columns_name_the_coefficients_in_summary(data):
    x, _, counts = data
    df = pd.DataFrame(x, columns=["age", "dose", "weight"])
    res = fit_glm(GeneralizedLinearModel(3, "poisson"), df, pd.Series(counts), offset=np.zeros(120))
    assert res.names == ["age", "dose", "weight", "intercept"]
    assert "dose" in res.summary()
    # after a plain fit on a DataFrame, glm_results on arrays still uses the names
    model = GeneralizedLinearModel(3, "poisson")
    fr = model.fit(df, counts, solver="irls")
    assert model.feature_names == ["age", "dose", "weight"]
    assert glm_results(model, x, counts, fit_result=fr).names == res.names
    # and the numbers equal the tensor path's
    ref = fit_glm(
        GeneralizedLinearModel(3, "poisson"),
        torch.from_numpy(x),
        torch.from_numpy(counts),
        offset=torch.zeros(120),
    )
    _same(res.params, ref.params)
    _same(res.bse, ref.bse)


@pytest.mark.parametrize(
    "bad, match",
    [
        (
            np.array([["a", "b", "c"]] * 4),
            "X: expected a tensor or an array-like of numbers, got ndarray of dtype",
        ),
        (
            pd.DataFrame({"a": ["x"] * 4, "b": [1.0] * 4, "c": [2.0] * 4}),
            "X: expected a tensor or an array-like",
        ),
        ([[1.0, 2.0, 3.0], [1.0]], "X: expected a tensor or an array-like of numbers"),
        (
            np.ones((4, 3), dtype=complex),
            "X: expected a tensor or an array-like of numbers, got ndarray of dtype complex128",
        ),
        (np.full((4, 3), np.nan), "X: expected finite values"),
        (np.ones((4, 2)), "X: expected 3 feature columns, got 2"),
    ],
)
def test_bad_array_likes_are_one_input_error(data, bad, match):
    x, y, _ = data
    m = LogisticRegression(3)
    m.fit(x, y)
    with pytest.raises(InputError, match=match):
        m.predict_proba(bad)
    if not (isinstance(bad, np.ndarray) and bad.shape[1] == 2):
        with pytest.raises(InputError, match=match):
            LogisticRegression(3).fit(bad, y[:4])


def test_read_only_and_big_endian_arrays_convert(data):
    x, y, _ = data
    ro = x.copy()
    ro.setflags(write=False)
    be = x.astype(">f8")
    m = LogisticRegression(3, l2=1e-2)
    m.fit(x, y)
    _same(m.predict_proba(ro), m.predict_proba(x))
    _same(m.predict_proba(be), m.predict_proba(x))


def test_convergence_warning_is_sklearns():
    assert issubclass(torchglm.ConvergenceWarning, sklearn.exceptions.ConvergenceWarning)
    with pytest.warns(sklearn.exceptions.ConvergenceWarning):
        warnings.warn("x", torchglm.ConvergenceWarning)


@pytest.mark.parametrize("category", ["sklearn", "torchglm"])
def test_a_wrappers_convergence_warning_is_caught_by_either_class(category):
    import torchglm.sklearn as tgs

    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 3))
    y = (x[:, 0] + rng.standard_normal(100) > 0).astype(int)
    cls = sklearn.exceptions.ConvergenceWarning if category == "sklearn" else torchglm.ConvergenceWarning
    with pytest.warns(cls, match="max_iter=1 reached"):
        tgs.LogisticRegression(max_iter=1).fit(x, y)


def test_a_core_fits_warning_is_sklearns_once_the_user_loads_sklearn():
    """``import torchglm`` does not load scikit-learn; a user who loads it after and
    filters with its class still catches the core fit's ConvergenceWarning."""
    code = (
        "import sys, warnings, torch, torchglm\n"
        "assert 'sklearn' not in sys.modules\n"
        "import sklearn.exceptions\n"
        "warnings.simplefilter('error', sklearn.exceptions.ConvergenceWarning)\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x = torch.randn(100, 3, generator=g, dtype=torch.float64)\n"
        "y = (x[:, 0] + torch.randn(100, generator=g, dtype=torch.float64) > 0).double()\n"
        "try:\n"
        "    torchglm.LogisticRegression(3, l2=0.01).fit(x, y, max_iter=1)\n"
        "except sklearn.exceptions.ConvergenceWarning as w:\n"
        "    print(type(w).__name__, isinstance(w, torchglm.ConvergenceWarning))\n"
    )
    assert python_stdout(code) == "ConvergenceWarning True"
