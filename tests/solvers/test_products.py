"""One-column products of large dense batches through scipy's BLAS
(:func:`torchglm.solvers.products.mv`, :func:`~torchglm.solvers.products.add_rt_v`),
and float64 products of few rows through its dgemm
(:func:`~torchglm.solvers.products.addmm_few_rows`): the same values as torch's
products, OpenBLAS kept to one thread, and fits that take the path land where torch's
products take them."""

import pytest
import torch

from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import fit, products

pytestmark = [
    pytest.mark.usefixtures("quiet_one_thread"),
    pytest.mark.skipif(products._openblas() is None, reason="scipy's BLAS is not OpenBLAS here"),
]


@pytest.fixture
def gemv_calls(monkeypatch):
    """The dtypes of every scipy gemv call, with OpenBLAS's thread counts at that moment."""
    calls = []
    table, pools, _ = products._openblas()
    for dtype, real in list(table.items()):

        def spy(*args, _real=real, _dtype=dtype, **kwargs):
            calls.append((_dtype, [p.get_num_threads() for p in pools]))
            return _real(*args, **kwargs)

        monkeypatch.setitem(table, dtype, spy)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_column_products_through_blas_equal_torch(dtype, gemv_calls):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 100, generator=g, dtype=torch.float64).to(dtype)
    w, r = torch.randn(100, generator=g, dtype=dtype), torch.randn(3000, generator=g, dtype=dtype)
    b = torch.tensor([0.25], dtype=dtype)
    assert products.gemv_applies(x)
    eta = products.mv(x, w, b)
    out = torch.ones(100, dtype=dtype)
    products.add_rt_v(out, x, r)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-11)
    torch.testing.assert_close(eta, x.double() @ w.double() + 0.25, check_dtype=False, **tol)
    torch.testing.assert_close(out, 1 + x.double().T @ r.double(), check_dtype=False, **tol)
    assert eta.dtype == out.dtype == dtype and [c[0] for c in gemv_calls] == [dtype, dtype]


def test_small_narrow_strided_or_differentiable_batches_keep_torch_products(gemv_calls):
    g = torch.Generator().manual_seed(1)
    big = torch.randn(3000, 100, generator=g, dtype=torch.float64)
    cases = [
        big[:1000],  # under GEMV_MIN_ENTRIES
        torch.randn(20_000, 20, generator=g, dtype=torch.float64),  # under GEMV_MIN_WIDTH
        torch.randn(3000, 200, generator=g, dtype=torch.float64)[:, ::2],  # not contiguous
        big.clone().requires_grad_(),
        big.to(torch.bfloat16),
    ]
    for x in cases:
        assert not products.gemv_applies(x)
        w = torch.randn(x.shape[1], generator=g, dtype=torch.float64).to(x.dtype)
        with torch.no_grad():
            torch.testing.assert_close(products.mv(x, w), x @ w)
    assert gemv_calls == []


