"""The elastic net (L1 + L2) and its proximal Newton solver.

References: the KKT conditions checked independently (autograd gradient of the
smooth part, the minimum-norm subgradient written here), scikit-learn's ``saga``
(``LogisticRegression``, binary and multinomial) and glum's
``GeneralizedLinearRegressor`` on the same objective, and column scaling.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.preprocessing import StandardScaler

from torchglm import InputError, SeparationWarning
from torchglm.models.glm import GeneralizedLinearModel, SoftmaxRegression
from torchglm.penalty import ElasticNetPenalty
from torchglm.solvers import fit

from data_util import threshold_data

F64 = torch.float64


def _binary():
    return threshold_data(300, 6, (1.0, -1.0))


def _counts(n=400, d=6, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = rng.poisson(np.exp(0.5 * x[:, 0] - 0.3 * x[:, 1] + 0.2)).astype(float)
    return torch.tensor(x), torch.tensor(y)


def _breast_cancer():
    x, y = load_breast_cancer(return_X_y=True)
    return torch.tensor(StandardScaler().fit_transform(x)), torch.tensor(y, dtype=F64)


def _iris():
    x, y = load_iris(return_X_y=True)
    return torch.tensor(StandardScaler().fit_transform(x)), torch.tensor(y)


def full_objective(model, x, y, l1):
    """``F`` evaluated here: the model's objective (mean NLL + L2) plus ``l1 ||W||_1``."""
    with torch.no_grad():
        return float(model.objective(x, y) + l1 * model.coef.abs().sum())


def kkt_residual(model, x, y, l1):
    """The minimum-norm subgradient of ``F`` from an autograd gradient of the smooth part."""
    params = [model.linear.weight] + ([model.linear.bias] if model.linear.bias is not None else [])
    grads = torch.autograd.grad(model.objective(x, y), params)
    gw, w = grads[0], model.linear.weight.detach()
    at_zero = torch.sign(gw) * (gw.abs() - l1).clamp_min(0)
    rw = torch.where(w == 0, at_zero, gw + l1 * torch.sign(w))
    return torch.cat([rw.reshape(-1)] + [g.reshape(-1) for g in grads[1:]])


