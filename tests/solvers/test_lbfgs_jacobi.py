"""L-BFGS started from the Jacobi scaling (``LBFGSFitter(jacobi=True)``, what ``auto``
runs on a sparse design): a change of variables, so the same optimum as the plain and
the exact Newton fits, in far fewer iterations where the columns' scales differ by
orders of magnitude, and iterates that follow a column's rescaling."""

import warnings

import pytest
import torch

from torchglm import LogisticRegression, SoftmaxRegression
from torchglm.passes import run_passes
from torchglm.data import TensorBatches
from torchglm.solvers import fit, flat_parameters, make_fitter


pytestmark = pytest.mark.usefixtures("quiet_sparse_beta")


def _hashed_counts(n=3000, d=200, k=2, seed=0):
    """Sparse counts whose columns' frequencies differ by orders of magnitude (Zipf-like,
    as hashed words'), so ``diag(H)`` spans several decades."""
    g = torch.Generator().manual_seed(seed)
    rate = 30.0 * torch.logspace(0, -3.5, d, dtype=torch.float64)  # mean count per row
    x = torch.poisson(
        rate.expand(n, d) * (torch.rand(n, d, generator=g, dtype=torch.float64) < 0.5), generator=g
    )
    w = torch.randn(d, k, generator=g, dtype=torch.float64) / rate.sqrt().unsqueeze(1) * 0.3
    y = torch.multinomial(torch.softmax(x @ w, 1), 1, generator=g).squeeze(1)
    return x, y


def _model(d, k, l2):
    if k == 2:
        return LogisticRegression(d, l2=l2, dtype=torch.float64)
    return SoftmaxRegression(d, k, l2=l2, dtype=torch.float64)


@pytest.mark.parametrize("k", [2, 3])
def test_the_jacobi_start_reaches_the_exact_newton_optimum_in_fewer_iterations(k):
    x, y = _hashed_counts(k=k)
    xs = x.to_sparse_csr()
    fits = {}
    for name, solver, options in [
        ("newton", "newton", {}),
        ("plain", "lbfgs", {"memory": 10}),
        ("jacobi", "lbfgs", {"memory": 10, "jacobi": True}),
    ]:
        m = _model(x.shape[1], k, 1e-3)
        r = fit(m, xs, y, solver=solver, max_iter=3000, **options)
        assert r.converged, (name, r.message)
        fits[name] = (m, r)
    ref, newton = fits["newton"]
    theta = flat_parameters(ref, torch.float64)
    for name in ("plain", "jacobi"):
        m, r = fits[name]
        # Each at the optimum to the certified tolerance: E - E* <= tol max(1, |E|) and
        # (theta - theta*)^T H (theta - theta*) ~ 2 (E - E*), with the exact Hessian.
        diff = flat_parameters(m, torch.float64) - theta
        assert abs(r.extra.loss - newton.extra.loss) <= 2e-12
        assert float(diff @ newton.extra.hessian @ diff) <= 1e-11
    plain, jacobi = fits["plain"][1], fits["jacobi"][1]
    # (measured: binary 50 against 1,212 iterations; three classes 218 against 2,242)
    assert 4 * jacobi.n_iter < plain.n_iter, (jacobi.n_iter, plain.n_iter)
    assert 4 * jacobi.extra.passes < plain.extra.passes


def test_a_column_times_1e6_changes_neither_whether_nor_where_auto_stops_on_a_sparse_design():
    """Unpenalized (the optimum then follows the rescaling exactly): the Jacobi start's
    ``D_jj`` scales with the column's square, so the iterates are the same up to
    rounding, and the fit stops after as many steps, at the rescaled optimum."""
    x, y = _hashed_counts(n=4000, d=150, seed=3)
    scaled = x.clone()
    scaled[:, 7] *= 1e6
    results = []
    for design in (x, scaled):
        m = _model(x.shape[1], 2, 0.0)
        r = fit(m, design.to_sparse_csr(), y, solver="auto")
        assert r.converged, r.message
        results.append((m, r))
    (m0, r0), (m1, r1) = results
    w0, w1 = m0.linear.weight.detach().clone(), m1.linear.weight.detach().clone()
    w1[0, 7] *= 1e6
    torch.testing.assert_close(w1, w0, rtol=1e-6, atol=1e-8)
    assert abs(r1.n_iter - r0.n_iter) <= 1, (r0.n_iter, r1.n_iter)
    assert abs(r1.extra.passes - r0.extra.passes) <= 2, (r0.extra.passes, r1.extra.passes)