def _large_fit(solver, **options):
    """A logistic fit whose batch runs in slabs (over 8 MB) of 2^18+ entries each."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(12_000, 100, generator=g, dtype=torch.float64)
    y = (
        torch.rand(12_000, generator=g, dtype=torch.float64) < torch.sigmoid(x[:, 0] - 0.5 * x[:, 1])
    ).double()
    model = GeneralizedLinearModel(100, "bernoulli", "logit", l2=1e-3, dtype=torch.float64)
    result = fit(model, x, y, solver=solver, **options)
    return result, model.flat_parameters()


@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg", "newton"])
def test_a_large_dense_fit_through_blas_lands_where_torch_products_land(solver, gemv_calls, monkeypatch):
    """L-BFGS's first-order slab passes, Newton-CG's Hessian-vector products and a
    Newton pass's eta all take the scipy path (and OpenBLAS runs on one thread though
    it was set to two); the optimum is torch's products' to rounding."""
    table, pools, _ = products._openblas()
    before = [p.get_num_threads() for p in pools]
    for p in pools:
        p.set_num_threads(2)
    try:
        result, theta = _large_fit(solver)
        assert [p.get_num_threads() for p in pools] == [2] * len(pools)  # restored
    finally:
        for p, n in zip(pools, before):
            p.set_num_threads(n)
    assert result.converged and gemv_calls
    assert all(threads == [1] * len(pools) for _, threads in gemv_calls)
    monkeypatch.setattr(products, "GEMV_MIN_ENTRIES", 2**40)  # torch's products throughout
    calls = len(gemv_calls)
    reference, theta_torch = _large_fit(solver)
    assert len(gemv_calls) == calls and reference.converged
    torch.testing.assert_close(theta, theta_torch, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_column_square_products_through_blas_equal_torch(dtype, gemv_calls):
    """``h^T (x * x)`` (a Jacobi diagonal) over chunks that scipy's gemv takes."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(11_000, 100, generator=g, dtype=torch.float64).to(dtype)
    h = torch.rand(11_000, 1, generator=g, dtype=torch.float64).to(dtype)
    out = products.rt_x(h, x, square=True)
    expected = (h.double().T @ (x.double() * x.double())).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(out, expected, **tol)
    assert len(gemv_calls) >= 2 and {c[0] for c in gemv_calls} == {dtype}


def test_openblas_runs_on_one_thread_while_torch_has_two():
    """The pass's gemv keeps to one OpenBLAS thread whatever torch's count and the
    pool's own; a batch scipy's BLAS does not take sets nothing."""
    _, pools, _ = products._openblas()
    before_blas, before_torch = [p.get_num_threads() for p in pools], torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for p in pools:
            p.set_num_threads(2)
        with products.blas_threads(torch.zeros(3000, 100)):
            assert [p.get_num_threads() for p in pools] == [1] * len(pools)
        assert [p.get_num_threads() for p in pools] == [2] * len(pools)
        with products.blas_threads(torch.zeros(3000, 10)):  # too narrow: torch's products
            assert [p.get_num_threads() for p in pools] == [2] * len(pools)
    finally:
        torch.set_num_threads(before_torch)
        for p, n in zip(pools, before_blas):
            p.set_num_threads(n)


@pytest.fixture
def dgemm_calls(monkeypatch):
    """OpenBLAS's thread counts at every scipy dgemm call of :func:`products.addmm_few_rows`."""
    calls = []
    table, pools, real = products._openblas()

    def spy(*args, **kwargs):
        calls.append([p.get_num_threads() for p in pools])
        return real(*args, **kwargs)

    monkeypatch.setattr(products, "_openblas", lambda: products._OpenBLAS(table, pools, spy))
    return calls


