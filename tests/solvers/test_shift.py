"""The softmax shift directions (:class:`torchglm.solvers.shift.SoftmaxShift`): ``remove``
is ``v - N v`` with the dense projector of :func:`shift_null_projector`, and a
first-order fit of a model with many classes and features never builds that (p, p)
projector."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from torchglm.models import SoftmaxRegression
from torchglm.solvers.linalg import shift_null_projector
from torchglm.solvers.shift import SoftmaxShift


@pytest.mark.parametrize(("l2", "bias"), [(0.0, True), (0.1, True), (0.0, False)])
def test_remove_is_the_dense_projection(l2, bias):
    gen = torch.Generator().manual_seed(0)
    model = SoftmaxRegression(5, 4, l2=l2, fit_intercept=bias, dtype=torch.float64)
    shift = SoftmaxShift.of(model, torch.float64, "cpu")
    N = shift_null_projector(4, 5, bias, shift.columns, dtype=torch.float64)
    for v in (
        torch.randn(N.shape[0], generator=gen, dtype=torch.float64),
        torch.randn(N.shape[0], 3, generator=gen, dtype=torch.float64),
    ):
        assert torch.allclose(shift.remove(v), v - N @ v, rtol=0, atol=1e-15)
        assert shift.remove(shift.remove(v)).sub(shift.remove(v)).abs().max() < 1e-15  # a projection


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
