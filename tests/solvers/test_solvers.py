"""Solvers against statsmodels, scikit-learn, closed forms and each other."""

import warnings

import numpy as np
import pytest
import torch
from torch.func import grad

from autograd_ref import assert_verified_optimum, flat_objective
from data_util import breast_cancer, simulate
from torchglm import ConvergenceWarning, InputError, NumericalWarning, SeparationWarning
from torchglm.data.batches import TensorBatches
from torchglm.families import FAMILIES
from torchglm.models import GeneralizedLinearModel, LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm.passes import run_passes
from torchglm.solvers import (
    SOLVERS,
    choose_solver,
    fit,
    flat_parameters,
    make_fitter,
    set_flat_parameters,
)

sm = pytest.importorskip("statsmodels.api")


# -- data ------------------------------------------------------------------------
def spector():
    d = sm.datasets.spector.load_pandas()
    return torch.tensor(d.exog.values), torch.tensor(d.endog.values).long()


def anes96():
    d = sm.datasets.anes96.load_pandas()
    return torch.tensor(d.exog.values, dtype=torch.float64), torch.tensor(d.endog.values).long()


def cases():
    return [(f, link) for f, cls in FAMILIES.items() for link in cls.allowed_links]


def autograd_gradient(m, x, y):
    """Gradient of the model's own objective through functional_call (independent of the solvers)."""
    return grad(flat_objective(m, x, y))(flat_parameters(m))


def iterates(model, solver, batches, n_passes, **options):
    """Parameters after every pass of a fitter (the raw pass-by-pass trajectory)."""
    fitter = make_fitter(model, solver, **options)
    out = []
    for _ in range(n_passes):
        fitter.start_pass()
        for b in batches:
            fitter.accumulate(b)
        done = fitter.end_pass()
        out.append(fitter.theta.clone())
        if done:
            break
    return torch.stack(out)


# -- statsmodels / scikit-learn --------------------------------------------------
@pytest.mark.parametrize("solver", ["newton", "irls", "newton-cg", "lbfgs"])
@pytest.mark.parametrize("model_cls,sm_cls", [(LogisticRegression, "Logit"), (ProbitRegression, "Probit")])
def test_matches_statsmodels_binary(solver, model_cls, sm_cls):
    x, y = spector()
    ref = getattr(sm, sm_cls)(y.numpy(), sm.add_constant(x.numpy(), prepend=False)).fit(
        method="newton", tol=1e-14, maxiter=100, disp=0
    )
    m = model_cls(3)
    r = fit(m, x, y, solver=solver, tol=1e-20, gtol=1e-12)
    assert r.converged
    # A float32 model: its rounded parameters sit ~1e-7 off the float64 optimum.
    assert_verified_optimum(m, x, y, r, tol=1e-9)
    ours = flat_parameters(m).numpy()
    np.testing.assert_allclose(ours, ref.params, rtol=1e-6)


def test_matches_statsmodels_mnlogit_probabilities_and_contrasts():
    x, y = anes96()
    K = 7
    ref = sm.MNLogit(y.numpy(), sm.add_constant(x.numpy(), prepend=False)).fit(
        method="newton", tol=1e-14, maxiter=100, disp=0
    )
    m = SoftmaxRegression(x.shape[1], K)
    r = fit(m, x, y, solver="newton", tol=1e-20, gtol=1e-11)
    assert r.converged
    P = m.predict_proba(x).detach().numpy()
    np.testing.assert_allclose(
        P, ref.predict(sm.add_constant(x.numpy(), prepend=False)), rtol=1e-6, atol=1e-10
    )
    # statsmodels pins class 0; ours is the minimum-norm (sum-to-zero) solution.
    Wb = torch.cat([m.linear.weight, m.linear.bias[:, None]], 1).detach()
    assert torch.allclose(Wb.sum(0), torch.zeros(x.shape[1] + 1), atol=1e-9)
    contrasts = (Wb[1:] - Wb[0]).T.numpy()
    np.testing.assert_allclose(contrasts, ref.params, rtol=1e-6)


