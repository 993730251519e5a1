"""Numerics of the generative classifiers.

* Offsets: Gaussian statistics are centred sums (never ``E[x^2] - mu^2``), so adding a
  constant to every feature changes no probability beyond the rounding of ``x`` itself;
  reference: the same model and scikit-learn on the data without the offset.
* Batch splits and processes: the shifted sums give the same parameters for any split.
* Precision follows the data: float64 data fitted into a float32 model give a float64 model.
* Normalization: ``log_softmax`` of the (class-shared-term-free) joint, so rows of
  ``predict_proba`` sum to 1 at extreme inputs, and an overflow is an InputError, never NaN.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn import discriminant_analysis as skda
from sklearn import naive_bayes as sknb

from torchglm import InputError, NumericalWarning
from torchglm.data.batches import Batch
from torchglm.models import (
    BernoulliNB,
    GaussianDiscriminantAnalysis,
    GaussianNB,
    LinearDiscriminantAnalysis,
    MultinomialNB,
    PoissonNB,
    QuadraticDiscriminantAnalysis,
)
from torchglm.passes import run_passes

from data_util import bernoulli_classes, gaussian_classes, poisson_counts
from dist_util import run_distributed

GAUSSIAN = [GaussianNB, LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis]
SKLEARN = {
    GaussianNB: lambda: sknb.GaussianNB(),
    LinearDiscriminantAnalysis: lambda: skda.LinearDiscriminantAnalysis(solver="lsqr"),
    QuadraticDiscriminantAnalysis: lambda: skda.QuadraticDiscriminantAnalysis(),
}


DATA = {
    GaussianNB: gaussian_classes,
    LinearDiscriminantAnalysis: gaussian_classes,
    QuadraticDiscriminantAnalysis: gaussian_classes,
    MultinomialNB: poisson_counts,
    PoissonNB: poisson_counts,
    BernoulliNB: bernoulli_classes,
}
MODELS = sorted(DATA, key=lambda c: c.__name__)


def _fit(cls, x, y, **kw):
    model = cls(x.shape[1], int(y.max()) + 1, **kw)
    model.fit(x, y)
    return model


def _row_sum_error(p: torch.Tensor) -> float:
    return float((p.sum(1) - 1).abs().max())


# -- offsets -------------------------------------------------------------------------
@pytest.mark.parametrize("offset", [1e3, 1e4, 1e6])
@pytest.mark.parametrize("cls", GAUSSIAN)
def test_common_offset_leaves_probabilities_unchanged(cls, offset):
    x, y = gaussian_classes()
    plain = _fit(cls, x, y)
    # A float32 model (the library default) given float64 data: the offset data used
    # to lose every digit of the variance to E[x^2] - mu^2 in float32.
    shifted = _fit(cls, x + offset, y, dtype=torch.float32)
    assert shifted.dtype == torch.float64
    p_plain, p_shift = plain.predict_proba(x), shifted.predict_proba(x + offset)
    torch.testing.assert_close(p_shift, p_plain, rtol=0, atol=1e-8)
    torch.testing.assert_close(shifted.means - offset, plain.means, rtol=0, atol=1e-8)
    # Independent reference: scikit-learn on the data without the offset (its own fit on
    # the offset data loses digits in LDA's intercept), and its accuracy on the offset data.
    ref = SKLEARN[cls]().fit(x.numpy(), y.numpy())
    np.testing.assert_allclose(p_shift.numpy(), ref.predict_proba(x.numpy()), rtol=0, atol=1e-8)
    sk_offset = SKLEARN[cls]().fit((x + offset).numpy(), y.numpy())
    accuracy = float((shifted.predict(x + offset) == y).double().mean())
    assert accuracy >= sk_offset.score((x + offset).numpy(), y.numpy())
    assert accuracy == pytest.approx(ref.score(x.numpy(), y.numpy()), abs=0)


@pytest.mark.parametrize("cls", GAUSSIAN)
def test_float32_data_with_an_offset_fit_in_float32(cls):
    # float32 data stay float32 (no silent up- or down-cast), and the centred sums keep
    # the variance: the textbook E[x^2] - mu^2 is all rounding at an offset of 1e4.
    x, y = gaussian_classes()
    plain = _fit(cls, x, y)
    model = _fit(cls, (x + 1e4).float(), y, dtype=torch.float32)
    assert model.dtype == torch.float32
    # float32 spacing at 1e4 is 1e-3: the data themselves are rounded that much.
    torch.testing.assert_close(
        model.predict_proba((x + 1e4).float()).double(), plain.predict_proba(x), rtol=0, atol=5e-3
    )


# -- batch splits and processes ------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 7, 64])
@pytest.mark.parametrize("cls", GAUSSIAN)
def test_shifted_statistics_do_not_depend_on_the_batch_split(cls, batch_size):
    x, y = gaussian_classes(n=257)
    x = x + 1e6
    w = torch.rand(257, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    one, split = cls(4, 3), cls(4, 3)
    one.fit(x, y, weight=w)
    split.fit(x, y, weight=w, batch_size=batch_size)
    for (name, a), (_, b) in zip(one.state_dict().items(), split.state_dict().items()):
        # means ~1e6 hold ~1e-10 absolute precision; everything else is O(1).
        torch.testing.assert_close(a, b, rtol=1e-15, atol=1e-10, msg=name)


@pytest.mark.parametrize("batch_size", [1, 7, 64])
@pytest.mark.parametrize("options", [{"shrinkage": "auto"}, {"inverse": "pinv"}], ids=["ledoit_wolf", "pinv"])
@pytest.mark.parametrize("cls", [LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis])
def test_ledoit_wolf_and_pinv_do_not_depend_on_the_batch_split(cls, options, batch_size):
    """The Ledoit-Wolf intensity comes from shifted co-fourth moments: at an offset of
    1e6 (where E[x^4] - ... would keep no digit) any split gives the one-batch fit, and
    that fit is the one of the data without the offset."""
    x, y = gaussian_classes(n=257)
    w = torch.rand(257, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    plain, one, split = cls(4, 3, **options), cls(4, 3, **options), cls(4, 3, **options)
    plain.fit(x, y, weight=w)
    one.fit(x + 1e6, y, weight=w)
    split.fit(x + 1e6, y, weight=w, batch_size=batch_size)
    for (name, a), (_, b) in zip(one.state_dict().items(), split.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-15, atol=1e-10, msg=name)
    if "shrinkage" in options:
        assert (plain.shrinkage_intensity > 0).all()
    torch.testing.assert_close(one.shrinkage_intensity, plain.shrinkage_intensity, rtol=1e-9, atol=0)
    torch.testing.assert_close(one.covariance, plain.covariance, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(one.predict_proba(x + 1e6), plain.predict_proba(x), rtol=0, atol=1e-8)


def test_sorted_batches_with_a_class_missing_from_the_first_batch():
    # The shift of a class is taken from the first batch holding it: here class 2 only
    # appears in the last batch, and each batch's class mean is far from the overall one.
    x, y = gaussian_classes(n=240)
    order = torch.argsort(y * 1000 + x[:, 0])
    x, y = x[order] + 1e5, y[order]
    for cls in GAUSSIAN:
        one, split = cls(4, 3), cls(4, 3)
        one.fit(x, y)
        run_passes(split.make_fitter(), [Batch(x[i : i + 40], y[i : i + 40]) for i in range(0, 240, 40)], 1)
        for (name, a), (_, b) in zip(one.state_dict().items(), split.state_dict().items()):
            torch.testing.assert_close(a, b, rtol=1e-15, atol=1e-10, msg=name)


def _fit_shard(rank, world, name, empty_shard):
    torch.set_default_dtype(torch.float32)  # default models: the data set the precision
    cls, options = {
        "lda": (LinearDiscriminantAnalysis, {}),
        "qda": (QuadraticDiscriminantAnalysis, {}),
        "nb": (GaussianNB, {}),
        "lda_ledoit_wolf": (LinearDiscriminantAnalysis, {"shrinkage": "auto"}),
        "qda_pinv": (QuadraticDiscriminantAnalysis, {"inverse": "pinv"}),
    }[name]
    x, y = gaussian_classes(n=301)
    order = torch.argsort(y, stable=True)  # sorted labels: some classes absent from a shard
    x, y = x[order] + 1e6, y[order]
    model = cls(4, 3, **options)
    if world == 1:
        model.fit(x, y)
    else:
        bounds = [0, 180, 301] if not empty_shard else [0, 301, 301]  # rank 1: no rows at all
        lo, hi = bounds[rank], bounds[rank + 1]
        batches = [Batch(x[i : min(i + 50, hi)], y[i : min(i + 50, hi)]) for i in range(lo, hi, 50)]
        run_passes(model.make_fitter(), batches, max_passes=1)
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("empty_shard", [False, True])
@pytest.mark.parametrize("name", ["lda", "qda", "nb", "lda_ledoit_wolf", "qda_pinv"])
def test_two_process_shifted_statistics_equal_one_process(name, empty_shard):
    single = _fit_shard(0, 1, name, False)
    out = run_distributed(_fit_shard, 2, (name, empty_shard))
    assert all(o["ok"] for o in out), [o.get("trace") for o in out]
    for o in out:
        for key, value in single.items():
            got = o["result"][key]
            assert got.dtype == value.dtype, key  # the empty rank agreed on float64
            torch.testing.assert_close(got, value, rtol=1e-15, atol=1e-10, msg=key)


# -- precision follows the data ---------------------------------------------------------------
@pytest.mark.parametrize("cls", MODELS)
def test_float64_data_into_a_float32_model_keeps_float64(cls):
    x, y = DATA[cls]()
    low, high = _fit(cls, x, y, dtype=torch.float32), _fit(cls, x, y, dtype=torch.float64)
    assert low.dtype == torch.float64
    for (name, a), (_, b) in zip(low.state_dict().items(), high.state_dict().items()):
        assert a.dtype == b.dtype, name
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert low.predict_proba(x).dtype == torch.float64
    # The trainer's path (make_fitter + batches) promotes the same way.
    streamed = cls(x.shape[1], 3, dtype=torch.float32)
    run_passes(streamed.make_fitter(), [Batch(x[:100], y[:100]), Batch(x[100:], y[100:])], 1)
    assert streamed.dtype == torch.float64
    torch.testing.assert_close(streamed.predict_proba(x), high.predict_proba(x), rtol=0, atol=1e-13)


@pytest.mark.parametrize("cls", MODELS)
def test_float32_data_into_a_float64_model_is_upcast(cls):
    x, y = DATA[cls]()
    model = _fit(cls, x.float(), y, dtype=torch.float64)
    assert model.dtype == torch.float64
    reference = _fit(cls, x.float().double(), y)  # the same (rounded) values, in float64
    torch.testing.assert_close(model.predict_proba(x), reference.predict_proba(x), rtol=0, atol=0)


# -- prediction: validation, dtype, detached ------------------------------------------------
@pytest.mark.parametrize("cls", MODELS)
def test_predict_validates_casts_and_detaches(cls):
    # (NotFittedError before a fit: tests/models/test_generative.py::test_not_fitted_errors.)
    x, y = DATA[cls]()
    model = _fit(cls, x.float(), y, dtype=torch.float32)
    for call in (model.predict, model.predict_proba, model.predict_log_proba, model.log_prob):
        with pytest.raises(InputError, match="X: expected 6 feature columns|X: expected 4 feature columns"):
            call(x[:, :-1])
        bad = x.clone()
        bad[3, 1] = float("inf")
        with pytest.raises(InputError, match="finite"):
            call(bad)
        with pytest.raises(InputError, match="2-D"):
            call(x[0])
    out = model.predict_proba(x)  # float64 input, float32 model: computed in the model's dtype
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, model.predict_proba(x.float()), rtol=0, atol=0)
    if cls is not BernoulliNB:
        huge = x.clone()
        huge[0, 0] = 1e300  # finite in float64, not in float32
        with pytest.raises(InputError, match="range of torch.float32"):
            model.predict_proba(huge)
    xg = x.clone().requires_grad_(True)
    for call in (model.predict_proba, model.predict_log_proba, model.log_prob):
        assert not call(xg).requires_grad
    assert model(xg).requires_grad  # forward stays differentiable (the trainer's path)


# -- normalization at extreme inputs ----------------------------------------------------------------
def _extreme(cls, x):
    """Inputs at the edge of what each model's support allows, in float64."""
    if cls is BernoulliNB:
        return torch.stack([torch.zeros(x.shape[1]), torch.ones(x.shape[1]), x[0]]).to(x.dtype)
    scale = torch.tensor([[1e17], [-1e17], [3e16], [1e15], [1e12]], dtype=x.dtype)
    if cls in (MultinomialNB, PoissonNB):
        return (scale.abs() * (x[:5] + 1)).round()
    direction = torch.randn(5, x.shape[1], generator=torch.Generator().manual_seed(0), dtype=x.dtype)
    return scale * direction


