"""Sparse (COO/CSR) bag-of-words designs give the same fits as dense ones, without
densifying the design: Newton-type and first-order solvers, mini-batch SGD, Naive Bayes."""

import warnings

import pytest
import torch

from torchglm import LogisticRegression, MultinomialNB, SoftmaxRegression
from torchglm.data import TensorBatches
from torchglm.solvers import fit


@pytest.fixture(autouse=True)
def _quiet_beta_sparse():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        yield


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
    make = (lambda: LogisticRegression(x.shape[1], l2=1e-2)) if k == 2 else \
        (lambda: SoftmaxRegression(x.shape[1], k, l2=1e-2))
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
            for b in TensorBatches(xs, y, batch_size=32, shuffle=True,
                                   generator=torch.Generator().manual_seed(1)):
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