@pytest.mark.parametrize("solver", ["newton-cg", "lbfgs"])
def test_hessian_free_softmax_steps_build_no_shift_projector(solver):
    """Newton-CG and L-BFGS (with its Newton-CG finish) project their steps off the
    softmax shift directions without the (p x p) projector, p = K (d + 1): with
    K = 1000 classes and 100 features it took 82 GB when the fitter was built. Their
    unpenalized optimum is still the minimum-norm (sum-to-zero) one."""
    from torchglm.solvers import make_fitter

    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 5, generator=g, dtype=torch.float64)
    eta = x @ torch.randn(5, 7, generator=g, dtype=torch.float64)
    u = torch.rand(600, 7, generator=g, dtype=torch.float64)
    y = (eta - torch.log(-torch.log(u))).argmax(1)  # Gumbel-max: a draw from softmax(eta)
    m = SoftmaxRegression(5, 7)  # 6 x 7 x 8 / 2 > NEWTON_MAX_COST: L-BFGS finishes with Newton-CG
    fitter = make_fitter(m, solver, tol=1e-12)
    result = run_passes(fitter, TensorBatches(x, y), 2000)
    assert result.converged
    assert fitter.shift._N is None
    Wb = torch.cat([m.linear.weight, m.linear.bias[:, None]], 1).detach()
    assert torch.allclose(Wb.sum(0), torch.zeros(x.shape[1] + 1), atol=1e-7)
    v = torch.randn(Wb.numel(), dtype=fitter.dtype)
    projected = fitter.shift.remove(v)
    assert torch.allclose(projected, v - fitter.shift.N @ v, atol=1e-12)


@pytest.mark.parametrize("solver", ["newton", "irls", "newton-cg", "lbfgs"])
def test_matches_sklearn_newton_cholesky_l2(solver):
    from sklearn.linear_model import LogisticRegression as SkLR

    x, y = breast_cancer()
    C = 0.5
    sk = SkLR(C=C, solver="newton-cholesky", tol=1e-12, max_iter=200).fit(x.numpy(), y.numpy())
    m = LogisticRegression(x.shape[1], l2=1.0 / (C * x.shape[0]))
    r = fit(m, x, y, solver=solver, tol=1e-20, gtol=1e-12)
    assert r.converged
    np.testing.assert_allclose(m.linear.weight.detach().numpy()[0], sk.coef_[0], rtol=1e-6)
    np.testing.assert_allclose(m.linear.bias.detach().numpy(), sk.intercept_, rtol=1e-6)


# -- convergence behaviour -------------------------------------------------------
def test_newton_from_zero_converges_in_under_10_iterations():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 5, generator=g)
    y = (torch.rand(2000, generator=g) < torch.sigmoid(x @ torch.tensor([1.0, -1, 0.5, 0, 2]) - 0.5)).long()
    m = LogisticRegression(5)
    r = fit(m, x, y, solver="newton", tol=1e-16)
    assert r.converged and r.n_iter < 10
    assert autograd_gradient(m, x, y).abs().max() < 1e-10
    # Stopped on the decrement or the gradient, and both are in the history.
    assert {"loss", "grad_norm", "newton_decrement", "step_size"} <= set(r.history[-1])
    assert r.extra["hessian"].shape == (6, 6)


FEW = [
    ("bernoulli", "logit"),
    ("bernoulli", "probit"),
    ("categorical", "softmax"),
    ("poisson", "log"),
    ("gamma", "inverse"),
]
STATIONARY = (
    [(f, link, s) for f, link in cases() for s in ("newton", "irls")]
    + [(f, link, s) for f, link in FEW for s in ("newton-cg", "lbfgs")]
    + [
        pytest.param(f, link, s, marks=pytest.mark.slow)
        for f, link in cases()
        if (f, link) not in FEW
        for s in ("newton-cg", "lbfgs")
    ]
)


