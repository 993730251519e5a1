"""The GLM's boundary: validated prediction, bad input rejected with the one message
template, and the links' likelihoods and derivatives at extreme eta.

References: scikit-learn's rules (NotFittedError before fit, ValueError for a single
class), statsmodels' GLM (scale = inf with no residual degrees of freedom), and
mpmath at 60 digits for every (family, link) pair's NLL and its derivatives.
"""

import math
import warnings

import mpmath as mp
import numpy as np
import pytest
import statsmodels.api as sm
import torch

from torchglm import InputError, LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm._validation import NotFittedError
from torchglm.training import GLMDataModule
from torchglm.families import FAMILIES, get_family
from torchglm.inference import fit_glm
from torchglm.links import LINKS
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import SOLVERS

from data_util import threshold_data
from torchglm.solvers.eta_derivatives import eta_derivatives


def _data(n=60, d=3):
    x, y = threshold_data(n, d, (1.0,))
    return x, y.long()


def _fitted(cls=LogisticRegression, dtype=torch.float64):
    x, y = _data()
    m = cls(3, l2=1e-2, dtype=dtype) if cls is not SoftmaxRegression else cls(3, 2, l2=1e-2, dtype=dtype)
    m.fit(x.to(dtype), y)
    return m


# -- 5. the predict path -------------------------------------------------------------
MODELS = [
    lambda: LogisticRegression(3),
    lambda: ProbitRegression(3),
    lambda: SoftmaxRegression(3, 4),
    lambda: GeneralizedLinearModel(3, "poisson"),
]


@pytest.mark.parametrize("make", MODELS)
@pytest.mark.parametrize("method", ["predict_proba", "predict"])
def test_unfitted_model_refuses_to_predict(make, method):
    with pytest.raises(NotFittedError, match="not fitted"):
        getattr(make(), method)(torch.zeros(2, 3))


@pytest.mark.parametrize("method", ["predict_proba", "predict"])
@pytest.mark.parametrize(
    "x, match",
    [
        (
            torch.tensor([[float("nan"), 0.0, 0.0]]),
            r"X: expected finite values .*\(1 NaN, 0 inf\)",
        ),
        (
            torch.tensor([[0.0, float("inf"), 0.0]]),
            r"X: expected finite values .*\(0 NaN, 1 inf\)",
        ),
        (torch.zeros(2, 4), "X: expected 3 feature columns, got 4"),
        (torch.zeros(3), "X: expected a 2-D tensor"),
        (torch.zeros(2, 3, dtype=torch.long), "X: expected a floating-point tensor"),
        (np.array([["a"] * 3]), "X: expected a tensor or an array-like of numbers"),
    ],
)
def test_predict_validates_like_fit(method, x, match):
    with pytest.raises(InputError, match=match):
        getattr(_fitted(), method)(x)


@pytest.mark.parametrize(
    "offset, match",
    [
        (torch.tensor([0.0, float("nan")]), "offset: expected finite values"),
        (
            torch.zeros(3),
            r"offset: expected a 1-D tensor of length 2, got shape \(3,\)",
        ),
    ],
)
def test_predict_validates_the_offset(offset, match):
    with pytest.raises(InputError, match=match):
        _fitted().predict_proba(torch.zeros(2, 3), offset)


def test_predict_casts_to_the_models_dtype_and_returns_detached_tensors():
    m32 = _fitted(dtype=torch.float32)
    x, _ = _data()
    off = torch.linspace(-1, 1, x.shape[0], dtype=torch.float64)
    with torch.enable_grad():
        p = m32.predict_proba(x, off.tolist())  # float64 features, list offset
    assert p.dtype == torch.float32 and not p.requires_grad
    expected = torch.sigmoid(m32(x.float(), off.float())).detach()
    torch.testing.assert_close(p, expected, rtol=0, atol=0)
    assert torch.equal(m32.predict(x, off), (expected > 0.5).long())
    assert m32(x.float()).requires_grad  # forward stays the raw, differentiable hot path


def test_a_loaded_state_dict_predicts():
    m = _fitted()
    clone = LogisticRegression(3, dtype=torch.float64)
    clone.load_state_dict(m.state_dict())
    torch.testing.assert_close(clone.predict_proba(torch.ones(2, 3)), m.predict_proba(torch.ones(2, 3)))


