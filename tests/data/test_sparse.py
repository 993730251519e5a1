"""Sparse (COO/CSR) bag-of-words designs give the same fits as dense ones, without
densifying the design: Newton-type and first-order solvers, mini-batch SGD, Naive Bayes."""

import pytest
import torch

from torchglm import LogisticRegression, MultinomialNB, SoftmaxRegression
from torchglm.data import TensorBatches
from torchglm.solvers import fit


pytestmark = pytest.mark.usefixtures("quiet_sparse_beta")


def _counts(n=300, d=40, k=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.poisson(torch.rand(n, d, generator=g) * (torch.rand(n, d, generator=g) < 0.15) * 6)
    w = torch.randn(d, k, generator=g)
    y = torch.multinomial(torch.softmax(x @ w * 0.5, 1), 1, generator=g).squeeze(1)
    return x, y


def _sparse(x, layout):
    return x.to_sparse_csr() if layout == "csr" else x.to_sparse_coo()


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("solver", ["newton", "irls", "newton-cg", "lbfgs", "gd"])
@pytest.mark.parametrize("k", [2, 3])
def test_sparse_design_equals_dense(layout, solver, k):
    x, y = _counts(k=k)
    make = (
        (lambda: LogisticRegression(x.shape[1], l2=1e-2))
        if k == 2
        else (lambda: SoftmaxRegression(x.shape[1], k, l2=1e-2))
    )
    if solver == "irls" and k > 2:
        pytest.skip("IRLS is defined for single-output families")
    dense, sparse = make(), make()
    opts = dict(solver=solver, batch_size=64)
    if solver in ("gd", "newton-cg"):
        opts.update(max_iter=5000, gtol=1e-8)
    rd = fit(dense, x, y, **opts)
    rs = fit(sparse, _sparse(x, layout), y, **opts)
    assert rd.converged and rs.converged
    if solver in ("newton", "irls", "lbfgs"):
        # Few iterations: the sparse products' different summation order stays at rounding.
        assert rs.n_iter == rd.n_iter
        # (L-BFGS finishes with Newton-CG steps, whose CG solves amplify rounding.)
        atol = 1e-9 if solver != "lbfgs" else 1e-7
    else:
        # Hundreds of line-searched steps amplify rounding differences into different
        # paths to the same optimum (within the stopping tolerance).
        atol = 1e-5
    torch.testing.assert_close(sparse.objective(x, y), dense.objective(x, y), rtol=1e-9, atol=0)
    for a, b in zip(sparse.parameters(), dense.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=atol)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_minibatch_sgd_equals_dense(layout):
    x, y = _counts()
    models = [LogisticRegression(x.shape[1], l2=1e-3) for _ in range(2)]
    for model, xs in zip(models, (x, _sparse(x, layout))):
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(3):
            for b in TensorBatches(
                xs, y, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1)
            ):
                opt.zero_grad()
                model.objective(b.x, b.y).backward()
                opt.step()
    for a, b in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_multinomial_nb_equals_dense(layout):
    x, y = _counts(k=3)
    dense, sparse = MultinomialNB(x.shape[1], 3), MultinomialNB(x.shape[1], 3)
    dense.fit(x, y)
    sparse.fit(_sparse(x, layout), y)
    for (name, a), b in zip(sparse.state_dict().items(), dense.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)
    torch.testing.assert_close(sparse.predict_proba(_sparse(x, layout)), dense.predict_proba(x))


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_rows_products_equal_dense_and_the_transpose_is_built_once(layout):
    """A pass's products over a sparse batch (``x W^T``, ``x^T r``, ``(x * x)^T h``)
    equal the dense ones; the CSR of ``x^T`` is built on the first pass over a batch
    and reused by the later passes (the fitter's cache), not rebuilt per pass."""
    from torchglm.solvers.products import rt_x
    from torchglm.solvers.sparse_rows import SparseRows

    g = torch.Generator().manual_seed(3)
    dense = torch.rand(300, 40, generator=g, dtype=torch.float64)
    dense[dense < 0.8] = 0
    x = dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()
    W = torch.randn(3, 40, generator=g, dtype=torch.float64)
    r = torch.randn(300, 3, generator=g, dtype=torch.float64)
    cache = {}
    batches = TensorBatches(x, torch.zeros(300), batch_size=128)
    built = []
    for _ in range(3):  # three passes over the same batches
        for i, b in enumerate(batches):
            rows = SparseRows.of(b.x, cache, torch.float64)
            sl = slice(128 * i, 128 * i + b.x.shape[0])
            torch.testing.assert_close(rows @ W.T, dense[sl] @ W.T, rtol=1e-14, atol=1e-14)
            torch.testing.assert_close(rt_x(r[sl], rows), r[sl].T @ dense[sl], rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(
                rt_x(r[sl], rows, square=True), r[sl].T @ dense[sl] ** 2, rtol=1e-13, atol=1e-13
            )
            built.append(id(rows.transposed()))
    if layout == "csr":  # CSR row slices are views: the same three transposes every pass
        assert len(cache) == 3 and len(set(built)) == 3


def test_sparse_fit_keeps_its_transposes_for_the_fit():
    """An L-BFGS fit over a CSR design builds each batch's scipy view once (on a CPU
    the products back onto x are scipy's CSR-transpose products: no copy of x^T is
    sorted or kept), not per pass."""
    import torchglm.solvers.sparse_rows as D

    g = torch.Generator().manual_seed(4)
    dense = torch.rand(2000, 60, generator=g, dtype=torch.float64)
    dense[dense < 0.9] = 0
    y = (
        torch.rand(2000, generator=g)
        < torch.sigmoid(dense @ torch.randn(60, generator=g, dtype=torch.float64))
    ).long()
    calls, views = [], []
    orig, orig_view = D.torch.argsort, D.SparseRows.scipy_view

    def counting(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    def watched(self, dtype):
        view = orig_view(self, dtype)
        views.append(id(view))
        assert "t" not in self.entry
        return view

    D.torch.argsort = counting
    D.SparseRows.scipy_view = watched
    try:
        m = LogisticRegression(60, l2=1e-3, dtype=torch.float64)
        r = fit(m, dense.to_sparse_csr(), y, solver="lbfgs", batch_size=700)
    finally:
        D.torch.argsort = orig
        D.SparseRows.scipy_view = orig_view
    assert r.converged and r.extra["passes"] > 5
    assert calls == []  # no transpose sorted
    assert len(views) > 3 * r.extra["passes"] // 2 and len(set(views)) == 3  # one view per batch
    md = LogisticRegression(60, l2=1e-3, dtype=torch.float64)
    fit(md, dense, y, solver="lbfgs", batch_size=700)
    torch.testing.assert_close(m.coef, md.coef, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("square", [False, "kept", "blocks"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_products_back_onto_sparse_rows_equal_dense(square, dtype, monkeypatch):
    """``r^T x`` and ``r^T (x * x)`` through scipy's view (CPU) and through the kept
    transpose (the path off the CPU) equal the dense products: the squared values of a
    small batch made once and kept with its entry (the same array in the next product),
    those of a larger one over several row blocks, never kept."""
    from torchglm.solvers import sparse_rows
    from torchglm.solvers.sparse_rows import SparseRows

    if square == "blocks":
        monkeypatch.setattr(sparse_rows, "SQUARES_KEPT_MAX", 1_000_000)
    g = torch.Generator().manual_seed(6)
    dense = torch.randn(3000, 700, generator=g, dtype=dtype)
    dense[torch.rand(3000, 700, generator=g) < 0.4] = 0  # 1.26M stored: two row blocks
    r = torch.randn(3000, 3, generator=g, dtype=dtype)
    want = r.T @ (dense * dense if square else dense)
    rows = SparseRows.of(dense.to_sparse_csr(), {}, dtype)
    tol = dict(rtol=1e-5, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(rows.rt(r, bool(square)), want, **tol)
    assert ("scipy_square" in rows.entry) == (square == "kept")
    if square == "kept":
        kept = rows.entry["scipy_square"]
        torch.testing.assert_close(rows.rt(2 * r, True), 2 * want, **tol)
        assert rows.entry["scipy_square"] is kept
    torch.testing.assert_close((rows.transposed(bool(square)) @ r).T, want, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_column_product_runs_through_scipy_and_equals_dense(dtype):
    """``x @ w`` for one column on a CPU is scipy's CSR product over the same arrays
    (the view the backward products use, no copy), in ``w``'s dtype, equal to the
    dense product; several columns, or a ``w`` that needs a gradient, stay torch's."""
    from torchglm.solvers.sparse_rows import SparseRows

    g = torch.Generator().manual_seed(7)
    dense = torch.randn(500, 90, generator=g, dtype=dtype)
    dense[torch.rand(500, 90, generator=g) < 0.7] = 0
    rows = SparseRows.of(dense.to_sparse_csr(), {}, dtype)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-13, atol=1e-12)
    w = torch.randn(1, 90, generator=g, dtype=dtype).T  # a transposed view, as W.T is
    out = rows @ w
    assert "scipy" in rows.entry and out.dtype == dtype and out.shape == (500, 1)
    torch.testing.assert_close(out, dense @ w, **tol)
    W = torch.randn(90, 3, generator=g, dtype=dtype)
    torch.testing.assert_close(rows @ W, dense @ W, **tol)
    wg = w.detach().clone().requires_grad_(True)
    (rows @ wg).sum().backward()
    torch.testing.assert_close(wg.grad, dense.sum(0, keepdim=True).T, **tol)


def test_the_transpose_cache_keeps_only_what_the_passes_use():
    """Shuffled batches are new tensors every pass: the fitter's cache holds at most the
    last pass's batches (it grew by a pass's batches per pass), and a fixed order keeps
    the same entries for the whole fit."""
    from torchglm.passes import run_passes
    from torchglm.solvers import make_fitter

    g = torch.Generator().manual_seed(5)
    dense = torch.rand(600, 30, generator=g, dtype=torch.float64)
    dense[dense < 0.85] = 0
    y = (torch.rand(600, generator=g) < 0.5).long()
    for shuffle in (True, False):
        m = LogisticRegression(30, l2=1e-2, dtype=torch.float64)
        fitter = make_fitter(m, "lbfgs")
        sizes = []
        start = fitter.start_pass

        def watched(start=start, fitter=fitter, sizes=sizes):
            start()
            sizes.append(len(fitter.sparse_cache))

        fitter.start_pass = watched
        batches = TensorBatches(
            dense.to_sparse_csr(),
            y,
            batch_size=200,
            shuffle=shuffle,
            generator=torch.Generator().manual_seed(0),
        )
        r = run_passes(fitter, batches, 200)
        assert r.converged and len(sizes) > 5
        assert max(sizes) <= 3, sizes  # one pass's three batches at most


def test_a_coo_design_is_converted_to_csr_once_per_fit(monkeypatch):
    """fit() converts a COO design to CSR before batching: every pass then slices CSR
    views (COO was gathered and converted per batch and pass, ~20x slower)."""
    from torchglm.solvers.sparse_rows import SparseRows

    g = torch.Generator().manual_seed(6)
    dense = torch.rand(500, 20, generator=g, dtype=torch.float64)
    dense[dense < 0.8] = 0
    y = (torch.rand(500, generator=g) < 0.5).long()
    layouts = []
    of = SparseRows.of

    def recording(x, cache, dtype):
        layouts.append(x.layout)
        return of(x, cache, dtype)

    monkeypatch.setattr(SparseRows, "of", staticmethod(recording))
    m = LogisticRegression(20, l2=1e-2, dtype=torch.float64)
    r = fit(m, dense.to_sparse(), y, solver="lbfgs", batch_size=200)
    assert r.converged and layouts and set(layouts) == {torch.sparse_csr}


def test_a_float32_batch_of_a_float64_pass_is_cast_once():
    """The cast to the fit's dtype is cached with the transposes: the same float64 CSR
    (and x^T) serves every pass over a float32 batch."""
    from torchglm.solvers.sparse_rows import SparseRows

    dense = torch.rand(300, 10, generator=torch.Generator().manual_seed(7))
    dense[dense < 0.7] = 0
    batches = TensorBatches(dense.to_sparse_csr(), torch.zeros(300), batch_size=150)
    cache, seen = {}, []
    for _ in range(3):
        SparseRows.evict_unseen(cache)
        for b in batches:
            rows = SparseRows.of(b.x, cache, torch.float64)
            assert rows.csr.dtype == torch.float64
            seen.append((id(rows.csr), id(rows.transposed())))
    assert len(cache) == 2 and len(set(seen)) == 2


def test_scipy_int32_indices_stay_int32_and_fit_like_dense():
    """scipy's int32 CSR indices are kept at the boundary (no int64 copy: the sparse
    products read half the index bytes), and the fit, its batches and MultinomialNB's
    counts on them equal the dense ones."""
    import numpy as np
    import scipy.sparse as sp

    from torchglm._validation import to_tensor

    rng = np.random.default_rng(7)
    dense = rng.random((500, 40)) * (rng.random((500, 40)) < 0.2)
    y = (rng.random(500) < 0.5).astype(np.int64)
    csr = sp.csr_matrix(dense)
    assert csr.indices.dtype == np.int32
    t = to_tensor("x", csr)
    assert t.crow_indices().dtype == t.col_indices().dtype == torch.int32
    wide = sp.csr_matrix(dense)
    wide.indptr, wide.indices = wide.indptr.astype(np.int64), wide.indices.astype(np.int64)
    assert to_tensor("x", wide).col_indices().dtype == torch.int64
    m, md = (LogisticRegression(40, l2=1e-2, dtype=torch.float64) for _ in range(2))
    assert fit(m, csr, y, solver="auto", batch_size=128).converged
    fit(md, dense, y, solver="auto")
    torch.testing.assert_close(m.coef, md.coef, rtol=1e-7, atol=1e-9)
    nb, nbd = MultinomialNB(40, 2, dtype=torch.float64), MultinomialNB(40, 2, dtype=torch.float64)
    nb.fit(csr, y)
    nbd.fit(dense, y)
    torch.testing.assert_close(nb.feature_count, nbd.feature_count, rtol=1e-12, atol=1e-12)


def test_auto_gives_lbfgs_a_longer_memory_on_a_sparse_design():
    """``auto`` on a sparse design runs L-BFGS with 30 pairs, fewer (not under 10)
    where the float64 pairs would take more bytes than the CSR (its passes, not its
    directions, are what the fit pays for), and from the Jacobi scaling (sparse counts
    are never standardized); a given ``memory`` and dense designs keep theirs."""
    from torchglm.solvers import api
    from torchglm.solvers.gradient import LBFGSFitter

    g = torch.Generator().manual_seed(8)
    dense = torch.rand(3000, 200, generator=g, dtype=torch.float64)
    dense[dense < 0.8] = 0  # about 120,000 stored: 1.9 MB of CSR against 16 * 201 bytes per pair
    s = dense.sum(1)
    y = (torch.rand(3000, generator=g) < torch.sigmoid(0.5 * (s - s.mean()))).long()
    assert api.sparse_lbfgs_memory(dense.to_sparse_csr(), 201) == 30
    assert api.sparse_lbfgs_memory(dense[:30].to_sparse_csr(), 201) == 10  # about 1,200 stored
    x = dense[:100].to_sparse_csr()  # about 4,000 stored: between the bounds
    nbytes = 16 * x.values().numel() + 8 * 101
    assert api.sparse_lbfgs_memory(x, 201) == nbytes // (16 * 201)
    assert 10 < nbytes // (16 * 201) < 30
    seen = []
    init = LBFGSFitter.__init__

    def recording(self, model, memory=10, jacobi=False, **options):
        seen.append((memory, jacobi))
        init(self, model, memory=memory, jacobi=jacobi, **options)

    LBFGSFitter.__init__ = recording
    try:
        for x, options in [(dense.to_sparse_csr(), {}), (dense.to_sparse_csr(), {"memory": 5}), (dense, {})]:
            # unpenalized: a small penalized problem goes to Newton-CG (choose_solver)
            m = LogisticRegression(200, dtype=torch.float64)
            assert api.choose_solver(m, 3000, 120_000) == "lbfgs"
            assert fit(m, x, y, solver="auto", **options).converged
    finally:
        LBFGSFitter.__init__ = init
    assert seen == [(30, True), (5, True), (10, False)]  # the Jacobi start: sparse only


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_large_dense_cast_keeps_values_and_order(order, dtype):
    """A dense design cast to the working dtype through a NumPy-allocated array (large
    ones, :func:`~torchglm.solvers.sparse_rows._numpy_buffer`) holds exactly
    ``Tensor.to``'s values in the same memory order; a small one, one that needs
    autograd and one without a C or Fortran order cast through ``Tensor.to``."""
    from torchglm.solvers.sparse_rows import NUMPY_BUFFER_MIN_BYTES, _numpy_buffer, cast_values

    g = torch.Generator().manual_seed(3)
    other = torch.float64 if dtype == torch.float32 else torch.float32
    rows = NUMPY_BUFFER_MIN_BYTES // (4 * 7) + 1
    x = (torch.randn(rows, 7, generator=g, dtype=torch.float64) * 1e3).to(other)
    x = x if order == "C" else x.T.contiguous().T
    assert _numpy_buffer(x, dtype) is not None
    out = cast_values(x, dtype)
    assert out.dtype == dtype and out.stride() == x.to(dtype).stride()
    assert torch.equal(out, x.to(dtype))
    assert _numpy_buffer(x[:10], dtype) is None
    assert _numpy_buffer(x[:, ::2], dtype) is None
    assert _numpy_buffer(x.clone().requires_grad_(), dtype) is None
    assert cast_values(x, other) is x


def test_a_float32_csr_fit_in_float64_shares_its_index_arrays():
    """The working-dtype copy of a CSR design casts only its values: the fit's
    batches share the caller's index arrays (``Tensor.to`` copied them too)."""
    from torchglm.solvers import api
    from torchglm.solvers.sparse_rows import cast_values

    g = torch.Generator().manual_seed(9)
    dense = torch.rand(400, 30, generator=g)
    dense[dense < 0.7] = 0
    x = dense.to_sparse_csr()
    wide = cast_values(x, torch.float64)
    assert wide.dtype == torch.float64 and wide.col_indices().data_ptr() == x.col_indices().data_ptr()
    assert wide.crow_indices().data_ptr() == x.crow_indices().data_ptr()
    torch.testing.assert_close(wide.to_dense(), dense.double(), rtol=0, atol=0)
    seen = []
    batches = api.TensorBatches

    def recording(xs, *a, **k):
        seen.append(xs.col_indices().data_ptr())
        return batches(xs, *a, **k)

    api.TensorBatches = recording
    try:
        y = (torch.rand(400, generator=g) < 0.5).long()
        assert fit(LogisticRegression(30, l2=1e-2, dtype=torch.float64), x, y).converged
    finally:
        api.TensorBatches = batches
    assert seen == [x.col_indices().data_ptr()]