@pytest.mark.parametrize("family,link,solver", STATIONARY)
def test_second_order_and_lbfgs_reach_the_stationary_point(family, link, solver):
    x, y, K = simulate(family, link)
    m = GeneralizedLinearModel(3, family, link, n_classes=K, l2=1e-2, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        r = fit(m, x, y, solver=solver, tol=1e-20, gtol=1e-10)
    assert r.converged, r.message
    assert_verified_optimum(m, x, y, r)
    # Quasi-Newton and CG steps may stop "at working precision" a little earlier.
    assert autograd_gradient(m, x, y).abs().max() < (1e-8 if solver in ("newton", "irls") else 1e-7)
    ref = GeneralizedLinearModel(3, family, link, n_classes=K, l2=1e-2, dtype=torch.float64)
    fit(ref, x, y, solver="newton", tol=1e-20, gtol=1e-12)
    assert torch.allclose(flat_parameters(m), flat_parameters(ref), rtol=1e-6, atol=1e-8)


def _first_order_case(family, link, solver, gtol=1e-8):
    x, y, K = simulate(family, link, n=100)
    kw = dict(n_classes=K, l2=5e-2, dtype=torch.float64)
    m = GeneralizedLinearModel(3, family, link, **kw)
    r = fit(m, x, y, solver=solver, gtol=gtol, max_iter=20_000)
    assert r.converged, r.message
    assert_verified_optimum(m, x, y, r)
    ref = GeneralizedLinearModel(3, family, link, **kw)
    fit(ref, x, y, solver="newton", tol=1e-20, gtol=1e-12)
    assert torch.allclose(m.predict_proba(x), ref.predict_proba(x), rtol=100 * gtol, atol=100 * gtol)
    assert autograd_gradient(m, x, y).abs().max() < 10 * gtol


@pytest.mark.parametrize(
    "family,link", [("bernoulli", "logit"), ("bernoulli", "probit"), ("gaussian", "identity")]
)
@pytest.mark.parametrize("solver", ["gd", "coordinate"])
def test_first_order_reach_the_same_optimum(family, link, solver):
    _first_order_case(family, link, solver)


@pytest.mark.slow
@pytest.mark.parametrize("family,link", [c for c in cases() if c[0] != "bernoulli"])
@pytest.mark.parametrize("solver", ["gd", "coordinate"])
def test_first_order_reach_the_same_optimum_all_families(family, link, solver):
    # Gradient descent on log links is slowly convergent (condition number ~ max mu / min mu).
    _first_order_case(family, link, solver, gtol=1e-7)


def test_sgd_like_fixed_step_gradient_descent():
    """The update w <- w - alpha g of the lecture notes on probabilistic classification, §7, with a
    fixed alpha reaches the Newton optimum (its own phase takes only fixed steps; the verifying
    Newton finish follows it)."""
    x, y = breast_cancer((0, 1))
    m, ref = LogisticRegression(2, l2=1e-2), LogisticRegression(2, l2=1e-2)
    r = fit(m, x, y, solver="gd", lr=1.0, gtol=1e-10)
    fit(ref, x, y, solver="newton", tol=1e-20)
    own = r.history[1 : len(r.history) - r.extra["finish_steps"] - 1]  # then the finish
    assert r.converged and len(own) > 100 and all(h["step_size"] == 1.0 for h in own)
    assert torch.allclose(flat_parameters(m), flat_parameters(ref), atol=1e-8)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_newton_and_irls_take_identical_iterates_for_canonical_links(family):
    link = FAMILIES[family].canonical_link
    x, y, K = simulate(family, link, n=150)
    kw = dict(n_classes=K, l2=1e-3, dtype=torch.float64)
    batches = TensorBatches(x, y)
    a = iterates(GeneralizedLinearModel(3, family, link, **kw), "newton", batches, 6)
    b = iterates(GeneralizedLinearModel(3, family, link, **kw), "irls", batches, 6)
    n = min(len(a), len(b))
    assert n >= 2
    assert torch.allclose(a[:n], b[:n], rtol=1e-10, atol=1e-12)


def test_newton_and_irls_differ_for_probit_but_meet():
    x, y = spector()
    a = iterates(ProbitRegression(3), "newton", TensorBatches(x, y), 3)
    b = iterates(ProbitRegression(3), "irls", TensorBatches(x, y), 3)
    assert not torch.allclose(a[2], b[2], rtol=1e-4)
    m1, m2 = ProbitRegression(3), ProbitRegression(3)
    fit(m1, x, y, solver="newton", tol=1e-20)
    fit(m2, x, y, solver="irls", tol=1e-20)
    assert torch.allclose(flat_parameters(m1), flat_parameters(m2), rtol=1e-9)


def test_irls_step_is_weighted_least_squares():
    """One IRLS step lands on (X~^T Psi X~)^{-1} X~^T Psi z (the lecture notes on probabilistic
    classification, §8; Bishop PRML eq. 4.99), computed with numpy."""
    x, y = spector()
    m = ProbitRegression(3)
    theta0 = torch.tensor([0.2, -0.01, 0.5, -1.0])
    set_flat_parameters(m, theta0)
    traj = iterates(m, "irls", TensorBatches(x, y), 2)
    X = np.c_[x.numpy(), np.ones(32)]
    eta = X @ theta0.numpy()
    from scipy.stats import norm

    mu, dmu = norm.cdf(eta), norm.pdf(eta)
    psi = dmu**2 / (mu * (1 - mu))
    z = eta + (y.numpy() - mu) / dmu
    w_new = np.linalg.solve(X.T @ (psi[:, None] * X), X.T @ (psi * z))
    np.testing.assert_allclose(traj[0].numpy(), w_new, rtol=1e-10)


@pytest.mark.parametrize(
    "solver,batch_size",
    [("newton", 1)] + [(s, b) for s in ["newton", "irls", "newton-cg", "lbfgs", "gd"] for b in (7, 64)],
)
def test_batch_split_gives_the_same_iterates(solver, batch_size):
    x, y = breast_cancer((0, 1, 4))
    x, y = x[:120], y[:120]
    whole = iterates(LogisticRegression(3, l2=1e-3), solver, TensorBatches(x, y), 12)
    split = iterates(LogisticRegression(3, l2=1e-3), solver, TensorBatches(x, y, batch_size=batch_size), 12)
    assert whole.shape == split.shape
    assert torch.allclose(whole, split, rtol=0, atol=1e-12)


def test_max_iter_warns_and_reports_not_converged():
    x, y = breast_cancer()
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        r = fit(LogisticRegression(8), x, y, solver="newton", max_iter=2)
    assert not r.converged and r.n_iter == 2


def test_float32_with_float64_polish_reaches_the_float64_optimum():
    x, y = breast_cancer()
    m64, m32 = LogisticRegression(8, l2=1e-4), LogisticRegression(8, l2=1e-4)
    r64 = fit(m64, x, y, solver="newton", tol=1e-20)
    r32 = fit(m32, x, y, solver="newton", dtype=torch.float32, tol=1e-20)
    assert r32.converged and r32.extra["stages"] == ["torch.float32", "torch.float64"]
    f64, f32 = r64.extra["loss"], r32.extra["loss"]
    assert abs(f32 - f64) <= 1e-12 * f64
    assert torch.allclose(flat_parameters(m32), flat_parameters(m64), rtol=1e-6)


# -- robustness ------------------------------------------------------------------
def test_perfect_separation_warns_names_direction_and_l2_converges():
    x = torch.tensor([[-2.0, 0.3], [-1.0, -0.4], [-0.5, 0.1], [0.5, 0.2], [1.0, -0.3], [2.0, 0.5]])
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    m = LogisticRegression(2)
    with pytest.warns(SeparationWarning, match="weight\\[0,0\\]"):
        r = fit(m, x, y, solver="newton")
    assert not r.converged
    sep = r.extra["separation"]
    assert sep["kind"] == "perfect"
    assert int(sep["direction"].abs().argmax()) == 0  # x0 is the separating feature
    assert torch.isfinite(flat_parameters(m)).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r2 = fit(LogisticRegression(2, l2=1e-2), x, y, solver="newton")
    assert r2.converged


def test_quasi_complete_separation():
    g = torch.Generator().manual_seed(3)
    x1 = torch.cat([torch.zeros(30), torch.rand(20, generator=g) + 0.5])
    y = torch.cat([(torch.rand(30, generator=g) < 0.5).long(), torch.ones(20, dtype=torch.long)])
    x = torch.stack([x1, torch.randn(50, generator=g)], 1)
    with pytest.warns(SeparationWarning, match="quasi-complete"):
        r = fit(LogisticRegression(2), x, y, solver="newton")
    assert "weight[0,0]" in r.extra["separation"]["coefficients"]


def test_duplicated_column_warns_and_gives_the_minimum_norm_solution():
    x, y = spector()
    xd = torch.cat([x, x[:, :1]], 1)
    m = LogisticRegression(4)
    with pytest.warns(NumericalWarning, match="singular"):
        r = fit(m, xd, y, solver="newton", tol=1e-20)
    ref = LogisticRegression(3)
    fit(ref, x, y, solver="newton", tol=1e-20)
    w, w_ref = m.linear.weight[0].detach(), ref.linear.weight[0].detach()
    assert torch.isfinite(w).all()
    assert abs(r.extra["loss"] - float(ref.objective(x, y))) < 1e-12
    assert torch.allclose(w[0], w[3], rtol=1e-8)  # minimum norm splits the coefficient evenly
    assert torch.allclose(w[0] + w[3], w_ref[0], rtol=1e-7)


def test_line_search_keeps_eta_in_the_link_domain():
    """Gamma with the inverse link: zero start is outside eta > 0 (restart from the
    intercept-only fit) and full Newton steps can leave it; no NaN ever reaches the model."""
    x, y, _ = simulate("gamma", "inverse", n=300)
    y = y * 3.0
    m = GeneralizedLinearModel(3, "gamma", "inverse", dtype=torch.float64)
    r = fit(m, x, y, solver="newton", tol=1e-18)
    assert r.converged and r.extra["start"].startswith("intercept-only")
    assert bool((m(x) > 0).all())
    assert autograd_gradient(m, x, y).abs().max() < 1e-8


# -- API ---------------------------------------------------------------------------
def test_make_fitter_and_auto():
    with pytest.raises(InputError, match="solver"):
        make_fitter(LogisticRegression(2), "bfgs-ish")
    with pytest.raises(TypeError, match="lr"):
        make_fitter(LogisticRegression(2), "newton", lr=0.1)
    with pytest.raises(InputError, match="max_iter"):
        make_fitter(LogisticRegression(2), "lbfgs", max_iter=-1)
    x2 = torch.zeros(4, 2)
    with pytest.raises(InputError, match="options of solver 'newton'.*'lr'"):
        fit(LogisticRegression(2), x2, torch.tensor([0, 1, 0, 1]), solver="newton", lr=0.1)
    assert choose_solver(LogisticRegression(20)) == "newton"
    assert choose_solver(LogisticRegression(127)) == "newton"
    assert choose_solver(LogisticRegression(128)) == "lbfgs"
    assert choose_solver(LogisticRegression(500)) == "lbfgs"
    assert choose_solver(SoftmaxRegression(100, 10)) == "lbfgs"
    # small penalized problems (stored entries x outputs <= AUTO_SMALL_MAX_ENTRIES): Newton-CG
    assert choose_solver(LogisticRegression(500, l2=1e-2), 1_000, 500_000) == "newton-cg"
    assert (
        choose_solver(SoftmaxRegression(30, 3, l2=1e-2), 60, 60 * 30) == "newton"
    )  # a tiny Newton iteration
    assert choose_solver(LogisticRegression(500, l2=0.0), 1_000, 500_000) == "lbfgs"  # unpenalized
    assert choose_solver(SoftmaxRegression(64, 10, l2=1e-2), 1_797, 1_797 * 64) == "newton-cg"
    assert choose_solver(SoftmaxRegression(64, 10, l2=1e-2), 10_000, 10_000 * 64) == "lbfgs"
    assert choose_solver(LogisticRegression(20), 1_000, 20_000) == "newton"
    # by cost: a Newton iteration of at most AUTO_NEWTON_MAX_PRODUCTS Hessian-vector
    # products (n d K each) is exact Newton, a dearer one Newton-CG
    assert choose_solver(LogisticRegression(140, l2=1e-2), 5_000, 5_000 * 140) == "newton"  # 143
    assert choose_solver(SoftmaxRegression(40, 5, l2=1e-2), 3_000, 3_000 * 40) == "newton"  # 131
    assert choose_solver(SoftmaxRegression(30, 10, l2=1e-2), 4_000, 4_000 * 30) == "newton"  # 184
    assert choose_solver(LogisticRegression(300, l2=1e-2), 5_000, 5_000 * 300) == "newton-cg"  # 308
    assert choose_solver(SoftmaxRegression(64, 10, l2=1e-2), 1_797, 1_797 * 64) == "newton-cg"  # 443
    assert set(SOLVERS) >= {"newton", "irls", "newton-cg", "lbfgs", "gd", "coordinate"}
    x, y = spector()
    m = LogisticRegression(3)
    r = m.fit(x, y)  # GeneralizedLinearModel.fit -> torchglm.solvers.fit, solver auto
    assert m.is_fitted and r.solver == "newton" and r.converged
    assert "converged" in r.summary()


@pytest.mark.parametrize("sparse", [False, True])
def test_auto_fits_a_small_wide_problem_by_newton_cg(sparse):
    # 300 x 400 (120,000 stored entries): exact Newton's d~ = 401 > 128 and its iteration
    # costs 580 Hessian-vector products (> AUTO_NEWTON_MAX_PRODUCTS), small enough for
    # Newton-CG; a sparse design counts its stored values
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 400, generator=gen, dtype=torch.float64)
    y = (x[:, 0] + torch.randn(300, generator=gen, dtype=torch.float64) > 0).to(torch.float64)
    r = fit(LogisticRegression(400, l2=1e-2), x.to_sparse_csr() if sparse else x, y)
    ref = LogisticRegression(400, l2=1e-2)
    fit(ref, x, y, solver="lbfgs", tol=1e-14)
    assert r.solver == "newton-cg" and r.converged
    assert abs(r.extra.loss - float(ref.objective(x, y))) <= 1e-10 * abs(r.extra.loss)