# -- 6. bad input at the boundary -------------------------------------------------------
def test_all_zero_weights_are_rejected():
    x, y = _data()
    for call in (
        lambda m: m.fit(x, y, weight=torch.zeros(60)),
        lambda m: m.loss(x, y, torch.zeros(60)),
    ):
        with pytest.raises(InputError, match="weight: expected a positive total weight"):
            call(LogisticRegression(3))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_offsets_are_rejected(bad):
    x, y = _data()
    off = torch.zeros(60)
    off[7] = bad
    for call in (lambda m: m.fit(x, y, offset=off), lambda m: m.loss(x, y, offset=off)):
        with pytest.raises(InputError, match=r"offset: expected finite values .* first at index \(7,\)"):
            call(LogisticRegression(3))


def test_array_like_weights_and_offsets_equal_tensors():
    x, y = _data()
    w = torch.linspace(0.5, 2.0, 60)
    off = torch.linspace(-0.5, 0.5, 60)
    ref = LogisticRegression(3)
    ref.fit(x, y, weight=w, offset=off)
    for wa, oa in ((w.tolist(), off.tolist()), (w.numpy(), off.numpy())):
        m = LogisticRegression(3)
        m.fit(x, y, weight=wa, offset=oa)
        torch.testing.assert_close(m.linear.weight, ref.linear.weight, rtol=0, atol=0)
        torch.testing.assert_close(m.loss(x, y, wa, oa), ref.loss(x, y, w, off))
    with pytest.raises(
        InputError,
        match="weight: expected a tensor or an array-like of numbers, got list",
    ):
        LogisticRegression(3).fit(x, y, weight=["a"] * 60)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_features_whose_squares_overflow_are_rejected(dtype):
    x, y = _data()
    x = x.to(dtype)
    bound = math.sqrt(torch.finfo(dtype).max / x.shape[0])
    one = x.clone()
    one[3, 1] = 1e308 if dtype == torch.float64 else 1e38
    for bad in (one, x * (1e307 if dtype == torch.float64 else 1e37)):
        with pytest.raises(InputError, match=r"X: expected \|values\| <= sqrt\(finfo.*rescale the data"):
            LogisticRegression(3, dtype=dtype).fit(bad, y)
    ok = x / x.abs().max() * 0.5 * bound  # just inside the bound: accepted
    LogisticRegression(3, dtype=dtype).check_data(ok, y)


def test_regression_targets_whose_squares_overflow_are_rejected():
    x, _ = _data()
    y = torch.randn(60, generator=torch.Generator().manual_seed(1))
    y[0] = 1e200
    with pytest.raises(InputError, match=r"y: expected \|values\| <= .* got max \|y\| = 1e\+200"):
        GeneralizedLinearModel(3, "gaussian").fit(x, y)


