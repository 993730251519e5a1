"""The direct least-squares solver ``qr`` (Householder QR, TSQR over batches and
processes) for the Gaussian family with the identity link."""

import os
import tempfile

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torchglm import InputError, NumericalWarning
from torchglm.data.batches import TensorBatches
from torchglm.data.nist import NIST_LLS
from torchglm.models import GeneralizedLinearModel, LogisticRegression
from torchglm.passes import run_passes
from torchglm.solvers import choose_solver, fit, flat_parameters, make_fitter

sm = pytest.importorskip("statsmodels.api")

#: NIST StRD Longley, certified values: intercept, then x1..x6 (torchglm.data.nist).
LONGLEY = np.array(NIST_LLS["Longley"].coef)


def _digits(est, cert):
    return float(-np.log10(np.abs((est - cert) / cert)).max())


def _longley():
    return torch.tensor(NIST_LLS["Longley"].x), torch.tensor(NIST_LLS["Longley"].y)


def _params(m):
    return np.concatenate([m.linear.bias.detach().numpy(), m.linear.weight.detach().numpy()[0]])


@pytest.mark.parametrize("batch_size", [None, 5])
def test_longley_to_the_certified_digits(batch_size):
    """Raw Longley (cond(X~) = 4.9e9): QR keeps 11 of the certified digits on its worst
    coefficient; Newton on the equilibrated normal equations keeps about 7.4, and
    statsmodels' OLS fewer than QR."""
    x, y = _longley()
    m = GeneralizedLinearModel(6, "gaussian", dtype=torch.float64)
    r = fit(m, x, y, solver="qr", batch_size=batch_size)
    assert r.converged and r.extra["rank"] == 7
    assert _digits(_params(m), LONGLEY) >= 10.5
    Xc = np.column_stack([np.ones(16), x.numpy()])
    ols = sm.OLS(y.numpy(), Xc).fit().params
    assert _digits(_params(m), LONGLEY) > _digits(ols, LONGLEY)


def test_auto_picks_qr_for_gaussian_identity_only():
    assert choose_solver(GeneralizedLinearModel(3, "gaussian")) == "qr"
    assert choose_solver(GeneralizedLinearModel(3, "gaussian", "log")) != "qr"
    assert choose_solver(LogisticRegression(3)) != "qr"
    x, y = _longley()
    m = GeneralizedLinearModel(6, "gaussian", dtype=torch.float64)
    assert fit(m, x, y).solver == "qr"
    assert _digits(_params(m), LONGLEY) >= 10.5
    # A sparse design stays sparse: auto takes Newton there.
    m = GeneralizedLinearModel(6, "gaussian", dtype=torch.float64)
    xs = (x / x.abs().max(0).values).to_sparse()
    assert fit(m, xs, y).solver == "newton"


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_weights_offsets_and_penalty_match_newton(l2):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(400, 4, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2, 3, 0.5], dtype=torch.float64) + torch.randn(
        400, generator=g, dtype=torch.float64
    )
    w = torch.rand(400, generator=g, dtype=torch.float64) * 3
    off = torch.randn(400, generator=g, dtype=torch.float64)
    got = []
    for solver, bs in (("qr", None), ("qr", 33), ("newton", None)):
        m = GeneralizedLinearModel(4, "gaussian", l2=l2, dtype=torch.float64)
        r = fit(m, x, y, weight=w, offset=off, solver=solver, batch_size=bs, tol=1e-20)
        assert r.converged
        got.append(flat_parameters(m))
    torch.testing.assert_close(got[0], got[2], rtol=0, atol=1e-12)
    torch.testing.assert_close(got[1], got[2], rtol=0, atol=1e-12)


def test_gradient_at_the_solution_is_zero_and_reported():
    x, y = _longley()
    m = GeneralizedLinearModel(6, "gaussian", dtype=torch.float64)
    r = fit(m, (x - x.mean(0)) / x.std(0), y, solver="qr")
    assert float(r.extra["grad"].abs().max()) < 1e-6 * float(y.abs().max())
    assert r.extra["passes"] == 2 and r.n_iter == 1


def test_rank_deficient_design_gives_the_minimum_norm_solution_with_a_warning():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(200, 3, generator=g, dtype=torch.float64)
    x = torch.cat([z, 1e5 * z[:, :1]], 1)  # column 4 = 1e5 x column 1: rank 4 of 5
    y = z @ torch.tensor([1.0, 2, 3], dtype=torch.float64) + 0.1 * torch.randn(
        200, generator=g, dtype=torch.float64
    )
    m = GeneralizedLinearModel(4, "gaussian", dtype=torch.float64)
    with pytest.warns(NumericalWarning, match="rank 4 of 5"):
        r = fit(m, x, y, solver="qr")
    assert r.extra["rank"] == 4
    w = m.linear.weight.detach()[0]
    # Minimum norm in equilibrated units splits the effect evenly between the columns.
    assert abs(float(w[0]) - float(1e5 * w[3])) < 1e-8 * abs(float(w[0]))
    ref = GeneralizedLinearModel(3, "gaussian", dtype=torch.float64)
    fit(ref, z, y, solver="qr")
    assert abs(float(w[0] + 1e5 * w[3]) - float(ref.linear.weight[0, 0])) < 1e-10


def test_polynomial_design_beyond_the_normal_equations():
    """Degree 7 on [-9, -3] (cond(X~) ~ 1e9 after equilibration): QR agrees with an
    SVD solve of the column-equilibrated Vandermonde matrix, which Newton's normal
    equations (cond ~ 1e18) cannot."""
    t = torch.linspace(-9, -3, 82, dtype=torch.float64)
    x = torch.stack([t**k for k in range(1, 8)], 1)
    beta = torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = (
        beta[0]
        + x @ beta[1:]
        + 1e-3 * torch.randn(82, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    )
    A = torch.cat([torch.ones(82, 1, dtype=torch.float64), x], 1)
    c = A.norm(dim=0)
    ref = torch.linalg.lstsq(A / c, y.unsqueeze(-1), driver="gelsd").solution.squeeze(-1) / c
    m = GeneralizedLinearModel(7, "gaussian", dtype=torch.float64)
    fit(m, x, y, solver="qr")
    got = torch.from_numpy(_params(m))
    assert float(((got - ref) / ref).abs().max()) < 1e-5


def test_qr_refuses_other_families():
    with pytest.raises(InputError, match="Gaussian model with the identity link"):
        fit(LogisticRegression(2), torch.randn(10, 2), torch.randint(0, 2, (10,)), solver="qr")


def _worker(rank, init_file, out_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    x, y = _longley()
    part = slice(0, 9) if rank == 0 else slice(9, 16)
    m = GeneralizedLinearModel(6, "gaussian", dtype=torch.float64)
    run_passes(make_fitter(m, "qr"), TensorBatches(x[part], y[part], batch_size=4), 5)
    if rank == 0:
        torch.save(flat_parameters(m), out_file)
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


@pytest.mark.slow
def test_two_processes_solve_the_same_system():
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_file = os.path.join(tmp, "init"), os.path.join(tmp, "out.pt")
        mp.spawn(_worker, args=(init_file, out_file), nprocs=2, join=True)
        theta = torch.load(out_file)
    est = np.concatenate([theta[-1:].numpy(), theta[:-1].numpy()])
    assert _digits(est, LONGLEY) >= 10.5
