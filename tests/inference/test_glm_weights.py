"""Frequency and variance (prior) weights in ``fit_glm`` and ``torchglm.glm``:
statsmodels' ``GLM(freq_weights=..., var_weights=...)`` numbers, R's ``glm(weights=)``
closed form (weighted least squares on ``n - p`` residual degrees of freedom), and
``weight`` kept as the frequency weights it always was."""

import numpy as np
import pytest
import torch

sm = pytest.importorskip("statsmodels.api")

from torchglm import GeneralizedLinearModel, InputError  # noqa: E402
from torchglm.inference import fit_glm  # noqa: E402


def _data(n=150, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    mu = np.exp(0.5 + 0.3 * x[:, 0] - 0.2 * x[:, 1])
    f = rng.integers(1, 4, n).astype(float)
    v = rng.uniform(0.5, 3.0, n)
    ys = {
        "gaussian": mu + rng.normal(size=n) / np.sqrt(v),
        "gamma": rng.gamma(3 * v, mu / (3 * v)),
        "poisson": rng.poisson(mu).astype(float),
    }
    return x, ys, f, v


FAMILIES = {
    "gaussian": ("identity", lambda: sm.families.Gaussian()),
    "gamma": ("log", lambda: sm.families.Gamma(sm.families.links.Log())),
    "poisson": ("log", lambda: sm.families.Poisson()),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("kinds", [("var_weights",), ("freq_weights", "var_weights"), ("freq_weights",)])
def test_weights_equal_statsmodels(family, kinds):
    x, ys, f, v = _data()
    y = ys[family]
    kw = {k: {"freq_weights": f, "var_weights": v}[k] for k in kinds}
    link, sm_family = FAMILIES[family]
    res = fit_glm(GeneralizedLinearModel(2, family, link=link, dtype=torch.float64), x, y, tol=1e-14, **kw)
    s = sm.GLM(y, np.column_stack([x, np.ones(len(y))]), family=sm_family(), **kw).fit(tol=1e-13)
    np.testing.assert_allclose(res.params.numpy(), s.params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), s.bse, rtol=1e-6)
    np.testing.assert_allclose(res.scale, s.scale, rtol=1e-6)
    np.testing.assert_allclose(res.llf, s.llf, rtol=1e-8)
    np.testing.assert_allclose(res.deviance, s.deviance, rtol=1e-8)
    np.testing.assert_allclose(res.bic, s.bic_llf, rtol=1e-8)
    assert res.df_resid == s.df_resid and res.nobs == s.model.wnobs


def test_var_weights_are_r_prior_weights_and_weight_stays_frequency():
    """Gaussian identity: R's ``glm(y ~ x, weights = w)`` is weighted least squares,
    ``beta = (X^T W X)^{-1} X^T W y``, ``phi = sum w r^2 / (n - p)``, ``Cov = phi (X^T W
    X)^{-1}``: ``var_weights=w``. ``weight=w`` (= ``freq_weights=w``) has the same
    coefficients and deviance but ``sum w - p`` residual degrees of freedom."""
    x, ys, _, v = _data()
    y = ys["gaussian"]
    X = np.column_stack([x, np.ones(len(y))])
    XtW = X.T * v
    beta = np.linalg.solve(XtW @ X, XtW @ y)
    r = y - X @ beta
    n, p = X.shape
    phi = (v * r * r).sum() / (n - p)
    se = np.sqrt(np.diag(phi * np.linalg.inv(XtW @ X)))

    def model():
        return GeneralizedLinearModel(2, "gaussian", dtype=torch.float64)

    prior = fit_glm(model(), x, y, var_weights=v)
    np.testing.assert_allclose(prior.params.numpy(), beta, rtol=1e-10)
    np.testing.assert_allclose(prior.scale, phi, rtol=1e-10)
    np.testing.assert_allclose(prior.bse.numpy(), se, rtol=1e-10)
    assert prior.df_resid == n - p and prior.nobs == n
    # R's logLik of a weighted gaussian glm: -n/2 (log(2 pi RSS_w / n) + 1) + sum(log w) / 2
    rss = (v * r * r).sum()
    np.testing.assert_allclose(prior.llf, -n / 2 * (np.log(2 * np.pi * rss / n) + 1) + np.log(v).sum() / 2)
    freq = fit_glm(model(), x, y, weight=v)
    same = fit_glm(model(), x, y, freq_weights=v)
    np.testing.assert_allclose(freq.params.numpy(), beta, rtol=1e-10)
    np.testing.assert_allclose(freq.deviance, prior.deviance, rtol=1e-10)
    assert freq.df_resid == same.df_resid == v.sum() - p
    np.testing.assert_allclose(freq.bse.numpy(), same.bse.numpy(), rtol=1e-12)
    np.testing.assert_allclose(
        freq.bse.numpy(), se * np.sqrt((n - p) / (v.sum() - p)), rtol=1e-10
    )  # only the residual degrees of freedom differ


def test_formula_var_weights_equal_statsmodels():
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    import torchglm

    x, ys, f, v = _data()
    df = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "y": ys["gamma"], "f": f, "v": v})
    res = torchglm.glm(
        "y ~ x1 + x2", df, family="gamma", link="log", freq_weights="f", var_weights="v", tol=1e-14
    )
    s = smf.glm(
        "y ~ x1 + x2", df, family=sm.families.Gamma(sm.families.links.Log()), freq_weights=f, var_weights=v
    ).fit(tol=1e-13)
    np.testing.assert_allclose(res.params.numpy(), s.params[res.names].to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), s.bse[res.names].to_numpy(), rtol=1e-6)
    assert res.df_resid == s.df_resid


def test_weight_arguments_are_checked():
    x, ys, f, v = _data(n=40)
    y = ys["poisson"]

    def model(family="poisson"):
        return GeneralizedLinearModel(2, family, dtype=torch.float64)

    with pytest.raises(InputError, match="freq_weights: expected either weight or freq_weights"):
        fit_glm(model(), x, y, weight=f, freq_weights=f)
    with pytest.raises(InputError, match="var_weights: expected finite positive weights"):
        fit_glm(model(), x, y, var_weights=np.where(np.arange(40) == 3, 0.0, v))
    with pytest.raises(InputError, match="var_weights: expected one positive weight per row"):
        fit_glm(model(), x, y, var_weights=v[:5])
    with pytest.raises(InputError, match="var_weights: expected a family whose weight is not trials"):
        fit_glm(model("binomial"), x, y / y.max(), var_weights=v)
    with pytest.raises(InputError, match="cov_type: expected 'nonrobust' with var_weights"):
        fit_glm(model(), x, y, var_weights=v, cov_type="HC0")
    res = fit_glm(model(), x, y, var_weights=v)
    with pytest.raises(InputError, match="results: expected a fit without var_weights for residuals"):
        res.get_influence()