def test_fit_glm_without_residual_degrees_of_freedom_matches_statsmodels():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 2, generator=g), torch.randn(3, generator=g)
    with pytest.warns(RuntimeWarning, match="no residual degrees of freedom"):
        res = fit_glm(GeneralizedLinearModel(2, "gaussian"), x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sm.GLM(y.numpy(), sm.add_constant(x.numpy(), prepend=False)).fit()
    assert res.df_resid == ref.df_resid == 0
    assert res.scale == ref.scale == math.inf  # X^2 ~ 1e-30 > 0 over 0 rows of freedom
    assert bool(torch.isinf(res.bse).all()) and np.isinf(ref.bse).all()
    assert any("no residual degrees of freedom" in n for n in res.notes)
    # Families without a dispersion keep scale = 1 (statsmodels too).
    yp = torch.tensor([1.0, 3.0, 0.0])
    assert fit_glm(GeneralizedLinearModel(2, "poisson"), x, yp).scale == 1.0


@pytest.mark.parametrize(
    "make, y, present",
    [
        (lambda: LogisticRegression(3), torch.zeros(60, dtype=torch.long), 0),
        (lambda: ProbitRegression(3), torch.ones(60, dtype=torch.long), 1),
        (lambda: SoftmaxRegression(3, 4), torch.full((60,), 2), 2),
    ],
)
def test_single_class_data_are_rejected_naming_the_class(make, y, present):
    x, _ = _data()
    with pytest.raises(
        ValueError,
        match=f"y: expected at least two classes, got a single class {present}",
    ):
        make().fit(x, y)
    make().loss(x, y)  # scoring one class is fine; only fitting needs two


def test_single_class_among_positive_weights_is_rejected():
    x, y = _data()
    with pytest.raises(InputError, match="a single class 1"):
        LogisticRegression(3).fit(x, y, weight=y.double())


def test_the_cli_data_module_uses_the_same_class_rule(tmp_path):
    x, _ = _data()
    path = tmp_path / "one.csv"
    np.savetxt(
        path,
        np.column_stack([x.numpy(), np.ones(60)]),
        delimiter=",",
        header="a,b,c,y",
        comments="",
    )
    dm = GLMDataModule(str(path), target="y", task="classification")
    with pytest.raises(
        InputError,
        match=r"y: expected at least two classes, got a single class 1",
    ):
        dm.setup()


# -- 7. every (family, link) at extreme eta, against mpmath ------------------------------
mp.mp.dps = 60
_SQRT2 = mp.sqrt(2)
ETAS = [
    -1e4,
    -50,
    -37.5,
    -20.0001,
    -19.9999,
    -10,
    -1,
    -0.367,
    -0.366,
    0,
    0.5,
    3,
    6.999,
    7.001,
    10,
    50,
    700,
    1e4,
]
TARGETS = {
    "gaussian": [0.5],
    "bernoulli": [0, 1],
    "binomial": [0.0, 0.3, 1.0],
    "poisson": [0.0, 3.0],
    "gamma": [1.5],
    "exponential": [1.5],
    "categorical": [0, 1],
}

_MU = {
    "identity": lambda e: e,
    "logit": lambda e: 1 / (1 + mp.exp(-e)),
    "probit": lambda e: mp.erfc(-e / _SQRT2) / 2,
    "cloglog": lambda e: -mp.expm1(-mp.exp(e)),
    "log": mp.exp,
    "inverse": lambda e: 1 / e,
    "negative_reciprocal": lambda e: -1 / e,
    "sqrt": lambda e: e * e,
    "cauchit": lambda e: mp.mpf(1) / 2 + mp.atan(e) / mp.pi,
}


def _cloglog_log_mu(e):
    # log(1 - e^{-e^eta}); beyond eta = 100 it is -e^{-e^eta}, below 10^(-10^43) and 0 in
    # any float (mp.diff would spend a minute on the 60-digit zero).
    return mp.log(-mp.expm1(-mp.exp(e))) if e < 100 else mp.mpf(0)


_LOG_MU = {
    "logit": lambda e: -mp.log1p(mp.exp(-e)),
    "probit": lambda e: mp.log(mp.erfc(-e / _SQRT2) / 2),
    "cloglog": _cloglog_log_mu,
    "log": lambda e: e,
    "inverse": lambda e: -mp.log(e),
    "negative_reciprocal": lambda e: -mp.log(-e),
    "identity": mp.log,
    "sqrt": lambda e: mp.log(e * e),
    "cauchit": lambda e: mp.log(mp.mpf(1) / 2 + mp.atan(e) / mp.pi),
}
_LOG_1M_MU = {
    "logit": lambda e: -mp.log1p(mp.exp(e)),
    "probit": lambda e: mp.log(mp.erfc(e / _SQRT2) / 2),
    "cloglog": lambda e: -mp.exp(e),
    "log": lambda e: mp.log(-mp.expm1(e)),
    "cauchit": lambda e: mp.log(mp.mpf(1) / 2 - mp.atan(e) / mp.pi),
}


def _nll_mp(family, link, y, e):
    """-log p(y | eta) in 60-digit arithmetic (the families' formulas at phi = 1)."""
    if family == "gaussian":
        return (y - _MU[link](e)) ** 2 / 2 + mp.log(2 * mp.pi) / 2
    if family in ("bernoulli", "binomial"):  # 0 log 0 = 0
        return -((y * _LOG_MU[link](e) if y > 0 else 0) + ((1 - y) * _LOG_1M_MU[link](e) if y < 1 else 0))
    if family == "poisson":
        return _MU[link](e) - y * _LOG_MU[link](e) + mp.loggamma(y + 1)
    if family in ("gamma", "exponential"):
        return _LOG_MU[link](e) + y / _MU[link](e)
    return mp.log(mp.exp(e) + 1) - (e if y == 0 else 0)  # categorical, eta row (e, 0)


def _in_domain(family, link, e):
    if family == "gaussian" and link == "inverse":
        return e != 0  # any real mean 1/eta
    if link == "inverse" or (link == "identity" and family in ("poisson", "gamma", "exponential")):
        return e > 0
    if link == "negative_reciprocal" or (family in ("bernoulli", "binomial") and link == "log"):
        return e < 0
    if link == "sqrt":
        return e != 0  # mu = eta^2 > 0
    return True


PAIRS = [(f, link) for f, cls in FAMILIES.items() for link in cls.allowed_links]


def test_every_link_is_covered():
    assert {link for _, link in PAIRS} == set(LINKS)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family, link", PAIRS)
def test_nll_and_eta_derivatives_at_extreme_eta_match_mpmath(family, link, dtype):
    """nll, d1, d2 finite and within rtol (1e-10 float64, 1e-5 float32) plus one ulp of 1
    of the 60-digit values wherever those are finite in ``dtype``; never NaN."""
    fam = get_family(family, link)
    fi = torch.finfo(dtype)
    rtol = 1e-10 if dtype == torch.float64 else 1e-5
    for y in TARGETS[family]:
        etas = [e for e in ETAS if _in_domain(family, link, e)]
        if family == "categorical":
            eta = torch.tensor([[e, 0.0] for e in etas], dtype=dtype)
            yt = torch.full((len(etas),), y)
        else:
            eta = torch.tensor(etas, dtype=dtype)
            yt = torch.full((len(etas),), y, dtype=None if fam.is_classifier else dtype)
            yt = yt.long() if fam.is_classifier else yt
        nll, d1, d2 = eta_derivatives(fam, eta, yt)
        ours = [nll, d1.reshape(len(etas), -1)[:, 0], d2.reshape(len(etas), -1)[:, 0]]
        assert not bool(torch.isnan(nll).any()), (y, nll)

        def f(t, y=y):
            return _nll_mp(family, link, y, t)

        for i, e in enumerate(etas):
            ref = [f(mp.mpf(e)), mp.diff(f, mp.mpf(e), 1), mp.diff(f, mp.mpf(e), 2)]
            for name, got, r in zip(("nll", "d1", "d2"), ours, ref):
                if abs(r) >= fi.max:
                    continue
                r, g = float(r), float(got[i])
                assert math.isfinite(g) and abs(g - r) <= rtol * abs(r) + fi.eps, (
                    name,
                    y,
                    e,
                    g,
                    r,
                )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_probit_mills_ratio_at_minus_1e4(dtype):
    """The defect: float32 d1 was -64,930 (true -10,000.0001) and d2 3.6e9 (true 1 - 1e-8)."""
    fam = get_family("bernoulli", "probit")
    _, d1, d2 = eta_derivatives(fam, torch.tensor([-1e4, 1e4], dtype=dtype), torch.tensor([1, 0]))
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(d1, torch.tensor([-1e4 - 1e-4, 1e4 + 1e-4], dtype=dtype), rtol=rtol, atol=0)
    torch.testing.assert_close(d2, torch.tensor([1 - 1e-8, 1 - 1e-8], dtype=dtype), rtol=rtol, atol=0)


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # vmap's fallback for log_ndtr
def test_probit_derivatives_work_under_plain_autograd_and_vmap():
    link = LINKS["probit"]()
    eta = torch.tensor([-1e4, -30.0, -1.0, 0.0, 2.0], requires_grad=True)
    (d1,) = torch.autograd.grad(link.log_inverse(eta).sum(), eta, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), eta)
    e = eta.detach()
    r = torch.exp(torch.distributions.Normal(0.0, 1.0).log_prob(e) - torch.special.log_ndtr(e))
    torch.testing.assert_close(d1[1:], r[1:], rtol=1e-12, atol=0)
    torch.testing.assert_close(d2[1:], -r[1:] * (e[1:] + r[1:]), rtol=1e-9, atol=0)
    batched = torch.vmap(torch.func.grad(lambda t: link.log_inverse(t).sum()))(e[:, None])
    torch.testing.assert_close(batched[:, 0], d1.detach())


