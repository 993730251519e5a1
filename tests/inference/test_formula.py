"""The formula interface ``torchglm.glm``: formulaic's design matrices, the
coefficients named by its columns, statsmodels' ``smf.glm`` numbers on the same data,
prediction on new data through the same encoding, and one clear error for an unseen
level or a missing value."""

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
formulaic = pytest.importorskip("formulaic")
sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")

import torchglm  # noqa: E402
from torchglm import InputError  # noqa: E402

FORMULA = "y ~ x1 + C(g) + x1:x2"


def _frame(n=240, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "x1": rng.normal(size=n),
            "x2": rng.normal(size=n),
            "g": rng.choice(list("abc"), n),
            "t": rng.uniform(0.5, 2.0, n),
            "w": rng.integers(1, 4, n).astype(float),
        }
    )
    eta = 0.3 + 0.3 * df.x1 - 0.2 * df.x2 + (df.g == "b") * 0.4 - (df.g == "c") * 0.3 + 0.1 * df.x1 * df.x2
    mu = np.exp(eta)
    df["count"] = rng.poisson(mu * df.t)
    df["pos"] = rng.gamma(3.0, mu / 3.0)
    df["real"] = mu + rng.normal(scale=0.3, size=n)
    df["bin"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-(eta - 1.0)))).astype(float)
    return df


# (family, link, response column, statsmodels family)
CASES = [
    ("gaussian", "identity", "real", lambda: sm.families.Gaussian()),
    ("gaussian", "log", "real", lambda: sm.families.Gaussian(sm.families.links.Log())),
    ("poisson", "log", "count", lambda: sm.families.Poisson()),
    ("poisson", "sqrt", "count", lambda: sm.families.Poisson(sm.families.links.Sqrt())),
    ("gamma", "log", "pos", lambda: sm.families.Gamma(sm.families.links.Log())),
    ("gamma", "inverse", "pos", lambda: sm.families.Gamma()),
    ("bernoulli", "logit", "bin", lambda: sm.families.Binomial()),
    ("bernoulli", "probit", "bin", lambda: sm.families.Binomial(sm.families.links.Probit())),
]


def _by_name(res, sres):
    """statsmodels' (patsy's) coefficients in torchglm's order: patsy puts the
    categorical columns first, formulaic keeps the formula's order."""
    assert sorted(res.names) == sorted(sres.params.index)
    return sres.params[res.names].to_numpy(), sres.bse[res.names].to_numpy()


def test_design_is_formulaic_model_matrix_and_names_are_its_columns():
    df = _frame()
    df["y"] = df["count"]
    res = torchglm.glm(FORMULA, df, family="poisson")
    mm = formulaic.model_matrix(FORMULA, df)
    assert res.names == list(mm.rhs.columns) == ["Intercept", "x1", "C(g)[T.b]", "C(g)[T.c]", "x1:x2"]
    x, off = res.formula.design(df)
    np.testing.assert_array_equal(x.numpy(), mm.rhs.to_numpy(dtype=float))
    assert off is None
    assert list(res.summary_frame().index) == res.names
    text = res.summary()
    assert "Formula: y ~ x1 + C(g) + x1:x2" in text and "C(g)[T.b]" in text
    assert "C(g): levels ['a', 'b', 'c'], treatment contrasts (reference level 'a')" in text


