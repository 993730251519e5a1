"""2-process (gloo) fits equal 1-process fits: Newton iterates and generative statistics.

Each process holds only its contiguous shard of the rows; every pass's sums are
all-reduced, so the processes take the same steps as one process on all the data.
"""

import pytest
import torch

from torchglm import LogisticRegression, SoftmaxRegression
from torchglm.distributed import shard_range
from torchglm.models.discriminant import GaussianDiscriminantAnalysis
from torchglm.models.naive_bayes import GaussianNB, MultinomialNB
from torchglm.solvers import fit

from dist_util import run_distributed

pytestmark = pytest.mark.slow


def _data(k=2, n=601, d=5, seed=0, counts=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.randn(d, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(x @ w, dim=1), 1, generator=g).squeeze(1)
    if counts:
        x = torch.poisson(torch.exp(x.clamp(max=2)), generator=g)
    return x, y


def _glm(k, solver):
    model = (
        LogisticRegression(5, l2=1e-3, dtype=torch.float64)
        if k == 2
        else SoftmaxRegression(5, k, l2=1e-3, dtype=torch.float64)
    )
    return model, solver


def _fit_glm(rank, world, k, solver):
    torch.set_default_dtype(torch.float64)
    x, y = _data(k)
    lo, hi = shard_range(len(y), rank, world)
    model, solver = _glm(k, solver)
    result = fit(model, x[lo:hi], y[lo:hi], solver=solver, batch_size=97)
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "losses": [h["loss"] for h in result.history],
        "n_iter": result.n_iter,
    }


@pytest.mark.parametrize("k,solver", [(2, "newton"), (2, "irls"), (3, "newton"), (2, "lbfgs")])
def test_two_process_glm_fit_equals_one_process(k, solver):
    single = _fit_glm(0, 1, k, solver)
    out = run_distributed(_fit_glm, 2, (k, solver))
    assert all(o["ok"] for o in out), [o.get("trace") for o in out]
    for o in out:
        r = o["result"]
        assert r["n_iter"] == single["n_iter"]
        for a, b in zip(r["params"], single["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
        torch.testing.assert_close(
            torch.tensor(r["losses"]), torch.tensor(single["losses"]), rtol=1e-12, atol=0
        )


_GENERATIVE = {
    "lda": (lambda: GaussianDiscriminantAnalysis(5, 3, covariance="shared"), False),
    "qda": (lambda: GaussianDiscriminantAnalysis(5, 3, covariance="per_class"), False),
    "gaussian_nb": (lambda: GaussianNB(5, 3), False),
    "multinomial_nb": (lambda: MultinomialNB(5, 3, alpha=1.0), True),
}


def _fit_generative(rank, world, name):
    torch.set_default_dtype(torch.float64)
    make, counts = _GENERATIVE[name]
    x, y = _data(3, counts=counts)
    lo, hi = shard_range(len(y), rank, world)
    model = make().to(torch.float64)
    model.fit(x[lo:hi], y[lo:hi])
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", sorted(_GENERATIVE))
def test_two_process_generative_fit_equals_one_process(name):
    single = _fit_generative(0, 1, name)
    out = run_distributed(_fit_generative, 2, (name,))
    assert all(o["ok"] for o in out), [o.get("trace") for o in out]
    for o in out:
        for key, value in single.items():
            torch.testing.assert_close(o["result"][key], value, rtol=0, atol=1e-10, msg=key)
