"""Device-aware passes, proved without a GPU.

* On an accelerator a pass is chunked by a memory budget (``_chunk_rows``: 2^26
  elements per product), not by the CPU cache: the number of matrix products in one
  Newton pass does not grow with the number of rows up to that budget, and a K-class
  softmax Hessian is one product per chunk over all class pairs, not K (K + 1) / 2.
  Here the accelerator's rule is applied to CPU tensors and the products are counted
  with ``torch.profiler``.
* No host synchronisation inside a pass: ``PassSums.add`` never reads a value back
  (no ``aten::item`` / ``aten::_local_scalar_dense``); counts and finiteness are read
  once, in ``finish``.
* Every solver and model runs on every available device with the CPU's result
  (``cuda`` is skipped where there is none).
* A fitter made before the model moves (Lightning restores a resumed run's weights
  and moves the model to its device and precision after the task has made it) begins
  its fit, by ``Fitter.restart_from(model)``, where the model then is: the same fit,
  bit for bit, as a fitter made then.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torchglm.solvers.products as P
from autograd_ref import assert_verified_optimum
from data_util import bernoulli_data, random_labels
from torchglm.data.batches import TensorBatches
from torchglm.models import GeneralizedLinearModel
from torchglm.passes import run_passes
from torchglm.solvers import DIRECT_SOLVERS, SOLVERS, fit, flat_parameters, make_fitter, set_flat_parameters
from torchglm.solvers.pass_sums import PassSums
from devices import DEVICES

MATMULS = {
    "aten::mm",
    "aten::addmm",
    "aten::addmm_",
    "aten::matmul",
    "aten::bmm",
    "aten::mv",
    "aten::addmv",
    "aten::addmv_",
    "aten::dot",
}
SYNCS = {"aten::item", "aten::_local_scalar_dense"}


def _data(n, d, K=None):
    if K is not None:
        return random_labels(n, d, k=K)
    x, y = bernoulli_data(n, d, (1.0, -1.0))
    return x, y.long()


def _model(d, K=None):
    if K is None:
        return GeneralizedLinearModel(d, "bernoulli", "logit", l2=1e-3, dtype=torch.float64)
    return GeneralizedLinearModel(d, "categorical", "softmax", n_classes=K, l2=1e-3, dtype=torch.float64)


def _profile_pass(model, x, y, curvature="full"):
    """Aten op counts of the ``add`` calls of one pass (and separately ``finish``)."""
    theta = model.flat_parameters(torch.float64)
    sums = PassSums(model, theta, curvature)
    batches = TensorBatches(x, y, batch_size=None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches:
            sums.add(b)
    counts = {}
    for e in prof.key_averages():
        counts[e.key] = counts.get(e.key, 0) + e.count
    sums.finish()
    return counts, sums


@pytest.fixture
def accelerator_chunks(monkeypatch):
    """The accelerator's chunk rule (ACCELERATOR_CHUNK elements per product, no CPU
    slabs), on CPU tensors."""
    monkeypatch.setattr(P, "fused_rows", lambda x, outputs=1: None)
    chunk_rows = P.chunk_rows
    monkeypatch.setattr(
        P, "chunk_rows", lambda x, width, cpu_budget=None: chunk_rows(x, width, P.ACCELERATOR_CHUNK)
    )


@pytest.mark.parametrize("K", [None, 4])
def test_matmul_count_of_a_newton_pass_does_not_grow_with_n(accelerator_chunks, K):
    counts = []
    for n in (2_000, 200_000):
        x, y = _data(n, 20, K)
        c, _ = _profile_pass(_model(20, K), x, y)
        counts.append(sum(v for k, v in c.items() if k in MATMULS))
    assert counts[0] == counts[1] > 0, counts
    if K is not None:
        # One product per chunk over all K (K + 1) / 2 = 10 class pairs, plus the
        # eta and gradient products: far fewer than one per pair.
        assert counts[1] < K * (K + 1) // 2


def test_cpu_slabs_grow_with_n_but_stay_cache_sized():
    """On the CPU the same pass is blocked for the cache (rows in slabs of about 4 MB):
    the opposite policy, chosen by the tensors' device."""
    c_small, _ = _profile_pass(_model(20), *_data(2_000, 20))
    c_large, _ = _profile_pass(_model(20), *_data(200_000, 20))
    mm = [sum(v for k, v in c.items() if k in MATMULS) for c in (c_small, c_large)]
    assert mm[1] > mm[0]


@pytest.mark.parametrize("curvature", [None, "full", "hvp"])
@pytest.mark.parametrize("K", [None, 3])
def test_no_host_read_inside_a_pass(curvature, K):
    x, y = _data(5_000, 8, K)
    model = _model(8, K)
    c, sums = _profile_pass(model, x, y, curvature)
    assert not (SYNCS & set(c)), {k: c[k] for k in SYNCS & set(c)}
    assert sums.n_samples == 5_000  # read once, in finish