def test_the_jacobi_scaling_is_summed_once_and_kept_in_the_fitters_state():
    """One pass sums ``diag(H)`` (the first that evaluates a point); a fitter rebuilt
    from the state follows with the same scaling."""
    x, y = _hashed_counts(n=500, d=150, seed=1)
    m = _model(x.shape[1], 2, 1e-3)
    fitter = make_fitter(m, "lbfgs", jacobi=True, max_iter=5)
    seen = []
    curvature = type(fitter).pass_curvature

    def recording(self):
        c = curvature(self)
        seen.append(c)
        return c

    type(fitter).pass_curvature = recording
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_passes(fitter, TensorBatches(x.to_sparse_csr(), y), 40)
    finally:
        type(fitter).pass_curvature = curvature
    assert seen.count("diag") == 1 and seen[:2] == [None, "diag"]  # the start pass reads only y
    state = fitter.state_dict()
    again = make_fitter(_model(x.shape[1], 2, 1e-3), "lbfgs", jacobi=True)
    again.load_state_dict(state)
    torch.testing.assert_close(again.metric, fitter.metric)
    assert again.pass_curvature() != "diag"


def test_jacobi_must_be_a_bool():
    from torchglm import InputError

    with pytest.raises(InputError, match="jacobi"):
        make_fitter(_model(3, 2, 0.0), "lbfgs", jacobi="yes")


def test_the_two_loop_recursion_updates_one_copy_in_place():
    """``LBFGSFitter.two_loop`` equals the textbook recursion (Nocedal & Wright,
    Algorithm 7.4) bit for bit, leaves its argument as it is, and makes two
    parameter-length vectors, its copy and one buffer for the updates' terms: every
    pair's update runs in place (two fresh vectors per update cost the 20-class TF-IDF
    fit, 1.9 million parameters, 4 of its 9.5 s)."""
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator().manual_seed(3)
    p = 257
    fitter = make_fitter(LogisticRegression(p - 1, dtype=torch.float64), "lbfgs")
    pairs = []
    for _ in range(4):
        s = torch.randn(p, generator=g, dtype=torch.float64)
        y = s + 0.1 * torch.randn(p, generator=g, dtype=torch.float64)
        pairs.append((s, y, 1.0 / (s @ y)))
    fitter.pairs = pairs
    h0 = torch.rand(p, generator=g, dtype=torch.float64) + 0.5
    q = torch.randn(p, generator=g, dtype=torch.float64)
    before = q.clone()
    expected, alphas = q.clone(), []
    for s, y, rho in reversed(pairs):
        alphas.append(rho * (s @ expected))
        expected = expected - alphas[-1] * y
    expected = expected * h0
    for (s, y, rho), a in zip(pairs, reversed(alphas)):
        expected = expected + (a - rho * (y @ expected)) * s
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        out = fitter.two_loop(q, h0)
    assert torch.equal(q, before)
    assert torch.equal(out, expected)
    # The operations that produce a parameter-length vector: the copy and the buffer.
    in_place = {
        "aten::sub_",
        "aten::add_",
        "aten::mul_",
        "aten::mul",
        "aten::dot",
        "aten::matmul",
        "aten::copy_",
    }
    top = [e for e in prof.events() if e.cpu_parent is None]
    made = [e.name for e in top if [p] in e.input_shapes and e.name not in in_place]
    assert made == ["aten::clone", "aten::empty_like"]
    # every multiplication writes into that buffer (its ``out``): three inputs
    assert all(len(e.input_shapes) == 3 for e in top if e.name == "aten::mul" and [p] in e.input_shapes)