@pytest.mark.parametrize("family,link,col,sm_family", CASES, ids=lambda c: c if isinstance(c, str) else "")
def test_coefficients_and_errors_equal_statsmodels_formula_glm(family, link, col, sm_family):
    df = _frame()
    df["y"] = df[col]
    # a tight tolerance: the default stops where the objective, not every digit of the
    # coefficients, is at its optimum (statsmodels' is on the deviance)
    res = torchglm.glm(FORMULA, df, family=family, link=link, tol=1e-14)
    sres = smf.glm(FORMULA, df, family=sm_family()).fit(tol=1e-13, maxiter=500)
    params, bse = _by_name(res, sres)
    np.testing.assert_allclose(res.params.numpy(), params, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(res.bse.numpy(), bse, rtol=1e-6)
    np.testing.assert_allclose(res.deviance, sres.deviance, rtol=1e-8)
    np.testing.assert_allclose(res.scale, sres.scale, rtol=1e-6)
    assert res.df_resid == sres.df_resid and res.df_model == sres.df_model
    # prediction on new rows (a shuffled subset, without the response) through the formula
    new = df.sample(15, random_state=1).drop(columns=["y"])
    np.testing.assert_allclose(res.predict(new).numpy(), sres.predict(new).to_numpy(), rtol=1e-6)
    ours = res.get_prediction(new).summary_frame()
    theirs = sres.get_prediction(new).summary_frame()
    np.testing.assert_allclose(ours["mean_se"], theirs["mean_se"], rtol=1e-5)
    lin = res.predict(new, which="linear").numpy()
    np.testing.assert_allclose(lin, sres.predict(new, which="linear").to_numpy(), rtol=1e-6, atol=1e-7)


def test_offset_exposure_and_frequency_weights_by_column_or_array():
    df = _frame()
    df["y"] = df["count"]
    sres = smf.glm(FORMULA, df, family=sm.families.Poisson(), exposure=df["t"], freq_weights=df["w"]).fit()
    by_column = torchglm.glm(FORMULA, df, family="poisson", exposure="t", freq_weights="w")
    by_array = torchglm.glm(
        FORMULA, df, family="poisson", exposure=df["t"].to_numpy(), freq_weights=df["w"].to_numpy()
    )
    params, bse = _by_name(by_column, sres)
    for res in (by_column, by_array):
        np.testing.assert_allclose(res.params.numpy(), params, rtol=1e-6)
        np.testing.assert_allclose(res.bse.numpy(), bse, rtol=1e-6)
        assert res.nobs == sres.model.wnobs
    # the exposure column is read from the new rows; an array must be passed again
    new = df.sample(10, random_state=2).drop(columns=["y"])
    expected = sres.predict(new, exposure=new["t"]).to_numpy()
    np.testing.assert_allclose(by_column.predict(new).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(
        by_array.predict(new, exposure=new["t"].to_numpy()).numpy(), expected, rtol=1e-6
    )
    with pytest.raises(InputError, match="offset: .*given as an array"):
        by_array.predict(new)
    # an offset column: log(t) as an offset is the same model
    df["logt"] = np.log(df["t"])
    by_offset = torchglm.glm(FORMULA, df, family="poisson", offset="logt", freq_weights="w")
    np.testing.assert_allclose(by_offset.params.numpy(), params, rtol=1e-6)
    with pytest.raises(InputError, match="exposure: expected the log link"):
        torchglm.glm(FORMULA, df, family="poisson", link="sqrt", exposure="t")
    # cluster labels by column name or array; the formula in the JSON form
    by_name = torchglm.glm(FORMULA, df, family="poisson", cov_type="cluster", groups="g")
    by_labels = torchglm.glm(FORMULA, df, family="poisson", cov_type="cluster", groups=df["g"].to_numpy())
    np.testing.assert_array_equal(by_name.bse.numpy(), by_labels.bse.numpy())
    assert by_name.n_groups == 3 and by_name.to_dict()["formula"] == FORMULA


def test_an_unseen_level_in_new_data_is_one_input_error_naming_column_and_level():
    df = _frame()
    df["y"] = df["count"]
    res = torchglm.glm(FORMULA, df, family="poisson")
    new = df.head(4).drop(columns=["y"])
    new.loc[new.index[1], "g"] = "zz"
    with pytest.raises(InputError, match=r"data\['g'\].*unseen levels \['zz'\]"):
        res.predict(new)
    with pytest.raises(InputError, match=r"data\['g'\]"):
        res.get_prediction(new)
    # a string column without C(): the same check
    res2 = torchglm.glm("y ~ x1 + g", df, family="poisson")
    with pytest.raises(InputError, match=r"data\['g'\].*unseen levels \['zz'\]"):
        res2.predict(new)


def test_missing_values_raise_naming_rows_or_are_dropped_as_statsmodels():
    df = _frame()
    df["y"] = df["count"]
    df.loc[[3, 17], "x2"] = np.nan
    df.loc[5, "g"] = None
    with pytest.raises(InputError, match=r"missing values in 3 rows, index \[3, 5, 17\]"):
        torchglm.glm(FORMULA, df, family="poisson")
    res = torchglm.glm(FORMULA, df, family="poisson", missing="drop")
    sres = smf.glm(FORMULA, df, family=sm.families.Poisson(), missing="drop").fit()
    params, bse = _by_name(res, sres)
    np.testing.assert_allclose(res.params.numpy(), params, rtol=1e-6)
    np.testing.assert_allclose(res.bse.numpy(), bse, rtol=1e-6)
    assert res.nobs == sres.nobs == len(df) - 3
    with pytest.raises(InputError, match=r"missing values in 1 rows, index \[3\]"):
        res.predict(df.loc[[2, 3]])
    with pytest.raises(InputError, match="missing: expected 'raise' or 'drop'"):
        torchglm.glm(FORMULA, df, family="poisson", missing="skip")


def test_no_intercept_and_sum_contrasts_are_named_as_formulaic_names_them():
    df = _frame()
    df["y"] = df["real"]
    res = torchglm.glm("y ~ x1 + C(g) - 1", df)
    assert res.names == ["x1", "C(g)[a]", "C(g)[b]", "C(g)[c]"]
    sres = smf.glm("y ~ x1 + C(g) - 1", df).fit()
    np.testing.assert_allclose(res.params.numpy(), sres.params[res.names].to_numpy(), rtol=1e-8)
    res = torchglm.glm("y ~ x1 + C(g, contr.sum)", df)
    assert res.names[2:] == ["C(g, contr.sum)[S.a]", "C(g, contr.sum)[S.b]"]
    assert any("C(g, contr.sum): levels ['a', 'b', 'c'], sum contrasts" in n for n in res.notes)


def test_bad_inputs_are_one_input_error():
    df = _frame()
    df["y"] = df["count"]
    with pytest.raises(InputError, match="data: expected a pandas DataFrame"):
        torchglm.glm(FORMULA, df.to_numpy(), family="poisson")
    with pytest.raises(InputError, match="formula: expected a string 'y ~ terms'"):
        torchglm.glm("x1 + x2", df)
    with pytest.raises(InputError, match=r"data: expected the columns \['nope'\]"):
        torchglm.glm("y ~ x1 + nope", df)
    with pytest.raises(InputError, match="formula: expected"):
        torchglm.glm("y ~ x1 + (", df)
    with pytest.raises(InputError, match="freq_weights: expected a column name or an array of length"):
        torchglm.glm(FORMULA, df, family="poisson", freq_weights=np.ones(3))
    res = torchglm.glm(FORMULA, df, family="poisson")
    with pytest.raises(InputError, match=r"data: expected the columns \['g'\]"):
        res.predict(df[["x1", "x2"]])
