"""Bayesian GLM classifiers against closed forms, numerical integration, scikit-learn
and Monte Carlo (the lecture notes on probabilistic classification, §12 and §14; Bishop PRML §4.5)."""

import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression as SkLogistic

from torchglm import InputError, LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm.bayes import (
    GaussianPrior,
    LaplacePosterior,
    evidence_curve,
    fit_map,
    laplace_posterior,
    predictive,
    predictive_metrics,
    probit_approximation,
    sample_posterior,
    validation_curve,
)
from torchglm.bayes._layout import linear_predictor

MODELS = {
    "logistic": lambda d: LogisticRegression(d),
    "probit": lambda d: ProbitRegression(d),
    "softmax": lambda d: SoftmaxRegression(d, 3),
}


def _data(kind, n=60, d=1, seed=0, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    if kind == "softmax":
        W = scale * torch.randn(3, d, generator=g)
        y = torch.multinomial(torch.softmax(x @ W.T, 1), 1, generator=g).squeeze(1)
    else:
        w = scale * torch.randn(d, generator=g)
        p = torch.sigmoid(x @ w + 0.3) if kind == "logistic" else torch.special.ndtr(x @ w + 0.3)
        y = torch.bernoulli(p, generator=g).long()
    return x, y


def _closed_form_hessian(kind, x, y, theta):
    """Summed NLL Hessian over theta = (vec W, b) from the textbook formulas (numpy)."""
    x, y, theta = x.numpy(), y.numpy(), theta.numpy()
    n, d = x.shape
    xt = np.hstack([x, np.ones((n, 1))])
    if kind == "softmax":
        K = 3
        W, b = theta[: K * d].reshape(K, d), theta[K * d :]
        eta = x @ W.T + b
        p = np.exp(eta - eta.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        # d^2/d w_k d w_l = sum_i (p_ik delta_kl - p_ik p_il) x~_i x~_i^T  (blocks of size d+1)
        Hb = np.zeros((K, d + 1, K, d + 1))
        for i in range(n):
            A = np.diag(p[i]) - np.outer(p[i], p[i])
            Hb += np.einsum("kl,a,b->kalb", A, xt[i], xt[i])
        # reorder (class, [x, 1]) -> (vec W, b)
        order = [k * (d + 1) + j for k in range(K) for j in range(d)] + [k * (d + 1) + d for k in range(K)]
        return Hb.reshape(K * (d + 1), K * (d + 1))[np.ix_(order, order)]
    eta = xt @ theta
    if kind == "logistic":
        s = 1 / (1 + np.exp(-eta))
        h = s * (1 - s)  # sigma (1 - sigma): the lecture notes, §14; PRML eq. 4.143
    else:
        from scipy.stats import norm

        sgn = 2 * y - 1
        r = norm.pdf(eta) / norm.cdf(sgn * eta)
        h = r * (r + sgn * eta)  # d^2/deta^2 of -ln Phi(s eta)
    return (xt * h[:, None]).T @ xt


@pytest.mark.parametrize("bias_variance", [None, 2.0])
@pytest.mark.parametrize("kind", list(MODELS))
def test_laplace_covariance_is_inverse_closed_form_hessian(kind, bias_variance):
    x, y = _data(kind)
    model = MODELS[kind](1)
    prior = GaussianPrior(0.7, bias_variance)
    post = laplace_posterior(model, (x, y), prior)
    assert post.grad_norm < 1e-4  # the mean is the posterior mode
    H = _closed_form_hessian(kind, x, y, post.mean)
    k = 3 if kind == "softmax" else 1
    H += np.diag([1 / 0.7] * k + [0.0 if bias_variance is None else 1 / bias_variance] * k)
    expected = np.linalg.pinv(H) if (kind == "softmax" and bias_variance is None) else np.linalg.inv(H)
    np.testing.assert_allclose(post.precision.numpy(), H, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(post.covariance.numpy(), expected, rtol=1e-8, atol=1e-10)


def test_map_is_sklearn_with_C_equal_to_prior_variance():
    # sklearn minimizes C sum_i nll_i + ||w||^2 / 2, the negative log posterior with lambda = C.
    x, y = _data("logistic", n=200, d=3, seed=1)
    model = LogisticRegression(3)
    fit_map(model, (x, y), GaussianPrior(0.5))
    sk = SkLogistic(C=0.5, tol=1e-12, max_iter=10_000).fit(x.numpy(), y.numpy())
    np.testing.assert_allclose(model.linear.weight.detach().numpy(), sk.coef_, atol=1e-6)
    np.testing.assert_allclose(model.linear.bias.detach().numpy(), sk.intercept_, atol=1e-6)
    assert model.l2 == pytest.approx(1 / (0.5 * 200))


def _grid_posterior(x, y, lam, bias_var, center, half_width, n_grid=301):
    """Brute-force posterior mean/variance of (w, b) of 1-feature logistic regression."""
    w = np.linspace(center[0] - half_width[0], center[0] + half_width[0], n_grid)
    b = np.linspace(center[1] - half_width[1], center[1] + half_width[1], n_grid)
    Wg, Bg = np.meshgrid(w, b, indexing="ij")
    eta = Wg[..., None] * x.numpy()[:, 0] + Bg[..., None]
    t = y.numpy()
    loglik = (t * eta - np.logaddexp(0, eta)).sum(-1)
    logg = loglik - Wg**2 / (2 * lam) - Bg**2 / (2 * bias_var)
    p = np.exp(logg - logg.max())
    p /= p.sum()
    mean = np.array([(p * Wg).sum(), (p * Bg).sum()])
    var = np.array([(p * (Wg - mean[0]) ** 2).sum(), (p * (Bg - mean[1]) ** 2).sum()])
    return mean, var


@pytest.mark.parametrize("chains,draws", [(2, 300), pytest.param(4, 1500, marks=pytest.mark.slow)])
def test_nuts_mean_and_variance_match_grid_integration(chains, draws):
    x, y = _data("logistic", n=25, d=1, seed=3)
    model = LogisticRegression(1)
    prior = GaussianPrior(2.0, bias_variance=2.0)
    post = laplace_posterior(model, (x, y), prior)
    sd = post.covariance.diagonal().sqrt().numpy()
    mean, var = _grid_posterior(x, y, 2.0, 2.0, post.mean.numpy(), 8 * sd)
    draws = sample_posterior(
        model, (x, y), post, num_chains=chains, num_samples=draws, warmup_steps=150, seed=0
    )
    diag = draws.diagnostics()
    assert diag["max_rhat"] < 1.02 and diag["min_ess"] > 0.5 * chains * draws.samples.shape[1]
    ess = draws.ess.numpy()
    m_mc = draws.mean.numpy()
    v_mc = draws.covariance.diagonal().numpy()
    assert np.all(np.abs(m_mc - mean) < 4 * np.sqrt(var / ess))
    assert np.all(np.abs(v_mc - var) < 4 * var * np.sqrt(2 / ess))
    # the skewed posterior: its mean is farther from 0 than the Laplace mean (the mode)
    assert abs(mean[0]) > abs(float(post.mean[0])) + 0.02


@pytest.mark.parametrize("kind", list(MODELS))
def test_nuts_chains_agree_with_laplace_on_a_large_sample(kind):
    # n = 600: the posterior is nearly Gaussian, so NUTS and Laplace moments agree.
    x, y = _data(kind, n=600, d=2, seed=4)
    model = MODELS[kind](2)
    post = laplace_posterior(model, (x, y), GaussianPrior(1.0))
    draws = sample_posterior(model, (x, y), post, num_chains=2, num_samples=200, warmup_steps=100)
    assert draws.samples.shape == (2, 200, post.mean.numel())
    assert draws.diagnostics()["max_rhat"] < 1.05
    sd = post.covariance.diagonal().sqrt()
    assert torch.all((draws.mean - post.mean).abs() < 0.35 * sd)
    assert torch.allclose(draws.covariance.diagonal().sqrt(), sd, rtol=0.25)


def test_probit_approximation_within_002_of_monte_carlo():
    x, y = _data("logistic", n=40, d=2, seed=5)
    model = LogisticRegression(2)
    post = laplace_posterior(model, (x, y), GaussianPrior(5.0))
    g = torch.linspace(-6, 6, 13)
    grid = torch.cartesian_prod(g, g)
    approx = predictive(model, post, grid)
    mc = predictive(
        model, post, grid, method="mc", n_samples=200_000, generator=torch.Generator().manual_seed(0)
    )
    assert approx.method == "probit" and mc.method == "mc"
    assert float((approx.proba - mc.proba).abs().max()) < 0.02
    # the moments of the activation a = w^T x~ match their Monte Carlo estimates
    torch.testing.assert_close(approx.eta_var, mc.eta_var, rtol=0.02, atol=1e-3)
    torch.testing.assert_close(approx.proba_var, mc.proba_var, rtol=0.05, atol=5e-4)


def test_probit_link_predictive_is_exact():
    x, y = _data("probit", n=40, d=2, seed=6)
    model = ProbitRegression(2)
    post = laplace_posterior(model, (x, y), GaussianPrior(5.0))
    grid = torch.cartesian_prod(torch.linspace(-4, 4, 9), torch.linspace(-4, 4, 9))
    exact = predictive(model, post, grid)
    mc = predictive(
        model, post, grid, method="mc", n_samples=200_000, generator=torch.Generator().manual_seed(1)
    )
    assert exact.method == "exact"
    se = (mc.proba_var / 200_000).sqrt()
    assert bool(((exact.proba - mc.proba).abs() < 5 * se + 1e-6).all())


def test_probit_approximation_formula():
    mu, var = torch.tensor([0.0, 2.0, -3.0]), torch.tensor([0.0, 1.0, 8.0])
    expected = torch.sigmoid(mu / torch.sqrt(1 + math.pi * var / 8))
    torch.testing.assert_close(probit_approximation(mu, var), expected)


def test_far_from_the_data_the_predictive_moves_toward_half():
    g = torch.Generator().manual_seed(7)
    x = torch.rand(15, 1, generator=g) * 2 - 1  # 15 points in [-1, 1]
    y = torch.bernoulli(torch.sigmoid(3 * x[:, 0]), generator=g).long()
    model = LogisticRegression(1)
    post = laplace_posterior(model, (x, y), GaussianPrior(100.0))
    far = torch.tensor([[1.0], [5.0], [20.0], [100.0]])
    with torch.no_grad():
        p_map = model.predict_proba(far)
    p_bayes = predictive(model, post, far).proba
    gap_map, gap_bayes = (p_map - 0.5).abs(), (p_bayes - 0.5).abs()
    assert bool((gap_bayes < gap_map).all())
    assert float(p_map[-1]) > 0.999 and float(p_bayes[-1]) < 0.8  # MAP overconfident
    draws = sample_posterior(model, (x, y), post, num_chains=2, num_samples=300, warmup_steps=150)
    p_mcmc = predictive(model, draws, far).proba
    assert float(p_mcmc[-1]) < 0.9
    # sigma_a^2 grows like x^2 away from the data
    assert bool((predictive(model, post, far).eta_var.diff() > 0).all())


def test_laplace_predictive_calibration_not_worse_than_map():
    # d = 20 weights from n = 120 points under a weak prior: the MAP is overconfident.
    g = torch.Generator().manual_seed(0)
    d, n = 20, 120
    w = 0.5 * torch.randn(d, generator=g)
    x = torch.randn(n + 5000, d, generator=g)
    y = torch.bernoulli(torch.sigmoid(x @ w), generator=g).long()
    model = LogisticRegression(d)
    post = laplace_posterior(model, (x[:n], y[:n]), GaussianPrior(25.0))
    with torch.no_grad():
        m_map = predictive_metrics(model.predict_proba(x[n:]), y[n:])
    m_lap = predictive_metrics(predictive(model, post, x[n:]).proba, y[n:])
    assert m_lap["ece"] <= m_map["ece"]
    assert m_lap["nll"] <= m_map["nll"]
    assert m_lap["accuracy"] == m_map["accuracy"]  # sigma(kappa mu_a) keeps the sign of mu_a


def test_predictive_metrics_against_sklearn():
    from sklearn.metrics import log_loss

    g = torch.Generator().manual_seed(8)
    p = torch.rand(500, generator=g)
    y = torch.bernoulli(p, generator=g).long()
    m = predictive_metrics(p, y, n_bins=10)
    assert m["nll"] == pytest.approx(log_loss(y.numpy(), p.numpy()), rel=1e-10)
    # ECE by hand: equal-width bins of the confidence max(p, 1-p)
    conf = torch.maximum(p, 1 - p)
    correct = ((p > 0.5).long() == y).double()
    bins = torch.clamp((conf * 10).floor().long(), 0, 9)
    ece = (
        sum(
            abs(float(correct[bins == b].mean() - conf[bins == b].mean())) * int((bins == b).sum())
            for b in range(10)
            if (bins == b).any()
        )
        / 500
    )
    assert m["ece"] == pytest.approx(ece, abs=1e-6)


@pytest.mark.parametrize("lam_true", [0.25, 1.0, 4.0])
def test_evidence_maximization_recovers_the_prior_variance(lam_true):
    g = torch.Generator().manual_seed(0)
    d, n = 30, 1500
    x = torch.randn(n, d, generator=g)
    w = math.sqrt(lam_true) * torch.randn(d, generator=g)
    y = torch.bernoulli(torch.sigmoid(x @ w), generator=g).long()
    curve = evidence_curve(
        LogisticRegression(d, fit_intercept=False),
        (x, y),
        lambdas=[10 ** (e / 2) for e in range(-4, 5)],
        refine_steps=6,
    )
    assert not curve.at_boundary and math.isfinite(curve.best_lambda)
    assert lam_true / 3 < curve.best_lambda < 3 * lam_true
    assert curve.best_score >= max(curve.scores["log_evidence"])


def test_laplace_evidence_matches_numerical_integration():
    # One coefficient: ln Z = ln int p(D|w) N(w; 0, lambda) dw by quadrature.
    x, y = _data("logistic", n=300, d=1, seed=9)
    model = LogisticRegression(1, fit_intercept=False)
    post = laplace_posterior(model, (x, y), GaussianPrior(2.0))
    w = np.linspace(-6, 6, 24_001)
    eta = np.outer(w, x.numpy()[:, 0])
    loglik = (y.numpy() * eta - np.logaddexp(0, eta)).sum(1)
    logf = loglik - w**2 / 4.0 - 0.5 * math.log(2 * math.pi * 2.0)
    log_z = logf.max() + math.log(np.exp(logf - logf.max()).sum() * (w[1] - w[0]))
    assert post.log_evidence == pytest.approx(log_z, abs=0.02)


def test_validation_curve_scores_sklearn_fits():
    from sklearn.metrics import log_loss

    x, y = _data("logistic", n=300, d=4, seed=10)
    lambdas = [0.01, 0.1, 1.0, 10.0]
    curve = validation_curve(LogisticRegression(4), (x[:150], y[:150]), (x[150:], y[150:]), lambdas)
    for lam, nll in zip(lambdas, curve.scores["val_nll"]):
        sk = SkLogistic(C=lam, tol=1e-12, max_iter=10_000).fit(x[:150].numpy(), y[:150].numpy())
        assert nll == pytest.approx(log_loss(y[150:].numpy(), sk.predict_proba(x[150:].numpy())), rel=1e-6)
    assert curve.best_lambda == lambdas[int(np.argmin(curve.scores["val_nll"]))]


def test_softmax_predictive_and_posterior_roundtrip():
    x, y = _data("softmax", n=200, d=2, seed=11)
    model = SoftmaxRegression(2, 3)
    post = laplace_posterior(model, (x, y), GaussianPrior(1.0))
    assert post.dim == post.mean.numel() - 1  # the bias shift is not identified
    assert abs(float(post.mean[-3:].sum())) < 1e-10  # biases centred
    pred = predictive(model, post, x[:5], generator=torch.Generator().manual_seed(0))
    assert pred.method == "mc" and pred.proba.shape == (5, 3) and pred.eta_var.shape == (5, 3, 3)
    torch.testing.assert_close(pred.proba.sum(1), torch.ones(5))
    back = LaplacePosterior.from_state_dict(post.state_dict())
    torch.testing.assert_close(back.covariance, post.covariance)
    # sampling honours the covariance (5 Monte Carlo standard errors, sqrt(2/N) var)
    s = post.sample(100_000, torch.Generator().manual_seed(1))
    tol = 5 * math.sqrt(2 / 100_000) * float(post.covariance.diagonal().max())
    torch.testing.assert_close(torch.cov(s.T), post.covariance, atol=tol, rtol=0)
    assert torch.allclose(
        linear_predictor(model, post.mean, x[:5]).softmax(1), model.predict_proba(x[:5]).detach(), atol=1e-12
    )


def test_errors_name_the_argument():
    x, y = _data("logistic", n=30, d=1)
    model = LogisticRegression(1)
    post = laplace_posterior(model, (x, y), GaussianPrior(1.0))
    with pytest.raises(InputError, match="method: expected one of"):
        predictive(model, post, x, method="nope")
    with pytest.raises(InputError, match="posterior: expected a posterior over this model's 3"):
        predictive(LogisticRegression(2), post, torch.zeros(4, 2))
    with pytest.raises(InputError, match="method: expected 'mc'"):
        predictive(ProbitRegression(1), post, x, method="probit")
    with pytest.raises(InputError, match="num_chains: expected at least 2"):
        sample_posterior(model, (x, y), post, num_chains=1)
    with pytest.raises(InputError, match="variance: expected a positive number"):
        GaussianPrior(0.0)
    with pytest.raises(InputError, match="data: expected"):
        laplace_posterior(model, x, GaussianPrior(1.0))


def test_nuts_reports_progress_and_not_by_default(capsys):
    """``progress`` receives a line per chain stage (here every draw may report) and a
    closing line per chain; without it the sampler prints nothing."""
    x, y = _data("logistic", n=40, d=1, seed=6)
    model = LogisticRegression(1)
    post = laplace_posterior(model, (x, y), GaussianPrior(1.0))
    lines = []
    sample_posterior(
        model,
        (x, y),
        post,
        num_chains=2,
        num_samples=20,
        warmup_steps=10,
        progress=lines.append,
        progress_every=0.0,
    )
    assert any(line.startswith("NUTS chain 1/2: warmup ") for line in lines)
    assert any(line.startswith("NUTS chain 2/2: sample 20/20") for line in lines)
    assert sum("done" in line for line in lines) == 2
    sample_posterior(model, (x, y), post, num_chains=2, num_samples=5, warmup_steps=5)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_float32_data_are_promoted_to_the_posteriors_float64():
    """torch's default float32 data under a float64 posterior: the Laplace predictive,
    NUTS and SVI run (they raised a dtype mismatch) and agree with float64 data."""
    from torchglm.bayes import svi_posterior

    g = torch.Generator().manual_seed(8)
    x64 = torch.randn(120, 2, generator=g, dtype=torch.float64)
    y = (torch.rand(120, generator=g, dtype=torch.float64) < torch.sigmoid(x64[:, 0])).long()
    x32 = x64.float()
    prior = GaussianPrior(1.0)
    out = {}
    for name, x in (("32", x32), ("64", x64)):
        model = LogisticRegression(2, dtype=torch.float32)
        post = laplace_posterior(model, (x, y), prior)
        draws = sample_posterior(model, (x, y), post, num_chains=2, num_samples=30, warmup_steps=20)
        svi = svi_posterior(model, (x, y), prior, num_steps=60)
        out[name] = [predictive(model, p, x[:5]).proba for p in (post, draws, svi)]
        assert all(o.dtype == torch.float64 for o in out[name])
    for a, b in zip(out["32"], out["64"]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
