"""Perfectly separable data drive fitted probabilities to exactly 0 or 1: the
curvature must stay finite there (no 0/0), and the fit must end with a
SeparationWarning instead of a linear-algebra crash."""

import pytest
import torch

from torchglm import LogisticRegression, ProbitRegression, SeparationWarning
from torchglm.solvers import fit
from torchglm.solvers.eta_derivatives import eta_derivatives


@pytest.mark.parametrize("cls", [LogisticRegression, ProbitRegression])
@pytest.mark.parametrize("solver", ["newton", "irls"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_separable_data_warn_not_crash(cls, solver, dtype):
    x = torch.randn(1000, 5, dtype=dtype, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).long()
    model = cls(5, dtype=dtype)
    with pytest.warns(SeparationWarning, match="separation"):
        result = fit(model, x, y, solver=solver, dtype=dtype, polish=False)
    assert not result.converged
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("link", ["logit", "probit", "cloglog"])
def test_expected_information_is_finite_and_zero_at_saturation(link):
    from torchglm import get_family

    family = get_family("bernoulli", link)
    eta = torch.tensor([-800.0, -40.0, 0.0, 40.0, 800.0])
    y = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0])
    _, _, d2 = eta_derivatives(family, eta, y, order=2, expected=True)
    assert torch.isfinite(d2).all() and (d2 >= 0).all()
    assert d2[0] == 0 and d2[-1] == 0
