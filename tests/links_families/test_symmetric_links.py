"""Symmetric links (``F(-t) = 1 - F(t)``) and the closed-form derivatives of ``log F``
that give a 0/1 target's NLL from one tail: ``l = -log F(q eta)``, ``q = 2y - 1``."""

import mpmath as mp
import pytest
import torch

from torchglm.families import get_family
from torchglm.links import LINKS

SYMMETRIC = [name for name, cls in LINKS.items() if cls.symmetric]
#: Links whose ``log F`` has closed-form derivatives (:meth:`Link.log_inverse_derivatives`).
CLOSED = [name for name in SYMMETRIC if LINKS[name]().log_inverse_derivatives(torch.zeros(1), 1) is not None]


def test_the_binary_links_declare_their_symmetry():
    assert {"logit", "probit", "cauchit"} <= set(SYMMETRIC)
    assert "cloglog" not in SYMMETRIC
    assert CLOSED == ["probit"]


@pytest.mark.parametrize("name", SYMMETRIC)
def test_a_symmetric_link_has_f_of_minus_t_one_minus_f_of_t(name):
    link = LINKS[name]()
    t = torch.linspace(-8.0, 8.0, 161, dtype=torch.float64)
    torch.testing.assert_close(link.inverse(-t), 1.0 - link.inverse(t), rtol=0, atol=4e-16)


def _grid(dtype):
    """A dense grid over both tails, the series' threshold (6 in float32, 12 in
    float64) on both sides of it, and the far tails."""
    t = torch.cat(
        [
            -torch.logspace(-3, 2.2, 400, dtype=torch.float64),
            torch.logspace(-3, 1.6, 200, dtype=torch.float64),
            torch.tensor(
                [0.0, -5.999, -6.001, -11.999, -12.001, -19.9999, -20.0001, -1e4, 1e4], dtype=torch.float64
            ),
        ]
    )
    return t.to(dtype)


def _mp_log_ndtr(t):
    """``log Phi(t)``, ``r = phi / Phi`` and ``(log Phi)'' = -r (t + r)`` to 60 digits."""
    with mp.workdps(60):
        t = mp.mpf(t)
        cdf = mp.ncdf(t)
        log_cdf = mp.log1p(-mp.ncdf(-t)) if t > 0 else mp.log(cdf)
        r = mp.npdf(t) / cdf
        return [float(log_cdf), float(r), float(-r * (t + r))]


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1.5e-13), (torch.float32, 4e-5)])
def test_probit_log_cdf_derivatives_match_mpmath_on_a_dense_grid(dtype, rtol):
    """Every value representable in ``dtype`` (above its smallest normal) within ``rtol``
    of the 60-digit one: the ``erfc`` form with its asymptotic series below the
    threshold (the ``erfcx`` form before it was 410 ulps off in float32 at -18.3)."""
    t = _grid(dtype)
    got = LINKS["probit"]().log_inverse_derivatives(t, 2)
    ref = torch.tensor([_mp_log_ndtr(float(v)) for v in t], dtype=torch.float64)
    fi = torch.finfo(dtype)
    for k in range(3):
        r, g = ref[:, k], got[k].double()
        keep = (r.abs() > fi.tiny) & (r.abs() < fi.max)
        assert bool(torch.isfinite(g[keep]).all()), k
        err = ((g - r).abs() / r.abs())[keep]
        assert float(err.max()) <= rtol, (k, float(t[keep][err.argmax()]), float(err.max()))
    first = LINKS["probit"]().log_inverse_derivatives(t, 1)
    assert all(torch.equal(a, b) for a, b in zip(first, got[:2]))


@pytest.mark.parametrize("name", CLOSED)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("order", [1, 2])
def test_bernoulli_one_tail_is_the_two_tail_form_bit_for_bit(name, dtype, order):
    """Bernoulli (targets 0/1) takes ``-log F(q eta)``; the binomial's form
    ``-(y log F(eta) + (1 - y) log F(-eta))`` at the same 0/1 targets gives the same
    numbers exactly (``eta = 0`` included: the sign of ``q eta`` there is ``-0.0``)."""
    eta = torch.cat([_grid(dtype), torch.tensor([-0.0], dtype=dtype)])
    for y in (torch.zeros_like(eta), torch.ones_like(eta)):
        one = get_family("bernoulli", name).nll_derivatives(eta, y.long(), order)
        two = get_family("binomial", name).nll_derivatives(eta, y, order)
        for a, b in zip(one, two):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