@pytest.mark.parametrize("eta", [700.0, 710.0, 1e4])
def test_cloglog_nll_is_zero_not_nan_for_y1_at_large_eta(eta):
    """The defect: NaN at eta >= ~710 with y = 1 (true value -log(1 - e^{-e^eta}) = 0)."""
    fam = get_family("bernoulli", "cloglog")
    nll, d1, d2 = eta_derivatives(fam, torch.tensor([eta]), torch.tensor([1]))
    assert nll.item() == 0 and d1.item() == 0 and d2.item() == 0


# -- features whose sums of squares underflow ----------------------------------------------
@pytest.mark.parametrize("solver", sorted(SOLVERS) + ["auto"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_underflowing_features_are_refused_by_every_solver(solver, dtype):
    """Features at 1e-200 (1e-25 in float32) square to 0: X^T W X is 0 and every solver
    stopped at iteration 0 with zero coefficients and converged=True. The one data gate
    refuses them with the remedy; a zero column alone stays accepted."""
    x, y = _data(n=80)
    tiny = 1e-200 if dtype == torch.float64 else 1e-25
    x = x.to(dtype)
    model = LogisticRegression(3, dtype=dtype)
    with pytest.raises(
        InputError, match=r"X: expected every nonzero column with max \|value\| >= sqrt\(finfo"
    ):
        model.fit(x * tiny, y, solver=solver)
    bad = x.clone()
    bad[:, 1] *= tiny
    with pytest.raises(InputError, match=r"first column 1 with max \|X\[:, 1\]\|"):
        model.fit(bad, y, solver=solver)


def test_zero_and_sparse_columns_pass_the_underflow_gate():
    from torchglm._validation import check_magnitude

    x = torch.randn(20, 3, dtype=torch.float64)
    x[:, 1] = 0.0
    check_magnitude("X", x)  # an all-zero column is not an underflow
    sparse = x.to_sparse_csr()
    check_magnitude("X", sparse)
    x[3, 2] = 1e-170  # one tiny entry in a column of order 1: its squares do not vanish
    check_magnitude("X", x)
    x[:, 0] *= 1e-170
    for t in (x, x.to_sparse_csr(), x.to_sparse()):
        with pytest.raises(InputError, match="first column 0"):
            check_magnitude("X", t)


def test_underflow_gate_decides_the_same_from_the_first_row_or_past_it(monkeypatch):
    """Where the first row proves every column (all its entries at or above the
    bound), the gate reads no other row; where it leaves a column open (a zero or
    tiny entry there), the gate decides from the rows after it, as before."""
    from torchglm import _validation

    x = torch.randn(40, 3, dtype=torch.float64)
    calls = []
    real = _validation._column_max_abs
    monkeypatch.setattr(_validation, "_column_max_abs", lambda t: calls.append(1) or real(t))
    _validation.check_magnitude("X", x)
    for first in (0.0, 1e-170):
        x[0, 1] = first  # column 1 open in the first row, of order 1 below it: accepted
        _validation.check_magnitude("X", x)
        y = x.clone()
        y[1:, 1] *= 1e-170  # and tiny below it too: refused
        with pytest.raises(InputError, match="first column 1"):
            _validation.check_magnitude("X", y)
    assert len(calls) == 2  # the exact column maxima only for the refused designs


@pytest.mark.parametrize("row", [5, 68])  # in the row groups the gate reduces first, or after them
@pytest.mark.parametrize("order", ["C", "F"])
def test_underflow_gate_sees_every_row(row, order):
    """The per-column extremes run over groups of rows and the rows after the last
    group: a column of order 1e-170 with its one entry of order 1 in either place is
    accepted, and refused without it, for a contiguous and a column-major design."""
    from torchglm._validation import check_magnitude

    x = torch.randn(70, 3, dtype=torch.float64)
    x[:, 2] *= 1e-170
    x[row, 2] = -2.0  # the column's largest magnitude, negative
    as_order = (lambda t: t) if order == "C" else (lambda t: t.T.contiguous().T)
    check_magnitude("X", as_order(x))
    x[row, 2] = 1e-170
    with pytest.raises(InputError, match="first column 2"):
        check_magnitude("X", as_order(x))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_underflow_gate_reads_past_the_first_rows_when_they_prove_nothing(dtype):
    """The gate's shortcut (every column has an entry at or above the bound among the
    first ``_PROOF_ROWS`` rows) decides nothing for a column those rows leave open: a
    column zero or tiny there is judged on all its rows, so its one entry of order 1
    far below them passes it, and without that entry it is refused (or, all zero, left
    alone)."""
    from torchglm._validation import _PROOF_ROWS, check_features

    tiny = 1e-170 if dtype == torch.float64 else 1e-22
    n = 3 * _PROOF_ROWS
    x = torch.randn(n, 3, dtype=torch.float64).to(dtype)
    x[:, 1] = 0.0
    x[:, 2] *= tiny
    x[n - 5, 2] = 1.5
    check_features("X", x, 3, magnitude=True)  # column 2 reaches the bound only at row n - 5
    x[n - 5, 2] = tiny
    with pytest.raises(InputError, match="first column 2"):
        check_features("X", x, 3, magnitude=True)
    x[:, 2] = 0.0
    x[n - 1, 1] = 2.0  # column 1: zero in the first rows, then of order 1
    check_features("X", x, 3, magnitude=True)


@pytest.mark.parametrize("l2", [math.inf, -math.inf, math.nan, -1.0])
@pytest.mark.parametrize(
    "make",
    [
        lambda l2: LogisticRegression(2, l2=l2),
        lambda l2: ProbitRegression(2, l2=l2),
        lambda l2: SoftmaxRegression(2, 3, l2=l2),
        lambda l2: GeneralizedLinearModel(2, "poisson", l2=l2),
    ],
    ids=["logistic", "probit", "softmax", "glm"],
)
def test_l2_must_be_finite_and_non_negative(make, l2):
    """l2 = inf leaves no finite objective (inf at every w != 0, NaN at w = 0): refused
    where every model checks its constructor arguments."""
    with pytest.raises(InputError, match=r"^l2: expected a (finite )?non-negative number"):
        make(l2)


def test_l2_inf_from_a_scikit_learn_wrapper_is_refused():
    from torchglm.sklearn import GLMRegressor
    from torchglm.sklearn import LogisticRegression as SkLogistic

    x, y = _data(n=40, d=2)
    with pytest.raises(InputError, match="^l2: expected a finite non-negative number, got inf"):
        GLMRegressor(family="gaussian", alpha=math.inf).fit(x.numpy(), y.numpy().astype(float))
    # C so small that l2 = 1 / (C n) overflows to inf
    with pytest.raises(InputError, match="^l2: expected a finite non-negative number, got inf"):
        SkLogistic(C=1e-320).fit(x.numpy(), y.numpy())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("order", ["C", "F"])
def test_feature_gate_reads_the_columns_once(dtype, order):
    """The column extremes the underflow gate falls back on equal torch's per-column
    ``amin``/``amax`` (NumPy's reductions for float32/float64 on a CPU, torch's
    otherwise), and a NaN or an inf gets ``check_features``' finiteness message with its
    count and first index."""
    from torchglm._validation import _column_extremes, check_features

    x = torch.randn(70, 3, dtype=torch.float64).to(dtype)
    x = x if order == "C" else x.T.contiguous().T
    lo, hi = _column_extremes(x)
    assert torch.equal(lo, x.amin(0)) and torch.equal(hi, x.amax(0))
    check_features("X", x, 3, magnitude=True)
    for bad, what in ((float("nan"), r"\(1 NaN, 0 inf\)"), (float("-inf"), r"\(0 NaN, 1 inf\)")):
        y = x.clone()
        y[41, 2] = bad
        with pytest.raises(
            InputError, match=rf"X: expected finite values .*{what}, first at index \(41, 2\)"
        ):
            check_features("X", y, 3, magnitude=True)
