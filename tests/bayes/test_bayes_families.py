"""The Laplace posterior, its evidence and the choice of ``lambda`` for every family:
exact for the Gaussian with the identity link (PRML 3.53-3.54, 3.86; alpha and
beta by 3.92 and 3.95, scikit-learn's BayesianRidge), the Laplace approximation for Poisson
checked against numerical integration."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from torchglm import GeneralizedLinearModel, InputError
from torchglm.bayes import GaussianPrior, evidence_curve, evidence_fixed_point, laplace_posterior


def _regression(n=80, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, dtype=torch.float64, generator=g)
    y = (
        0.7
        + x @ torch.linspace(-1.0, 1.0, d, dtype=torch.float64)
        + 0.5 * torch.randn(n, generator=g, dtype=x.dtype)
    )
    return x, y


def test_gaussian_posterior_and_evidence_are_the_closed_forms():
    x, y = _regression()
    lam, sb2, phi = 0.8, 2.5, 0.3  # prior variances of the weights and the bias; noise 1/beta
    post = laplace_posterior(
        GeneralizedLinearModel(3, "gaussian", dtype=torch.float64),
        (x, y),
        GaussianPrior(lam, sb2),
        dispersion=phi,
    )
    X = np.column_stack([x.numpy(), np.ones(len(y))])  # the model's order: weights, then the bias
    t = y.numpy()
    prior_prec = np.diag([1 / lam] * 3 + [1 / sb2])
    S_N = np.linalg.inv(prior_prec + X.T @ X / phi)  # PRML 3.54
    m_N = S_N @ X.T @ t / phi  # PRML 3.53
    np.testing.assert_allclose(post.mean.numpy(), m_N, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(post.covariance.numpy(), S_N, rtol=1e-9, atol=1e-14)
    # the evidence: y ~ N(0, phi I + X diag(lam, .., sb2) X^T), the marginal of the linear-Gaussian model
    C = phi * np.eye(len(t)) + X @ np.diag([lam] * 3 + [sb2]) @ X.T
    np.testing.assert_allclose(
        post.log_evidence, stats.multivariate_normal(np.zeros(len(t)), C).logpdf(t), rtol=1e-10
    )
    assert post.dispersion == phi and post.grad_norm < 1e-8


def test_gaussian_fixed_point_is_bayesian_ridge():
    """alpha (3.92) and beta (3.95) re-estimated to their fixed point equal scikit-learn's
    BayesianRidge without hyperpriors (its ``lambda_`` is the weight precision ``1 /
    lambda``, its ``alpha_`` the noise precision ``beta = 1 / phi``); no intercept, so both
    put the prior on every coefficient."""
    linear_model = pytest.importorskip("sklearn.linear_model")
    x, y = _regression(d=4)
    y = y - y.mean()
    model = GeneralizedLinearModel(4, "gaussian", fit_intercept=False, dtype=torch.float64)
    fp = evidence_fixed_point(model, (x, y), lambda_tol=1e-12)
    br = linear_model.BayesianRidge(
        fit_intercept=False, alpha_1=0.0, alpha_2=0.0, lambda_1=0.0, lambda_2=0.0, tol=1e-14, max_iter=100000
    ).fit(x.numpy(), y.numpy())
    assert fp.converged
    np.testing.assert_allclose(1 / fp.best_lambda, br.lambda_, rtol=1e-7)
    np.testing.assert_allclose(1 / fp.dispersion, br.alpha_, rtol=1e-7)
    # at the fixed point the exact evidence is stationary in lambda: the evidence curve at
    # that phi has its maximum there
    curve = evidence_curve(model, (x, y), dispersion=fp.dispersion, refine_steps=30)
    assert not curve.at_boundary
    np.testing.assert_allclose(curve.best_lambda, fp.best_lambda, rtol=1e-3)


def test_poisson_laplace_evidence_matches_numerical_integration():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100, 1, dtype=torch.float64, generator=g)
    y = torch.poisson(torch.exp(0.3 + 0.5 * x[:, 0]), generator=g)
    lam, sb2 = 2.0, 1.5
    post = laplace_posterior(
        GeneralizedLinearModel(1, "poisson", dtype=torch.float64), (x, y), GaussianPrior(lam, sb2)
    )
    X, Y = x[:, 0].numpy(), y.numpy()

    def log_joint(b, w):  # b, w broadcast: a grid of (bias, weight) pairs
        eta = w[..., None] * X + b[..., None]
        ll = (Y * eta - np.exp(eta) - special.gammaln(Y + 1)).sum(-1)
        return ll + stats.norm(0, math.sqrt(lam)).logpdf(w) + stats.norm(0, math.sqrt(sb2)).logpdf(b)

    # the trapezoid rule on a grid of +-9 posterior sds: for a smooth integrand that decays
    # like a Gaussian its error falls exponentially with the step (here < 1e-10 in ln Z)
    (mw, mb), (sw, sb) = post.mean.numpy(), np.sqrt(np.diag(post.covariance.numpy()))
    ws, bs = np.linspace(mw - 9 * sw, mw + 9 * sw, 241), np.linspace(mb - 9 * sb, mb + 9 * sb, 241)
    W, B = np.meshgrid(ws, bs, indexing="ij")
    lj = log_joint(B, W)
    top = lj.max()
    z = integrate.trapezoid(integrate.trapezoid(np.exp(lj - top), bs, axis=1), ws)
    exact = top + math.log(z)
    # the Laplace error is O(1/n) in ln Z: 9e-4 here
    assert abs(post.log_evidence - exact) < 5e-3
    assert post.dispersion == 1.0


def test_lambda_by_evidence_for_poisson_and_gamma():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(150, 3, dtype=torch.float64, generator=g)
    mu = torch.exp(0.2 + x @ torch.tensor([0.4, -0.3, 0.1], dtype=torch.float64))
    y = torch.poisson(mu, generator=g)
    model = GeneralizedLinearModel(3, "poisson", dtype=torch.float64)
    curve = evidence_curve(model, (x, y), refine_steps=5)
    fp = evidence_fixed_point(model, (x, y), lambda_tol=1e-10)
    assert not curve.at_boundary and fp.converged and fp.dispersion == 1.0
    # MacKay's fixed point holds the data Hessian fixed: close to, not at, the maximum
    assert abs(math.log(fp.best_lambda / curve.best_lambda)) < 0.2
    y_gamma = mu * torch.from_numpy(np.random.default_rng(0).gamma(4.0, 0.25, 150))
    gmodel = GeneralizedLinearModel(3, "gamma", link="log", dtype=torch.float64)
    fp_g = evidence_fixed_point(gmodel, (x, y_gamma), lambda_tol=1e-10)
    assert fp_g.converged and 0.15 < fp_g.dispersion < 0.4  # 1 / shape = 0.25
    post = laplace_posterior(
        gmodel, (x, y_gamma), GaussianPrior(fp_g.best_lambda), dispersion=fp_g.dispersion
    )
    assert (
        post.grad_norm < 1e-4 and post.dispersion == fp_g.dispersion
    )  # the summed gradient, ~S / phi = 500 in scale


def test_the_dispersion_is_required_where_the_family_has_one_and_refused_elsewhere():
    x, y = _regression(n=30)
    with pytest.raises(InputError, match="dispersion: expected the gaussian family's dispersion phi"):
        laplace_posterior(
            GeneralizedLinearModel(3, "gaussian", dtype=torch.float64), (x, y), GaussianPrior(1.0)
        )
    with pytest.raises(InputError, match="dispersion: expected None"):
        laplace_posterior(
            GeneralizedLinearModel(3, "poisson", dtype=torch.float64),
            (x, y.exp().round()),
            GaussianPrior(1.0),
            dispersion=2.0,
        )
    with pytest.raises(InputError, match="dispersion: expected a positive finite number"):
        laplace_posterior(
            GeneralizedLinearModel(3, "gaussian", dtype=torch.float64),
            (x, y),
            GaussianPrior(1.0),
            dispersion=-1.0,
        )
