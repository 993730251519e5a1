"""The Newton system's pieces (:mod:`torchglm.solvers.linalg`): the Jacobi scaling and
the Cholesky pivots' condition estimate, against their definitions."""

import math

import pytest
import torch

from torchglm.solvers.linalg import _pivot_ratio_squared, equilibrate, newton_direction

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_equilibrate_is_one_over_the_root_of_each_usable_diagonal_entry(dtype):
    """``D_jj = |H_jj|^{-1/2}`` (``tiny`` below the smallest normal number), and 1
    where ``H_jj`` is 0, infinite or NaN."""
    tiny = torch.finfo(dtype).tiny
    diag = [
        4.0,
        -9.0,
        0.0,
        math.inf,
        -math.inf,
        math.nan,
        tiny / 8,
        1e30 if dtype == torch.float32 else 1e300,
    ]
    H = torch.diag(torch.tensor(diag, dtype=dtype))
    expected = []
    for h in diag:
        usable = 0 < abs(h) < math.inf
        expected.append(1.0 / math.sqrt(max(abs(h), tiny)) if usable else 1.0)
    got = equilibrate(H)
    assert got.dtype == dtype
    assert torch.equal(got, torch.tensor(expected, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_pivot_ratio_is_the_tensor_formula_to_the_last_bit(dtype):
    """``(min pivot / max pivot)^2`` read from the pivots is the value the tensor
    expression gives, bit for bit, in float64 (Python's floats) and in float32."""
    g = torch.Generator().manual_seed(0)
    for p in (1, 2, 31, 200):
        A = torch.randn(3 * p, p, generator=g, dtype=torch.float64)
        A = A * torch.logspace(0, 6, p, dtype=torch.float64)  # pivots over six decades
        L = torch.linalg.cholesky((A.T @ A).to(dtype))
        lo, hi = L.diagonal().aminmax()
        assert _pivot_ratio_squared(L) == float((lo / hi) ** 2)


def test_newton_direction_reports_the_squared_pivot_ratio():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(40, 6, generator=g, dtype=torch.float64)
    H, grad = A.T @ A / 40, torch.randn(6, generator=g, dtype=torch.float64)
    delta, note, flat, rcond, hidden, n_neg = newton_direction(H, grad)
    d = equilibrate(H)
    L = torch.linalg.cholesky(H * d * d.unsqueeze(1))
    lo, hi = L.diagonal().aminmax()
    assert note is None and flat == 0.0 and hidden == 0.0 and n_neg == 0
    assert rcond == float((lo / hi) ** 2)
    torch.testing.assert_close(H @ delta, -grad, rtol=0, atol=1e-13)
