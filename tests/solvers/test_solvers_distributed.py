"""Two processes (gloo, CPU), each with half the rows, take the single-process iterates."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torchglm.data.batches import TensorBatches
from torchglm.models import LogisticRegression, SoftmaxRegression
from torchglm.passes import run_passes
from torchglm.solvers import SOLVERS, flat_parameters, make_fitter

from data_util import bernoulli_data, random_labels


def _data(softmax):
    if softmax:
        return random_labels(90, 3, k=3)
    x, y = bernoulli_data(90, 3, (1.0,))
    return x, y.long()


def _model(softmax):
    return (
        SoftmaxRegression(3, 3, l2=1e-2, dtype=torch.float64)
        if softmax
        else LogisticRegression(3, l2=1e-2, dtype=torch.float64)
    )


def _fit(solver, softmax, x, y):
    m = _model(softmax)
    # gd: 20 steps, before its line search reaches E's rounding (where sums in another
    # order may flip an accept/reject decision).
    r = run_passes(
        make_fitter(m, solver, max_iter=20 if solver == "gd" else 40, gtol=1e-12, tol=1e-20),
        TensorBatches(x, y, batch_size=16),
        400,
    )
    return flat_parameters(m), r.n_iter


def _worker(rank, init_file, out_file, solver, softmax):
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    x, y = _data(softmax)
    half = slice(0, 50) if rank == 0 else slice(50, 90)  # unequal shards on purpose
    theta, n_iter = _fit(solver, softmax, x[half], y[half])
    if rank == 0:
        torch.save((theta, n_iter), out_file)
    dist.barrier()
    dist.destroy_process_group()
    # Skip interpreter teardown: gloo's threads can abort it ("terminate called
    # without an active exception") after the work is done and saved.
    os._exit(0)


@pytest.mark.slow
@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_two_processes_match_one(solver, softmax):
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_file = os.path.join(tmp, "init"), os.path.join(tmp, "out.pt")
        mp.spawn(_worker, args=(init_file, out_file, solver, softmax), nprocs=2, join=True)
        theta2, n2 = torch.load(out_file)
    x, y = _data(softmax)
    theta1, n1 = _fit(solver, softmax, x, y)
    assert n1 == n2
    assert torch.allclose(theta1, theta2, rtol=0, atol=1e-10)