@pytest.mark.parametrize("cls", MODELS)
def test_rows_sum_to_one_at_extreme_inputs(cls):
    x, y = DATA[cls]()
    model = _fit(cls, x, y)
    probe = _extreme(cls, x)
    p = model.predict_proba(probe)
    assert torch.isfinite(p).all()
    assert _row_sum_error(p) <= 1e-12
    log_p = model.predict_log_proba(probe)
    assert float(torch.logsumexp(log_p, dim=1).abs().max()) <= 1e-12
    assert torch.equal(model.predict(probe), p.argmax(1))


def test_lda_at_1e17_is_the_linear_model():
    # Shared Sigma: the posterior is softmax(W x + b) (lecture notes §3), which at |x| ~ 1e17
    # saturates; the |x|^2 term that used to swamp W x is dropped before normalizing.
    x, y = gaussian_classes()
    model = _fit(LinearDiscriminantAnalysis, x, y)
    probe = _extreme(LinearDiscriminantAnalysis, x)
    w, b = model._linear_parameters()
    expected = torch.softmax(probe @ w.T + b + model.log_prior, dim=1)
    torch.testing.assert_close(model.predict_proba(probe), expected, rtol=0, atol=1e-12)


def test_gaussian_nb_constant_features():
    x, y = gaussian_classes()
    x[:, 2] = 5.0
    model = _fit(GaussianNB, x, y)
    ref = sknb.GaussianNB().fit(x.numpy(), y.numpy())
    np.testing.assert_allclose(
        model.predict_proba(x).numpy(), ref.predict_proba(x.numpy()), rtol=0, atol=1e-10
    )
    # The constant feature has one mean and variance in every class: it drops out of
    # the posterior exactly, however far a probe is from it.
    probe = x[:20].clone()
    for value in (6.0, -1e3, 1e8):
        probe[:, 2] = value
        p = model.predict_proba(probe)
        assert _row_sum_error(p) <= 1e-12
        torch.testing.assert_close(p, model.predict_proba(x[:20]), rtol=0, atol=1e-14)
    # Every feature constant: the documented floor and warning; the posterior is the prior.
    const = torch.full((12, 3), 3.0)
    yc = torch.arange(12) % 2
    yc[0] = 1
    with pytest.warns(NumericalWarning, match="zero variance"):
        model = _fit(GaussianNB, const, yc)
    probe = torch.tensor([[3.0, 3.0, 3.0], [4.0, 2.0, 1e3], [1e5, -1e5, 7.0]])
    p = model.predict_proba(probe)
    assert _row_sum_error(p) <= 1e-12
    torch.testing.assert_close(p, model.log_prior.exp().expand(3, 2), rtol=0, atol=1e-15)