def test_few_row_products_through_dgemm_equal_torch(dgemm_calls):
    """``out += a @ b`` for ``a`` of few rows (a Newton-CG product of digits' size) runs
    as OpenBLAS's dgemm in float64, in place, to torch's values; float32, one row of a
    tiny fit, many rows, a strided factor or torch on two threads keep torch's ``addmm_``."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(10, 64, generator=g, dtype=torch.float64)
    b = torch.randn(64, 1797, generator=g, dtype=torch.float64)
    out = torch.ones(10, 1797, dtype=torch.float64)
    assert products.few_rows_applies(a, b)
    assert products.addmm_few_rows(out, a, b) is out
    torch.testing.assert_close(out, 1 + a @ b, rtol=1e-13, atol=1e-12)
    assert len(dgemm_calls) == 1
    cases = [
        (a.float(), b.float()),
        (torch.randn(1, 30, dtype=torch.float64), torch.randn(30, 455, dtype=torch.float64)),
        (torch.randn(64, 64, dtype=torch.float64), b),
        (a, torch.randn(1797, 64, dtype=torch.float64).T),
    ]
    for x, y in cases:
        assert not products.few_rows_applies(x, y)
        res = products.addmm_few_rows(torch.zeros(x.shape[0], y.shape[1], dtype=x.dtype), x, y)
        torch.testing.assert_close(res, x @ y)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # MKL's products on both threads: torch's
        assert not products.few_rows_applies(a, b)
        torch.testing.assert_close(
            products.addmm_few_rows(torch.ones(10, 1797, dtype=torch.float64), a, b), 1 + a @ b
        )
    finally:
        torch.set_num_threads(before)
    assert len(dgemm_calls) == 1


def _dgemm_fit_lands_where_torch_lands(fitted, dgemm_calls, monkeypatch, rtol, atol, min_calls=1) -> None:
    """``fitted()`` (a fit: its parameters and steps) with OpenBLAS set to two threads
    takes at least ``min_calls`` products through dgemm with OpenBLAS held at one and
    restored after, and lands where torch's products (``FEW_ROWS_MAX = 0``) land, in as
    many steps."""
    _, pools, _ = products._openblas()
    before, calls = [p.get_num_threads() for p in pools], len(dgemm_calls)
    try:
        for p in pools:
            p.set_num_threads(2)
        theta, steps = fitted()
        assert [p.get_num_threads() for p in pools] == [2] * len(pools)
    finally:
        for p, n in zip(pools, before):
            p.set_num_threads(n)
    assert len(dgemm_calls) - calls >= min_calls and all(c == [1] * len(pools) for c in dgemm_calls[calls:])
    monkeypatch.setattr(products, "FEW_ROWS_MAX", 0)
    calls = len(dgemm_calls)
    theta_torch, steps_torch = fitted()
    assert len(dgemm_calls) == calls and steps == steps_torch
    torch.testing.assert_close(theta, theta_torch, rtol=rtol, atol=atol)


def test_a_softmax_newton_cg_fit_through_dgemm_lands_where_torch_products_land(dgemm_calls, monkeypatch):
    """A small softmax Newton-CG fit (1,800 x 64, K = 10) takes its Hessian-vector
    products through dgemm with OpenBLAS on one thread (set to two before), and lands on
    the optimum that torch's products give (``FEW_ROWS_MAX = 0``), in as many steps."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1800, 64, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (1800,), generator=g)

    def fitted():
        m = GeneralizedLinearModel(64, "categorical", "softmax", n_classes=10, l2=1e-3, dtype=torch.float64)
        r = fit(m, x, y, solver="newton-cg")
        assert r.converged
        return m.flat_parameters(), r.n_iter

    _dgemm_fit_lands_where_torch_lands(fitted, dgemm_calls, monkeypatch, rtol=1e-7, atol=1e-8)


def test_a_tiny_newton_fit_sums_its_hessian_through_dgemm(dgemm_calls, monkeypatch):
    """A tiny exact-Newton fit's Hessian ``X~^T [h X~]`` (455 x 31: ``a`` is the
    transpose of a contiguous matrix) runs as OpenBLAS's dgemm held at one thread (set
    to two before), to torch's values, and the fit lands where torch's products land
    (``FEW_ROWS_MAX = 0``), in as many steps."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(455, 30, generator=g, dtype=torch.float64)
    y = (x[:, :3].sum(1) + torch.randn(455, generator=g, dtype=torch.float64) > 0).long()
    xa = torch.cat([x, torch.ones(455, 1, dtype=torch.float64)], 1)
    h = torch.rand(455, 1, generator=g, dtype=torch.float64)
    assert products.few_rows_applies(xa.T, xa * h)
    H = torch.ones(31, 31, dtype=torch.float64)
    products.add_product(H, xa.T, xa * h, "highest")
    torch.testing.assert_close(H, 1 + xa.T @ (xa * h), rtol=1e-13, atol=1e-12)
    assert len(dgemm_calls) == 1

    def fitted():
        m = GeneralizedLinearModel(30, "bernoulli", "logit", l2=1e-2, dtype=torch.float64)
        r = fit(m, x, y, solver="newton")
        assert r.converged
        return m.flat_parameters(), r.n_iter

    _dgemm_fit_lands_where_torch_lands(fitted, dgemm_calls, monkeypatch, rtol=1e-10, atol=1e-12, min_calls=2)
