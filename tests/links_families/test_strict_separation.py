"""``Family.strictly_separated``: the samples whose loss falls strictly along a
direction of the coefficients. Where it says so, the NLL of those samples falls along
every ray ``eta0 + t eta_dir`` (from any start), so a direction that separates every
sample proves that no optimum exists; a pass counts it, and no solver may then claim
``converged=True`` (tests/solvers/test_nonexistent_optimum.py)."""

import pytest
import torch

from torchglm.data.batches import Batch
from torchglm.families import FAMILIES, get_family
from torchglm.models import GeneralizedLinearModel, SoftmaxRegression
from torchglm.solvers.pass_sums import PassSums
from torchglm.solvers.layout import flat_parameters

PAIRS = [(f, link) for f, cls in sorted(FAMILIES.items()) for link in cls.allowed_links]


def _targets(family, n, g):
    if family.multi_output:
        return torch.randint(0, 3, (n,), generator=g)
    if family.name in ("bernoulli", "binomial"):
        y = torch.randint(0, 2, (n,), generator=g).double()
        if family.name == "binomial":
            y[::5] = 0.5  # a proportion inside (0, 1): never separated
        return y
    return torch.rand(n, generator=g, dtype=torch.float64) * 3


@pytest.mark.parametrize("family_name,link", PAIRS)
def test_marked_samples_lose_loss_along_every_ray(family_name, link):
    family = get_family(family_name, link)
    g = torch.Generator().manual_seed(0)
    n = 400
    y = _targets(family, n, g)
    shape = (n, 3) if family.multi_output else (n,)
    eta_dir = torch.randn(shape, generator=g, dtype=torch.float64)
    sep = family.strictly_separated(eta_dir, y)
    # binary targets under a link onto (0, 1), and classes: the others prove nothing
    proves = family.multi_output or (family_name in ("bernoulli", "binomial") and link != "log")
    assert (sep is not None) == proves
    if sep is None:
        return
    assert sep.shape == (n,) and sep.any() and not sep.all()
    lo, hi = family.link.eta_interval or (-1.0, 1.0)
    eta0 = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)
    nll = torch.stack([family.nll(eta0 + t * eta_dir, y) for t in (0.0, 0.5, 1.0, 2.0)])
    falls = (nll[1:] < nll[:-1]).all(0)
    assert bool(falls[sep].all())
    # a sample it does not mark: its loss rises somewhere along the ray, or is flat
    assert not bool(falls[~sep].all())


def test_a_pass_proves_complete_separation_only_where_every_sample_is_separated():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 2, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    model = SoftmaxRegression(2, 2, dtype=torch.float64)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[-5.0, 0.0], [5.0, 0.0]]))
    theta = flat_parameters(model)
    sums = PassSums(model, theta, curvature=None, saturation=1e-10)
    sums.add(Batch(x, y, None, None))
    assert sums.finish().completely_separated
    # one label flipped: no direction separates the data, and this one does not
    y2 = y.clone()
    y2[0] = 1 - y2[0]
    sums = PassSums(model, theta, curvature=None, saturation=1e-10)
    sums.add(Batch(x, y2, None, None))
    assert not sums.finish().completely_separated
    # a family that proves nothing (Poisson) never claims it
    pm = GeneralizedLinearModel(2, "poisson", dtype=torch.float64)
    sums = PassSums(pm, flat_parameters(pm), curvature=None, saturation=1e-10)
    sums.add(Batch(x, torch.zeros(200, dtype=torch.float64), None, None))
    assert not sums.finish().completely_separated