@pytest.mark.parametrize("cls", MODELS)
def test_1e160_is_right_or_a_clear_input_error(cls):
    x, y = DATA[cls]()
    model = _fit(cls, x, y)
    probe = torch.full((2, x.shape[1]), 1e160, dtype=torch.float64)
    probe[1] *= -1
    if cls in (MultinomialNB, PoissonNB):
        probe = probe.abs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either: right or raise
        try:
            p = model.predict_proba(probe)
        except InputError as err:
            assert cls in (GaussianNB, QuadraticDiscriminantAnalysis, BernoulliNB), cls
            pattern = "binary" if cls is BernoulliNB else "overflows, first row 0 .max .x. = 1e.160"
            assert pytest.raises(InputError, model.predict_proba, probe).match(pattern)
            assert "X: expected" in str(err)
            return
    assert torch.isfinite(p).all() and _row_sum_error(p) <= 1e-12
    if cls is LinearDiscriminantAnalysis:
        w, b = model._linear_parameters()
        torch.testing.assert_close(p, torch.softmax(probe @ w.T + b, dim=1), rtol=0, atol=1e-12)
    else:  # counts: log-odds linear in x, so the class with the largest sum_j log theta_kj wins
        w, b = model._linear_parameters()
        assert torch.equal(p.argmax(1), (probe @ w.T + b).argmax(1))


def test_log_prob_overflow_is_an_input_error():
    x, y = gaussian_classes()
    for cls in GAUSSIAN:
        model = _fit(cls, x, y)
        with pytest.raises(InputError, match="log p.x. is finite"):
            model.log_prob(torch.full((1, 4), 1e160))


def test_gda_base_class_matches_its_subclasses():
    x, y = gaussian_classes()
    for cov, cls in (("shared", LinearDiscriminantAnalysis), ("per_class", QuadraticDiscriminantAnalysis)):
        base = GaussianDiscriminantAnalysis(4, 3, covariance=cov)
        base.fit(x + 1e4, y)
        torch.testing.assert_close(
            base.predict_proba(x + 1e4), _fit(cls, x + 1e4, y).predict_proba(x + 1e4), rtol=0, atol=0
        )
