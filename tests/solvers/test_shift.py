"""The softmax shift directions (torchglm.solvers.shift)."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from torchglm.models import SoftmaxRegression
from torchglm.solvers import fit
from torchglm.solvers.shift import SoftmaxShift


@pytest.mark.parametrize("l2", [0.0, 1e-2])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_remove_is_the_projector_complement(l2, fit_intercept):
    """``remove(v)`` (the shifted columns' class means subtracted, O(p)) equals
    ``v - N v`` with the dense projector."""
    model = SoftmaxRegression(5, 4, l2=l2, fit_intercept=fit_intercept, dtype=torch.float64)
    shift = SoftmaxShift.of(model, torch.float64, "cpu")
    if shift is None:  # penalized, no intercept: no shift direction
        assert l2 > 0 and not fit_intercept
        return
    v = torch.randn(
        model.n_outputs * (5 + fit_intercept), generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    torch.testing.assert_close(shift.remove(v), v - shift.N @ v, rtol=0, atol=1e-14)


def test_a_wide_softmax_fits_without_a_dense_projector():
    """A penalized softmax over many sparse features (p = 200,004 parameters) fits
    through ``auto``: its CG finish projects the intercepts' shift in O(p); the dense
    (p, p) projector (320 GB here) is formed only for a dense Hessian's solve."""
    g = torch.Generator().manual_seed(1)
    n, d, k = 400, 50_000, 4
    rows = torch.arange(n).repeat_interleave(30)
    cols = torch.randint(0, d, (n * 30,), generator=g)
    x = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(n * 30, dtype=torch.float64), (n, d))
    x = x.coalesce().to_sparse_csr()
    y = torch.randint(0, k, (n,), generator=g)
    model = SoftmaxRegression(d, k, l2=1e-2, dtype=torch.float64)
    result = fit(model, x, y, solver="auto")
    assert result.converged
    # the intercepts' shift: the minimum-norm solution has class-mean zero
    assert abs(float(model.intercept.detach().sum())) < 1e-10


def test_lbfgs_with_many_classes_and_terms_builds_no_dense_projector():
    # 20 classes x 50,000 terms: p = 1,000,020 parameters, a dense N would take 8 TB
    rng = np.random.default_rng(0)
    n, d, K = 200, 50_000, 20
    X = sp.random(n, d, density=1e-3, random_state=0, format="csr")
    y = rng.integers(0, K, n)
    model = SoftmaxRegression(d, K, l2=1e-2, dtype=torch.float64)
    result = model.fit(X, y, solver="lbfgs", max_iter=3)
    assert result.n_iter == 3
    bias = model.intercept.detach()
    assert abs(float(bias.sum())) < 1e-10  # steps stay orthogonal to the bias's shift direction