def _fit_on(device, family, link, solver, K=None):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(400, 3, generator=g, dtype=torch.float64)
    eta = x @ torch.tensor([0.5, -0.3, 0.2], dtype=torch.float64)
    if family == "categorical":
        y = torch.randint(0, K, (400,), generator=g)
    elif family == "bernoulli":
        y = (torch.rand(400, generator=g, dtype=torch.float64) < torch.sigmoid(eta)).double()
    elif family == "poisson":
        y = torch.poisson(torch.exp(eta), generator=g)
    else:
        y = eta + 0.1 * torch.randn(400, generator=g, dtype=torch.float64)
    m = GeneralizedLinearModel(3, family, link, n_classes=K, l2=1e-3, dtype=torch.float64).to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit(m, x.to(device), y.to(device), solver=solver, max_iter=5000, tol=1e-12)
    return m, r, x, y


MODELS = [
    ("bernoulli", "logit", None),
    ("bernoulli", "probit", None),
    ("poisson", "log", None),
    ("gaussian", "identity", None),
    ("categorical", "softmax", 3),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("solver", sorted(SOLVERS) + ["auto"])
@pytest.mark.parametrize("family,link,K", MODELS)
def test_every_solver_and_model_on_every_device(device, solver, family, link, K):
    """The fit runs where its tensors are, claims convergence only at a verified
    optimum (an independent float64 Newton decrement on the CPU), and on an
    accelerator agrees with the CPU fit."""
    m, r, x, y = _fit_on(device, family, link, solver, K)
    assert m.coef.device.type == device
    if solver in ("newton", "irls", "newton-cg", "lbfgs", "auto"):
        assert r.converged, r.message
    assert_verified_optimum(m.cpu(), x, y, r)
    if device != "cpu":
        ref, r_cpu, _, _ = _fit_on("cpu", family, link, solver, K)
        assert r.converged == r_cpu.converged
        if r.converged:
            torch.testing.assert_close(m.coef.cpu(), ref.coef, rtol=1e-6, atol=1e-7)


def _restart_case(solver):
    """A model (float32, on the CPU, at zero), its data, and the options of ``solver``."""
    cls = SOLVERS.get(solver) or DIRECT_SOLVERS[solver]
    g = torch.Generator().manual_seed(3)
    x = torch.randn(150, 3, generator=g, dtype=torch.float64)
    eta = x @ torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    if solver == "qr":
        model = GeneralizedLinearModel(3, "gaussian", l2=1e-2)
        y = eta + torch.randn(150, generator=g, dtype=torch.float64)
    else:
        model = GeneralizedLinearModel(3, "bernoulli", "logit", l2=1e-2)
        y = (torch.rand(150, generator=g, dtype=torch.float64) < torch.sigmoid(eta)).double()
    options = {} if cls.budget_max_iter is None else {"max_iter": cls.budget_max_iter}
    return model, x, y, options


def _moved(model, device):
    """What Lightning does to the task's model between ``build()`` and
    ``configure_optimizers``: a resumed run's weights (here a point off zero), its
    device and its precision (here float64)."""
    model.to(device, torch.float64)
    set_flat_parameters(model, torch.tensor([0.3, -0.2, 0.1, 0.05], dtype=torch.float64, device=device))
    return model


def _fit(fitter, x, y, device):
    batches = TensorBatches(x.to(device), y.to(device), batch_size=64)
    return run_passes(fitter, batches, 50 * fitter.max_iter + 10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("solver", sorted(SOLVERS) + sorted(DIRECT_SOLVERS))
def test_restart_from_begins_the_fit_where_the_model_now_is(device, solver):
    """Every fitter of the registries: made on the initial model, then restarted from
    the moved one, it fits as a fitter made from the moved model does (its start, dtype
    and device are read at the restart, none kept from when it was made); and
    restarted again after that fit, it forgets the fit's record and the solver's
    memory (L-BFGS pairs, the coordinate, the last step) and fits the same again."""
    model, x, y, options = _restart_case(solver)
    fitter = make_fitter(model, solver, **options)
    start = flat_parameters(_moved(model, device), torch.float64)

    want_model, *_ = _restart_case(solver)
    want_fitter = make_fitter(_moved(want_model, device), solver, **options)
    want = _fit(want_fitter, x, y, device)
    want_theta = flat_parameters(want_model, torch.float64)

    for _ in range(2):
        set_flat_parameters(model, start)
        fitter.restart_from(model)
        assert fitter.theta.device == start.device and fitter.dtype == want_fitter.dtype
        got = _fit(fitter, x, y, device)
        assert got.converged and got.n_iter == want.n_iter, (got.message, want.message)
        assert [h["loss"] for h in got.history] == [h["loss"] for h in want.history]
        assert torch.equal(flat_parameters(model, torch.float64), want_theta)
