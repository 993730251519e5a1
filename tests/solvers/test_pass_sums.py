"""A pass's sums (:class:`torchglm.solvers.pass_sums.PassSums`): the per-sample target
terms a fit keeps between passes (a Poisson's ``lgamma(y + 1)``)."""

import pytest
import torch

from torchglm import NumericalWarning, families
from torchglm.data import TensorBatches
from torchglm.models import GeneralizedLinearModel
from torchglm.solvers import fit
from torchglm.solvers.pass_sums import PassSums
from torchglm.solvers.sparse_rows import SparseRows

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _poisson(n=600, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.poisson(torch.exp(0.3 * x[:, 0] + 0.5), generator=g)
    model = GeneralizedLinearModel(d, "poisson", "log", l2=1e-3, dtype=torch.float64)
    theta = torch.tensor([0.2, -0.1, 0.05, 0.4], dtype=torch.float64)
    return x, y, model, theta


def _pass(model, theta, batches, cache, curvature="full"):
    s = PassSums(model, theta, curvature, target_cache=cache)
    for b in batches:
        s.add(b)
    return s.finish()


@pytest.fixture
def y_terms(monkeypatch):
    """The rows of every evaluation of ``Poisson.nll_y_term``."""
    rows = []
    real = families.Poisson.nll_y_term

    def spy(self, y):
        rows.append(y.shape[0])
        return real(self, y)

    monkeypatch.setattr(families.Poisson, "nll_y_term", spy)
    return rows


def test_kept_target_terms_give_the_same_sums_and_are_evaluated_once(y_terms):
    """Three passes over three batches with the kept ``lgamma(y + 1)``: each batch's term
    is evaluated on its first pass only, and every pass's sums equal, bit for bit,
    those of a pass that evaluates it afresh."""
    x, y, model, theta = _poisson()
    batches = TensorBatches(x, y, batch_size=200)
    cache = {}
    fresh = _pass(model, theta, batches, None)
    assert y_terms == [200, 200, 200]
    for curvature in ("full", None, "hvp"):
        kept = _pass(model, theta, batches, cache, curvature)
        assert torch.equal(kept.loss, fresh.loss) and torch.equal(kept.grad, fresh.grad)
        # the loss as the stepper reads it: the tensor's value, read once at finish
        assert kept.loss_value == float(fresh.loss)
    model.set_flat_parameters(theta)
    with torch.no_grad():
        torch.testing.assert_close(kept.loss, model.objective(x, y), rtol=1e-14, atol=0)
    assert y_terms == [200] * 6 and len(cache) == 3


def test_a_kept_term_is_evaluated_again_when_the_targets_change():
    """Targets written in place (their version counter moves) or new targets in the same
    shape get their own term: the sums are those of the targets as they are now."""
    x, y, model, theta = _poisson()
    cache = {}
    first = _pass(model, theta, TensorBatches(x, y), cache)
    y[:10] += 3.0  # in place: the same storage
    again = _pass(model, theta, TensorBatches(x, y), cache)
    expected = _pass(model, theta, TensorBatches(x, y), None)
    assert torch.equal(again.loss, expected.loss) and not torch.equal(again.loss, first.loss)
    other = y.flip(0).contiguous()
    moved = _pass(model, theta, TensorBatches(x, other), cache)
    assert torch.equal(moved.loss, _pass(model, theta, TensorBatches(x, other), None).loss)
    # the fitter drops the entries its last pass did not see
    SparseRows.evict_unseen(cache)
    SparseRows.evict_unseen(cache)
    assert len(cache) == 0


def test_a_newton_fit_evaluates_the_target_terms_once_per_stage(y_terms):
    """A Poisson fit by Newton evaluates ``lgamma(y + 1)`` once per row of each stage,
    not once per pass, and reaches the optimum a fresh evaluation gives."""
    x, y, model, _ = _poisson(n=3000)
    result = fit(model, x, y, solver="newton", tol=1e-10)
    assert result.converged and result.extra.passes >= 4
    assert sum(y_terms) == 3000
    with torch.no_grad():
        loss = model.objective(x, y)
    torch.testing.assert_close(torch.tensor(result.extra.loss, dtype=torch.float64), loss, rtol=1e-14, atol=0)


@pytest.mark.parametrize("link", ["logit", "probit", "cloglog"])
def test_kept_bernoulli_target_terms_give_the_same_sums_bit_for_bit(link, monkeypatch):
    """Integer 0/1 targets: the float targets and ``1 - y`` (logit) or ``2y - 1`` (probit)
    are made on a batch's first pass only, and every pass's loss, gradient and Hessian
    equal, bit for bit, those of a pass that makes them afresh (cloglog keeps none)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(500, 4, generator=g, dtype=torch.float64)
    y = (torch.rand(500, generator=g) < 0.4).long()
    model = GeneralizedLinearModel(4, "bernoulli", link, l2=1e-2, dtype=torch.float64)
    theta = torch.tensor([0.3, -0.2, 0.1, 0.05, -0.4], dtype=torch.float64)
    made = []
    real = families.Bernoulli.nll_y_term
    monkeypatch.setattr(families.Bernoulli, "nll_y_term", lambda self, t: made.append(1) or real(self, t))
    batches = TensorBatches(x, y, batch_size=200)
    fresh = _pass(model, theta, batches, None)
    cache = {}
    for curvature in ("full", None, "full"):
        kept = _pass(model, theta, batches, cache, curvature)
        assert torch.equal(kept.loss, fresh.loss) and torch.equal(kept.grad, fresh.grad)
    assert torch.equal(kept.hess, fresh.hess)
    assert len(made) == 6 and len(cache) == 3  # 3 afresh, then once per batch
    if link != "cloglog":
        assert all(isinstance(e["value"], tuple) for e in cache.values())


def test_a_small_batch_keeps_its_augmented_design_for_the_same_hessian():
    """A one-output Hessian pass's first batch of one chunk keeps ``[x, 1]`` in the
    design cache between passes: the Hessian equals, bit for bit, a pass that
    concatenates it afresh; only the first batch's is kept; a design written in place
    gets a new one."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(600, 5, generator=g, dtype=torch.float64)
    y = (torch.rand(600, generator=g) < 0.5).double()
    model = GeneralizedLinearModel(5, "bernoulli", "logit", l2=1e-3, dtype=torch.float64)
    theta = torch.tensor([0.2, -0.1, 0.3, 0.0, 0.1, -0.2], dtype=torch.float64)

    def one_pass(cache, batch_size=None):
        s = PassSums(model, theta, "full", sparse_cache=cache)
        for b in TensorBatches(x, y, batch_size=batch_size):
            s.add(b)
        return s.finish()

    fresh = one_pass(None)
    cache = {}
    for _ in range(2):
        assert torch.equal(one_pass(cache).hess, fresh.hess)
    (entry,) = cache.values()
    assert torch.equal(entry["value"], torch.cat([x, torch.ones(600, 1, dtype=torch.float64)], 1))
    cache = {}
    assert torch.equal(one_pass(cache, 200).hess, one_pass(None, 200).hess) and len(cache) == 1
    x[:5, 0] += 1.0  # in place: the kept design is stale
    assert torch.equal(one_pass(cache).hess, one_pass(None).hess)


def test_a_small_batch_keeps_its_transpose_and_squares_between_newton_cg_passes():
    """A ``"hvp"`` pass over a small dense batch keeps ``x^T`` (its Hessian-vector
    products) and ``x * x`` (Jacobi's diagonal) in the design cache: the next pass over
    the same batch reuses both, also after a pass that took no product (a rejected
    trial); the products and the diagonal equal a pass that makes them afresh; a design
    written in place gets new ones."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(300, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (300,), generator=g)
    model = GeneralizedLinearModel(6, "categorical", "softmax", n_classes=4, l2=1e-2, dtype=torch.float64)
    theta = 0.1 * torch.randn(4 * 7, generator=g, dtype=torch.float64)
    v = torch.randn(4 * 7, generator=g, dtype=torch.float64)

    def one_pass(cache):
        if cache is not None:
            SparseRows.evict_unseen(cache)  # as every fitter's pass begins
        s = PassSums(model, theta, "hvp", sparse_cache=cache)
        for b in TensorBatches(x, y):
            s.add(b)
        return s.finish()

    fresh = one_pass(None)
    cache = {}
    first = one_pass(cache)
    one_pass(cache)  # no product taken
    again = one_pass(cache)
    assert again._xt[0] is first._xt[0]
    assert torch.equal(first._xt[0], x.T)
    squares = [e["value"] for k, e in cache.items() if k[0] == "squared"]
    assert len(squares) == 1 and torch.equal(squares[0], x * x)
    assert torch.equal(again.hvp(v), fresh.hvp(v))
    assert torch.allclose(again.diag, fresh.diag, rtol=1e-14, atol=0)
    x[:3, 0] += 1.0  # in place: the kept copies are stale
    written = one_pass(cache)
    assert written._xt[0] is not first._xt[0] and torch.equal(written._xt[0], x.T)
    assert torch.equal(written.hvp(v), one_pass(None).hvp(v))


def test_the_kept_squares_of_many_batches_stay_within_the_budget(monkeypatch):
    """``x * x`` is kept for the batches of a pass up to ``HVP_TRANSPOSED_MAX`` entries in
    all (the first ones), so a large design in many small batches is not copied whole;
    the diagonal equals a pass that keeps none."""
    from torchglm.solvers import pass_sums

    monkeypatch.setattr(pass_sums, "HVP_TRANSPOSED_MAX", 1000)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(300, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (300,), generator=g)
    model = GeneralizedLinearModel(6, "categorical", "softmax", n_classes=3, l2=1e-2, dtype=torch.float64)
    theta = 0.1 * torch.randn(3 * 7, generator=g, dtype=torch.float64)

    def one_pass(cache):
        s = PassSums(model, theta, "hvp", sparse_cache=cache)
        for b in TensorBatches(x, y, batch_size=100):  # 600 entries a batch
            s.add(b)
        return s.finish()

    cache = {}
    kept = one_pass(cache)
    squares = [e["value"] for k, e in cache.items() if k[0] == "squared"]
    assert len(squares) == 1 and torch.equal(squares[0], x[:100] * x[:100])
    assert torch.allclose(kept.diag, one_pass(None).diag, rtol=1e-14, atol=0)


def _separating_pass(y: torch.Tensor, batches: int, w: float = 50.0) -> PassSums:
    """A logistic pass at ``w e_0`` over ``x_0`` in [-1, 1], rows in order of ``|x_0|``
    (the first batches the least certain): at ``w = 50`` the samples with
    ``|x_0| > 0.5`` are saturated (loss below 1e-10), the others not."""
    from torchglm.data.batches import Batch
    from torchglm.solvers.layout import flat_parameters

    x = torch.stack([_X0, torch.zeros(40, dtype=torch.float64)], 1)
    model = GeneralizedLinearModel(2, "bernoulli", dtype=torch.float64)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[w, 0.0]]))
    sums = PassSums(model, flat_parameters(model), curvature="full", saturation=1e-10)
    for rows in torch.arange(40).chunk(batches):
        sums.add(Batch(x[rows], y[rows], None, None))
    return sums.finish()


_X0 = torch.linspace(-1, 1, 40, dtype=torch.float64)
_X0 = _X0[_X0.abs().argsort(stable=True)]


@pytest.mark.parametrize("batches", [1, 2, 4])
def test_complete_separation_is_proven_whichever_batch_holds_the_saturated_samples(batches):
    # With 2 or 4 batches the first has no saturated sample: its unseparated samples
    # must still be counted once a later batch saturates.
    y = (_X0 > 0).double()
    s = _separating_pass(y, batches)
    assert s.n_saturated > 0 and s.completely_separated
    # an unsaturated sample on the wrong side (the first row, |x_0| smallest): not separated
    y2 = y.clone()
    y2[0] = 1.0 - y2[0]
    s = _separating_pass(y2, batches)
    assert s.n_saturated > 0 and not s.completely_separated
    # no saturated sample (w = 1): separating, but not asked, so not claimed
    s = _separating_pass(y, batches, w=1.0)
    assert s.n_saturated == 0 and not s.completely_separated


def test_a_hessian_vector_pass_without_its_diagonal_gives_the_same_sums_and_products():
    """``diagonal=False``: a ``"hvp"`` pass sums no ``diag(H)`` (a Newton-CG solve with a
    preconditioner of its own), and its loss, gradient, bias column and products are
    those of the pass with it."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(700, 6, generator=g, dtype=torch.float64)
    y = (torch.rand(700, generator=g, dtype=torch.float64) < 0.4).to(torch.float64)
    model = GeneralizedLinearModel(6, "bernoulli", "logit", l2=1e-2, dtype=torch.float64)
    theta = torch.randn(7, generator=g, dtype=torch.float64) * 0.3
    sums = []
    for diagonal in (True, False):
        s = PassSums(model, theta, "hvp", diagonal=diagonal)
        for batch in TensorBatches(x, y, batch_size=300):
            s.add(batch)
        sums.append(s.finish())
    with_diag, without = sums
    assert with_diag.diag is not None and without.diag is None
    torch.testing.assert_close(without.loss, with_diag.loss, rtol=0, atol=0)
    torch.testing.assert_close(without.grad, with_diag.grad, rtol=0, atol=0)
    torch.testing.assert_close(without.bias_column, with_diag.bias_column, rtol=0, atol=0)
    v = torch.randn(7, generator=g, dtype=torch.float64)
    torch.testing.assert_close(without.hvp(v), with_diag.hvp(v), rtol=0, atol=0)


@pytest.mark.parametrize(
    "family, link", [("bernoulli", "probit"), ("bernoulli", "logit"), ("poisson", "log")]
)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_a_hessian_pass_over_several_chunks_matches_autograd(
    family, link, weighted, fit_intercept, monkeypatch
):
    """A batch of several row chunks sums its Hessian and gradient in the same products
    (``x^T [h x, r, h]``); loss, gradient and Hessian are autograd's."""
    from torch.func import grad, hessian

    from torchglm.solvers import pass_sums

    fused = []
    real = pass_sums.add_hessian_and_gradient
    monkeypatch.setattr(pass_sums, "add_hessian_and_gradient", lambda *a: fused.append(real(*a)) or fused[-1])

    from autograd_ref import flat_objective
    from torchglm.solvers import products
    from torchglm.solvers.layout import flat_parameters, set_flat_parameters
    from torchglm.solvers.pass_sums import hessian_and_gradient

    n, d = 2500, 40
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    assert products.chunk_rows(x, d + fit_intercept) < n  # two chunks, the second partial
    m = GeneralizedLinearModel(d, family, link, l2=0.1, fit_intercept=fit_intercept, dtype=torch.float64)
    set_flat_parameters(
        m, 0.3 * torch.randn(flat_parameters(m).numel(), generator=g, dtype=torch.float64) / d**0.5
    )
    with torch.no_grad():
        mu = m.family.mean(m(x))
    y = torch.bernoulli(mu, generator=g) if family == "bernoulli" else torch.poisson(mu, generator=g)
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.5 if weighted else None
    loss, gr, H = hessian_and_gradient(m, TensorBatches(x, y, w))
    assert fused == [True]
    obj, theta = flat_objective(m, x, y, w), flat_parameters(m)
    torch.testing.assert_close(loss, obj(theta), rtol=1e-13, atol=0)
    torch.testing.assert_close(gr, grad(obj)(theta), rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(H, hessian(obj)(theta), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_a_hessian_pass_over_one_chunk_sums_no_fused_products_and_matches_autograd(
    fit_intercept, monkeypatch
):
    """A batch of one row chunk with the fused pass's features (breast_cancer's 455 x 30):
    its Hessian is one product over ``[x, 1]``, and the fused buffer (two dozen
    operations a pass to spread its zeros) is never made."""
    from torch.func import grad, hessian

    from torchglm.solvers import pass_sums, products
    from autograd_ref import flat_objective
    from torchglm.solvers.layout import flat_parameters, set_flat_parameters

    calls = []
    monkeypatch.setattr(pass_sums, "add_hessian_and_gradient", lambda *a: calls.append(a) or False)
    n, d = 455, 30
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    assert d >= pass_sums.FUSED_MIN_FEATURES and products.chunk_rows(x, d + fit_intercept) >= n
    m = GeneralizedLinearModel(
        d, "bernoulli", "logit", l2=0.1, fit_intercept=fit_intercept, dtype=torch.float64
    )
    theta = 0.3 * torch.randn(flat_parameters(m).numel(), generator=g, dtype=torch.float64) / d**0.5
    set_flat_parameters(m, theta)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < 0.4).double()
    s = PassSums(m, theta, "full")
    s.add(next(iter(TensorBatches(x, y))))
    assert s._fused is None and calls == []
    s.finish()
    obj = flat_objective(m, x, y, None)
    torch.testing.assert_close(s.grad, grad(obj)(theta), rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(s.hess, hessian(obj)(theta), rtol=1e-10, atol=1e-14)


def _binary(n=700, d=4, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = (x[:, 0] + torch.randn(n, generator=g, dtype=torch.float64) > 0).double()
    w = torch.rand(n, generator=g, dtype=torch.float64) * 2
    model = GeneralizedLinearModel(d, "bernoulli", "logit", l2=1e-3, dtype=torch.float64)
    theta = torch.tensor([0.4, -0.3, 0.2, 0.1, -0.2], dtype=torch.float64)
    return x, y, w, model, theta


@pytest.fixture
def scores(monkeypatch):
    """The rows of every evaluation of ``sum d1^2 / h`` (``_score_over_curvature``)."""
    from torchglm.solvers import pass_sums

    rows = []
    real = pass_sums._score_over_curvature

    def spy(d1, h):
        rows.append(d1.shape[0])
        return real(d1, h)

    monkeypatch.setattr(pass_sums, "_score_over_curvature", spy)
    return rows


@pytest.mark.parametrize("kept_max", [2**16, 250, 1])
@pytest.mark.parametrize("batch_size", [None, 200])
def test_the_gradient_rounding_is_the_sum_over_every_row_whenever_it_is_read(
    monkeypatch, scores, kept_max, batch_size
):
    """``gradient_rounding`` is ``n eps sqrt(sum_i (d1_i^2 / h_i) / S)`` over every row
    and batch (against the closed form of the weighted logistic NLL), whether the
    batches' sums wait for the read (``SCORE_KEPT_MAX_ROWS`` rows kept), are summed
    as the pass goes (past it), or both."""
    from torchglm.solvers import pass_sums

    monkeypatch.setattr(pass_sums, "SCORE_KEPT_MAX_ROWS", kept_max)
    x, y, w, model, theta = _binary()
    s = PassSums(model, theta, "full")
    for b in TensorBatches(x, y, w, batch_size=batch_size):
        s.add(b)
    s.finish()
    mu = torch.sigmoid(x @ theta[:4] + theta[4])
    q = (w * (mu - y) ** 2 / (mu * (1 - mu))).sum() / w.sum()
    expected = x.shape[0] * torch.finfo(torch.float64).eps * float(q.sqrt())
    assert s.gradient_rounding == pytest.approx(expected, rel=1e-12)
    assert sum(scores) == x.shape[0]  # every row once
    assert (
        s.gradient_rounding == pytest.approx(expected, rel=1e-12) and sum(scores) == x.shape[0]
    )  # read once


def test_a_hessian_pass_sums_no_gradient_rounding_that_is_not_read(scores):
    """A Newton fit whose steps drop no direction never evaluates ``d1^2 / h`` (a
    small fit's passes each spent five tensor operations on it); one whose Hessian is
    singular (a duplicated column, unpenalized) reads it at every step."""
    x, y, _, model, _ = _binary()
    assert fit(model, x, y, solver="newton").converged
    assert scores == []
    dup = torch.cat([x, x[:, :1]], 1)
    model = GeneralizedLinearModel(5, "bernoulli", "logit", l2=0.0, dtype=torch.float64)
    with pytest.warns(NumericalWarning, match="singular"):
        result = fit(model, dup, y, solver="newton")
    assert result.converged and len(scores) >= result.n_iter > 0


def test_a_non_finite_sum_after_the_loss_makes_the_point_invalid():
    """A finite loss whose gradient or Hessian overflowed (an entry +inf, -inf or NaN)
    counts as one invalid sample; finite sums of any size do not."""
    x, y, _, model, theta = _binary(n=50)
    for bad in (float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 0.0):
        s = PassSums(model, theta, "full")
        s.add(next(iter(TensorBatches(x, y))))
        s.hess[1, 2] = bad
        s.finish()
        finite = bad == bad and abs(bad) != float("inf")
        assert s.n_invalid == (0 if finite else 1)


def _separation_on_two_ranks(rank, world):
    """Rank 0 holds the saturated, correctly separated rows; rank 1 the unsaturated
    ones, one on the wrong side: the summed pass has saturated samples and one
    unseparated sample, so no rank may claim complete separation."""
    from torchglm.data.batches import Batch
    from torchglm.solvers.layout import flat_parameters

    y = (_X0 > 0).to(torch.float64)
    y[0] = 1.0 - y[0]
    x = torch.stack([_X0, torch.zeros(40, dtype=torch.float64)], 1)
    rows = slice(16, 40) if rank == 0 else slice(0, 16)  # no saturated row on rank 1
    model = GeneralizedLinearModel(2, "bernoulli", dtype=torch.float64)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[50.0, 0.0]]))
    sums = PassSums(model, flat_parameters(model), curvature="full", saturation=1e-10)
    sums.add(Batch(x[rows], y[rows], None, None))
    s = sums.finish()
    return s.n_saturated, s.completely_separated


@pytest.mark.slow
def test_a_rank_without_saturated_samples_still_counts_its_unseparated_ones():
    """The first batch's unseparated count, deferred on a CPU until a saturated sample
    appears, is counted at ``finish`` under ``torch.distributed`` whatever this rank saw:
    another rank's saturated samples make it count (it was left out, and both ranks
    claimed a separation the wrong-side sample refutes)."""
    from dist_util import run_distributed

    out = run_distributed(_separation_on_two_ranks, 2)
    assert all(o["ok"] for o in out), out
    for o in out:
        n_saturated, separated = o["result"]
        assert n_saturated == 22 and not separated  # all on rank 0


@pytest.mark.parametrize(
    "family, link",
    [("bernoulli", "logit"), ("bernoulli", "probit"), ("poisson", "log"), ("gamma", "inverse")],
)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("whole", [True, False])
def test_a_large_first_order_pass_sums_what_small_batches_sum(family, link, weighted, whole, monkeypatch):
    """A dense batch large enough for slabs (:func:`~torchglm.solvers.products.fused_rows`)
    takes the one-output slab path (:meth:`PassSums._add_slabs`), its slabs' sums kept
    whole or (``whole=False``: a batch past ``WHOLE_SUMS_MAX_ROWS``) summed and counted
    per slab: its loss, gradient and counts (invalid, saturated, separated, rows, offsets,
    targets) equal those of the same rows in batches small enough for one piece each,
    with offsets, weights (some zero), saturated samples and, under the gamma's inverse
    link, eta outside its domain."""
    from torchglm.solvers import pass_sums, products

    if not whole:
        monkeypatch.setattr(pass_sums, "WHOLE_SUMS_MAX_ROWS", 0)

    n, d = 12_000, 100
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x[:40] *= 50.0  # saturated rows (a large |eta|)
    if family == "poisson":
        y = torch.poisson(torch.full((n,), 2.0), generator=g)
    elif family == "gamma":
        y = 1.0 + torch.rand(n, generator=g, dtype=torch.float64)
    else:
        y = (torch.rand(n, generator=g) < 0.5).double()
    offset = 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    weight = torch.rand(n, generator=g, dtype=torch.float64) if weighted else None
    if weighted:
        weight[::7] = 0.0
    model = GeneralizedLinearModel(d, family, link, l2=1e-3, dtype=torch.float64)
    theta = 0.05 * torch.randn(d + 1, generator=g, dtype=torch.float64)
    if family == "gamma":
        theta[-1] = 1.0  # mostly positive eta, some rows past 0 (outside the domain)
    assert products.fused_rows(x) is not None and products.fused_rows(x[:1000]) is None

    def summed(batch_size):
        s = PassSums(model, theta, None, saturation=1e-12, y_sum=True)
        for b in TensorBatches(x, y, weight, offset, batch_size=batch_size):
            s.add(b)
        return s.finish()

    large, small = summed(None), summed(1000)
    assert large.n_invalid == small.n_invalid and large.n_saturated == small.n_saturated
    assert large.n_saturated > 0 if family == "bernoulli" else large.n_invalid > 0 or family == "poisson"
    assert large.completely_separated == small.completely_separated
    assert (large.n_samples, large.n_offset) == (small.n_samples, small.n_offset) == (n, n)
    assert torch.allclose(large.y_sum, small.y_sum, rtol=1e-13)
    assert torch.allclose(large.weight_sum, small.weight_sum, rtol=1e-13)
    if large.no_likelihood:
        assert small.no_likelihood
        return
    assert torch.allclose(large.loss, small.loss, rtol=1e-12, atol=0)
    assert torch.allclose(large.grad, small.grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("link", ["logit", "probit"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_large_curvature_pass_sums_what_small_batches_sum(dtype, link, weighted, whole, monkeypatch):
    """A one-output ``"diag"`` or ``"hvp"`` pass over a dense batch in slabs
    (:meth:`PassSums._add_slabs`: slabs of 1,046 of its 9,000 rows,
    through scipy's gemv where it is OpenBLAS) sums the loss, gradient, Jacobi diagonal
    and the Hessian's bias column, and its kept curvature gives the Hessian-vector
    products, that batches of one piece each (torch's products, the generic path) give,
    with offsets and weights (some zero), its sums kept whole or per slab."""
    from torchglm.solvers import pass_sums, products

    if not whole:
        monkeypatch.setattr(pass_sums, "WHOLE_SUMS_MAX_ROWS", 0)
    n, d = 9_000, 500
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    y = (torch.rand(n, generator=g) < 0.4).to(dtype)
    offset = (0.1 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    weight = torch.rand(n, generator=g, dtype=torch.float64).to(dtype) if weighted else None
    if weighted:
        weight[::5] = 0.0
    model = GeneralizedLinearModel(d, "bernoulli", link, l2=1e-3, dtype=torch.float64)
    theta = (0.03 * torch.randn(d + 1, generator=g, dtype=torch.float64)).to(dtype)
    assert products.fused_rows(x) is not None and products.fused_rows(x[:500]) is None
    v = torch.randn(d + 1, generator=g, dtype=torch.float64).to(dtype)
    tol = dict(rtol=1e-10, atol=1e-13) if dtype == torch.float64 else dict(rtol=2e-4, atol=1e-6)
    for curvature, diagonal in (("diag", True), ("hvp", True), ("hvp", False)):

        def summed(batch_size, curvature=curvature, diagonal=diagonal):
            s = PassSums(model, theta, curvature, saturation=1e-12, diagonal=diagonal)
            for b in TensorBatches(x, y, weight, offset, batch_size=batch_size):
                s.add(b)
            return s.finish()

        large, small = summed(None), summed(500)
        assert (large.n_samples, large.n_offset, large.n_saturated) == (small.n_samples, small.n_offset, 0)
        torch.testing.assert_close(large.loss, small.loss, **tol)
        torch.testing.assert_close(large.grad, small.grad, **tol)
        if diagonal:
            torch.testing.assert_close(large.diag, small.diag, **tol)
        else:
            assert large.diag is None and small.diag is None
        if curvature == "hvp":
            torch.testing.assert_close(large.hvp(v), small.hvp(v), **tol)
            c = v[d:]
            torch.testing.assert_close(large.bias_product(c), small.bias_product(c), **tol)


@pytest.mark.parametrize("flip", [None, 0, 9_000])
def test_a_large_first_order_pass_proves_separation_as_small_batches_do(flip):
    """Separated classes at a point far along the separating direction: a slabbed
    first-order pass (:meth:`PassSums._add_slabs`) claims complete separation
    exactly where batches of one piece each do; one sample on the wrong side, in the
    first slab or a later one, refutes it."""
    n, d = 12_000, 100
    g = torch.Generator().manual_seed(4)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    theta = torch.zeros(d + 1, dtype=torch.float64)
    theta[0] = 1e3
    y = (x[:, 0] > 0).double()
    if flip is not None:
        y[flip] = 1.0 - y[flip]
    model = GeneralizedLinearModel(d, "bernoulli", "logit", l2=0.0, dtype=torch.float64)

    def summed(batch_size):
        s = PassSums(model, theta, None, saturation=1e-12)
        for b in TensorBatches(x, y, batch_size=batch_size):
            s.add(b)
        return s.finish()

    large, small = summed(None), summed(1000)
    assert large.completely_separated == small.completely_separated == (flip is None)
    assert large.n_saturated == small.n_saturated > 0