def test_fitter_driven_by_run_passes_like_a_trainer():
    x, y = spector()
    m = LogisticRegression(3)
    fitter = m.make_fitter("newton", tol=1e-20)
    r = run_passes(fitter, TensorBatches(x, y, batch_size=5), 100)
    ref = LogisticRegression(3)
    fit(ref, x, y, solver="newton", tol=1e-20)
    assert r.converged and torch.allclose(flat_parameters(m), flat_parameters(ref), rtol=1e-10)


@pytest.mark.parametrize("solver", ["newton", "irls"])
def test_weights_and_offset_match_statsmodels_glm(solver):
    """Poisson regression with an exposure offset and frequency weights, unpenalized."""
    g = torch.Generator().manual_seed(5)
    x = torch.rand(300, 2, generator=g)
    offset = torch.log(torch.rand(300, generator=g) * 3 + 0.5)
    y = torch.poisson(torch.exp(x @ torch.tensor([0.7, -0.4]) + 0.2 + offset), generator=g)
    w = torch.randint(1, 4, (300,), generator=g).to(torch.float64)
    ref = sm.GLM(
        y.numpy(),
        sm.add_constant(x.numpy(), prepend=False),
        family=sm.families.Poisson(),
        offset=offset.numpy(),
        freq_weights=w.numpy(),
    ).fit(tol=1e-14)
    m = GeneralizedLinearModel(2, "poisson", "log", dtype=torch.float64)
    r = fit(m, x, y, weight=w, offset=offset, solver=solver, tol=1e-20, gtol=1e-12)
    assert r.converged
    np.testing.assert_allclose(flat_parameters(m).numpy(), ref.params, rtol=1e-6)


def test_auto_uses_float32_with_polish_on_large_newton_passes():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(60_000, 30, generator=g)
    y = (torch.rand(60_000, generator=g) < torch.sigmoid(x[:, :5].sum(1))).long()
    auto, ref = LogisticRegression(30, l2=1e-4), LogisticRegression(30, l2=1e-4)
    r = fit(auto, x, y, tol=1e-12)
    r_ref = fit(ref, x, y, solver="newton", tol=1e-16)
    assert r.solver == "newton" and r.extra["stages"] == ["torch.float32", "torch.float64"]
    assert r.converged and abs(r.extra["loss"] - r_ref.extra["loss"]) <= 1e-10 * r_ref.extra["loss"]