CASES = {
    "logistic-l1": (lambda: GeneralizedLinearModel(6, "bernoulli", dtype=F64), _binary, 0.05),
    "probit-enet": (
        lambda: GeneralizedLinearModel(6, "bernoulli", "probit", l2=0.02, dtype=F64),
        _binary,
        0.03,
    ),
    "poisson-enet": (lambda: GeneralizedLinearModel(6, "poisson", l2=0.02, dtype=F64), _counts, 0.03),
    "softmax-l1": (lambda: SoftmaxRegression(4, 3, dtype=F64), _iris, 0.02),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kkt_conditions_hold_at_the_returned_optimum(case):
    make, data, l1 = CASES[case]
    x, y = data()
    model = make()
    result = fit(model, x, y, solver="proximal", l1=l1)
    assert result.converged, result.message
    r = kkt_residual(model, x, y, l1)
    # kappa = r^T H^-1 r <= 1e-12 max(1, |F|) bounds each |r_j| by about 1e-6 sqrt(H_jj)
    assert float(r.abs().max()) < 1e-6
    assert int((model.coef == 0).sum()) > 0  # the L1 penalty sets exact zeros
    assert result.extra["loss"] == pytest.approx(full_objective(model, x, y, l1), rel=1e-12)


def test_kkt_residual_of_the_penalty_is_the_minimum_norm_subgradient():
    pen = ElasticNetPenalty(1.0)
    g = torch.tensor([0.5, -3.0, 2.0, 0.3, -0.7])
    theta = torch.tensor([0.0, 0.0, 1.0, -2.0, 0.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])  # the last entry is the unpenalized bias
    # |0.5| <= 1 at zero: 0; -3 at zero: -(3 - 1); off zero: g + l1 sign(theta); bias: g
    assert pen.kkt_residual(g, theta, mask).tolist() == [0.0, -2.0, 3.0, -0.7, -0.7]


def _saga(x, y, C, l1_ratio):
    return SkLogistic(C=C, l1_ratio=l1_ratio, solver="saga", tol=1e-13, max_iter=1_000_000).fit(
        x.numpy(), y.numpy()
    )


@pytest.mark.parametrize(
    "data, l1_ratio, C",
    [
        (_binary, 1.0, 0.07),
        (_binary, 0.5, 0.1),
        (_breast_cancer, 1.0, 0.05),
        (_iris, 1.0, 0.3),
        (_iris, 0.4, 0.5),
    ],
    ids=["binary-l1", "binary-enet", "breast-cancer-l1", "iris-l1", "iris-enet"],
)
def test_matches_scikit_learn_saga_on_the_same_objective(data, l1_ratio, C):
    x, y = data()
    n = x.shape[0]
    pen = ElasticNetPenalty.from_C(C, l1_ratio, n)
    multi = not y.is_floating_point()
    make = (
        (lambda: SoftmaxRegression(x.shape[1], 3, l2=pen.l2, dtype=F64))
        if multi
        else (lambda: GeneralizedLinearModel(x.shape[1], "bernoulli", l2=pen.l2, dtype=F64))
    )
    model = make()
    result = fit(model, x, y, solver="proximal", l1=pen.l1)
    assert result.converged, result.message
    sk = _saga(x, y, C, l1_ratio)
    ref = make()
    with torch.no_grad():
        ref.linear.weight.copy_(torch.tensor(sk.coef_))
        ref.linear.bias.copy_(torch.tensor(sk.intercept_))
    ours, theirs = full_objective(model, x, y, pen.l1), full_objective(ref, x, y, pen.l1)
    assert ours <= theirs + 1e-12 * abs(theirs)  # the certified optimum is not above saga's
    assert ours == pytest.approx(theirs, rel=1e-6)
    assert np.array_equal(model.coef.numpy() == 0, sk.coef_ == 0)  # the same exact zeros
    np.testing.assert_allclose(model.coef.numpy(), sk.coef_, atol=1e-6, rtol=1e-6)
    if multi:  # the bias is fixed only up to a shift shared by every class
        b, sb = model.intercept.numpy(), sk.intercept_
        np.testing.assert_allclose(b - b.mean(), sb - sb.mean(), atol=1e-6)
    else:
        np.testing.assert_allclose(model.intercept.numpy(), sk.intercept_, atol=1e-6)


@pytest.mark.parametrize(
    "family, alpha, l1_ratio", [("poisson", 0.05, 0.6), ("poisson", 0.02, 1.0), ("binomial", 0.01, 0.5)]
)
def test_matches_glum_on_the_same_objective(family, alpha, l1_ratio):
    from glum import GeneralizedLinearRegressor

    x, y = _counts() if family == "poisson" else _binary()
    glum = GeneralizedLinearRegressor(
        family=family, alpha=alpha, l1_ratio=l1_ratio, gradient_tol=1e-12, max_iter=1000
    ).fit(x.numpy(), y.numpy())
    pen = ElasticNetPenalty.from_alpha(alpha, l1_ratio)
    fam = "bernoulli" if family == "binomial" else family
    model = GeneralizedLinearModel(x.shape[1], fam, l2=pen.l2, dtype=F64)
    result = fit(model, x, y, solver="proximal", l1=pen.l1)
    assert result.converged, result.message
    ref = GeneralizedLinearModel(x.shape[1], fam, l2=pen.l2, dtype=F64)
    with torch.no_grad():
        ref.linear.weight.copy_(torch.tensor(glum.coef_).view(1, -1))
        ref.linear.bias.fill_(float(glum.intercept_))
    ours, theirs = full_objective(model, x, y, pen.l1), full_objective(ref, x, y, pen.l1)
    assert ours <= theirs + 1e-12 * abs(theirs)
    assert ours == pytest.approx(theirs, rel=1e-6)
    np.testing.assert_allclose(model.coef.numpy()[0], glum.coef_, atol=1e-6)
    assert float(model.intercept) == pytest.approx(float(glum.intercept_), abs=1e-6)


@pytest.mark.parametrize("c", [1e-3, 10.0, 1e4])
def test_column_scaling_with_the_penalty_scaled_changes_only_the_coefficients(c):
    """``X -> c X`` with ``l1 -> c l1`` and ``l2 -> c^2 l2`` has the optimum ``W / c``
    (the same ``F``): the fit finds it, with the same zeros, in as many steps."""
    x, y = _binary()
    l1, l2 = 0.03, 0.01
    base = GeneralizedLinearModel(6, "bernoulli", l2=l2, dtype=F64)
    r0 = fit(base, x, y, solver="proximal", l1=l1)
    scaled = GeneralizedLinearModel(6, "bernoulli", l2=l2 * c * c, dtype=F64)
    r1 = fit(scaled, c * x, y, solver="proximal", l1=l1 * c)
    assert r0.converged and r1.converged
    assert r1.n_iter == r0.n_iter
    np.testing.assert_allclose(scaled.coef.numpy() * c, base.coef.numpy(), atol=1e-7)
    assert np.array_equal(scaled.coef.numpy() == 0, base.coef.numpy() == 0)
    assert r1.extra["loss"] == pytest.approx(r0.extra["loss"], rel=1e-10)


def test_auto_picks_the_proximal_solver_for_l1_and_other_solvers_refuse_it():
    x, y = _binary()
    result = fit(GeneralizedLinearModel(6, "bernoulli", dtype=F64), x, y, l1=0.05)
    assert result.solver == "proximal" and result.converged
    for solver in ("newton", "lbfgs", "coordinate"):
        with pytest.raises(InputError, match="l1"):
            fit(GeneralizedLinearModel(6, "bernoulli", dtype=F64), x, y, solver=solver, l1=0.05)
    with pytest.raises(InputError, match="l1"):
        fit(GeneralizedLinearModel(6, "bernoulli", dtype=F64), x, y, solver="proximal", l1=-1.0)


def test_without_l1_the_proximal_fit_is_fisher_scoring():
    x, y = _binary()
    a = GeneralizedLinearModel(6, "bernoulli", "probit", l2=0.01, dtype=F64)
    b = GeneralizedLinearModel(6, "bernoulli", "probit", l2=0.01, dtype=F64)
    ra, rb = fit(a, x, y, solver="proximal"), fit(b, x, y, solver="irls")
    assert ra.converged and ra.n_iter == rb.n_iter
    torch.testing.assert_close(a.coef, b.coef, rtol=0, atol=1e-12)


def test_targets_all_on_the_boundary_have_no_estimate_whatever_l1():
    """All counts 0: the unpenalized intercept diverges (the weights are bounded by l1)."""
    x, _ = _counts()
    model = GeneralizedLinearModel(6, "poisson", dtype=F64)
    with pytest.warns(SeparationWarning, match="intercept"):
        result = fit(model, x, torch.zeros(x.shape[0], dtype=F64), solver="proximal", l1=0.1)
    assert not result.converged
    assert result.extra["separation"]["kind"] == "boundary"


def test_batches_give_the_same_optimum():
    x, y = _binary()
    a = GeneralizedLinearModel(6, "bernoulli", dtype=F64)
    b = GeneralizedLinearModel(6, "bernoulli", dtype=F64)
    fit(a, x, y, solver="proximal", l1=0.05)
    fit(b, x, y, solver="proximal", l1=0.05, batch_size=64)
    torch.testing.assert_close(a.coef, b.coef, rtol=0, atol=1e-10)
