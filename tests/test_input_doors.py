"""One input gate for every door: the same bad rows give the same ``InputError`` message
through ``model.fit``, ``train.py`` (the data module), and the scikit-learn wrappers'
``fit`` and ``score`` (all of them call :mod:`torchglm._validation`)."""

import numpy as np
import pytest
import torch

from torchglm import InputError
from torchglm.models import GeneralizedLinearModel, MultinomialNB, SoftmaxRegression
from torchglm.sklearn import GLMRegressor, LogisticRegression
from torchglm.sklearn import MultinomialNB as SkMultinomialNB
from torchglm.training.cli import main

pytestmark = pytest.mark.usefixtures("quiet_one_thread")

N, D = 40, 3


def _rows(family: str, case: str) -> tuple[np.ndarray, np.ndarray]:
    """Clean rows of ``family`` (Poisson counts or 0/1 labels), then the one defect ``case``."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D))
    eta = 0.5 * x[:, 0] - 0.3 * x[:, 1]
    y = (
        rng.poisson(np.exp(eta)).astype(np.float64)
        if family == "poisson"
        else (eta + rng.normal(size=N) > 0).astype(np.float64)
    )
    if case == "negative_count":
        y[5] = -1.0
    elif case == "nan_target":
        y[5] = np.nan
    elif case == "inf_target":
        y[7] = np.inf
    elif case == "inf_feature":
        x[4, 1] = np.inf
    elif case == "nan_feature":
        x[9, 2] = np.nan
    elif case == "label_outside":
        y[5] = 2.0
    elif case != "clean":
        raise ValueError(case)
    return x, y


def _python_fit(family, x, y, tmp_path):
    GeneralizedLinearModel(D, family, dtype=torch.float64).fit(torch.from_numpy(x), torch.from_numpy(y))


def _train_py(family, x, y, tmp_path):
    data = tmp_path / "rows.csv"
    with open(data, "w") as fh:
        fh.write(",".join([f"x{j}" for j in range(D)] + ["y"]) + "\n")
        for xi, yi in zip(x, y):
            fh.write(",".join(repr(float(v)) for v in [*xi, yi]) + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        "seed_everything: 0\n"
        "model:\n  model:\n    class_path: torchglm.GeneralizedLinearModel\n"
        f"    init_args:\n      family: {family}\n"
        "  solver: newton\n"
        f"data:\n  source: {data}\n  target: y\n  batch_size: null\n"
        "trainer:\n  max_epochs: 2\n  enable_progress_bar: false\n"
    )
    code = main(["--config", str(config), "--run_dir", str(tmp_path / "run")])
    return code


def _sklearn(family):
    return GLMRegressor(family="poisson") if family == "poisson" else LogisticRegression(C=np.inf)


def _sklearn_fit(family, x, y, tmp_path):
    _sklearn(family).fit(x, y)


def _sklearn_score(family, x, y, tmp_path):
    est = _sklearn(family).fit(*_rows(family, "clean"))
    est.score(x, y)


CASES = [
    ("poisson", "negative_count"),
    ("poisson", "nan_target"),
    ("poisson", "inf_target"),
    ("poisson", "inf_feature"),
    ("poisson", "nan_feature"),
    ("bernoulli", "nan_target"),
    ("bernoulli", "inf_feature"),
    ("bernoulli", "label_outside"),
]


@pytest.mark.parametrize("door", ["train_py", "sklearn_fit", "sklearn_score"])
@pytest.mark.parametrize("family, case", CASES)
def test_every_door_gives_model_fits_message(tmp_path, capsys, family, case, door):
    x, y = _rows(family, case)
    if case == "label_outside" and door != "train_py":
        pytest.skip("the scikit-learn classifiers encode any labels: no label lies outside")
    with pytest.raises(InputError) as expected:
        _python_fit(family, x, y, tmp_path)
    message = str(expected.value)
    if door == "train_py":
        code = _train_py(family, x, y, tmp_path)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert err == [f"error: {message}"]
        assert not (tmp_path / "run").exists()
    else:
        with pytest.raises(InputError) as got:
            {"sklearn_fit": _sklearn_fit, "sklearn_score": _sklearn_score}[door](family, x, y, tmp_path)
        assert str(got.value) == message


def test_python_fit_messages_name_the_row():
    """The reference door's messages (what every other door must repeat)."""
    with pytest.raises(
        InputError, match=r"^y: expected non-negative counts, got 1 values outside it, first y\[5\]"
    ):
        _python_fit("poisson", *_rows("poisson", "negative_count"), None)
    with pytest.raises(InputError, match=r"^y: expected finite values .* first at index \(5,\)$"):
        _python_fit("poisson", *_rows("poisson", "nan_target"), None)
    with pytest.raises(InputError, match=r"^X: expected finite values .* first at index \(4, 1\)$"):
        _python_fit("poisson", *_rows("poisson", "inf_feature"), None)


@pytest.mark.parametrize("door", ["python_fit", "train_py", "sklearn_fit", "sklearn_score"])
def test_every_door_accepts_fractional_poisson_counts(tmp_path, capsys, door):
    """Non-integer non-negative Poisson targets (rates) are accepted by model.fit, as by
    scikit-learn and statsmodels: every door accepts them alike."""
    x, y = _rows("poisson", "clean")
    y = y + 0.5
    if door == "train_py":
        assert _train_py("poisson", x, y, tmp_path) == 0, capsys.readouterr().err
    else:
        {"python_fit": _python_fit, "sklearn_fit": _sklearn_fit, "sklearn_score": _sklearn_score}[door](
            "poisson", x, y, tmp_path
        )


# -- every bad input through every door ---------------------------------------------
# A case: the model it is fed to, the clean rows, the one defect. The reference is the
# Python API (model.fit for data to fit, model.predict_proba of a fitted model for rows
# to predict); every other door must refuse it with that message.

MODELS = {
    # name: (core model, train.py class_path and init_args, scikit-learn estimator)
    "poisson": (
        lambda: GeneralizedLinearModel(D, "poisson", dtype=torch.float64),
        "torchglm.GeneralizedLinearModel\n    init_args:\n      family: poisson\n  solver: newton",
        lambda: GLMRegressor(family="poisson"),
    ),
    "bernoulli": (
        lambda: GeneralizedLinearModel(D, "bernoulli", dtype=torch.float64),
        "torchglm.GeneralizedLinearModel\n    init_args:\n      family: bernoulli\n  solver: newton",
        lambda: LogisticRegression(C=np.inf),
    ),
    "softmax3": (
        lambda: SoftmaxRegression(D, 3, dtype=torch.float64),
        "torchglm.SoftmaxRegression\n    init_args:\n      n_classes: 3\n  solver: newton",
        None,  # scikit-learn's classes are the labels seen: no class is declared empty
    ),
    "multinomial_nb": (
        lambda: MultinomialNB(D, 2, dtype=torch.float64),
        "torchglm.models.MultinomialNB\n    init_args:\n      n_classes: 2\n  solver: closed_form",
        lambda: SkMultinomialNB(),
    ),
}

#: case: (model, defect, where it applies: "fit" (data to fit) or "predict" (rows to predict))
BAD = {
    "negative_count": ("poisson", "fit"),
    "negative_count_feature": ("multinomial_nb", "fit"),
    "fractional_label": ("bernoulli", "fit"),
    "nan_feature": ("bernoulli", "fit"),
    "inf_feature": ("poisson", "fit"),
    "label_outside": ("bernoulli", "fit"),
    "empty_declared_class": ("softmax3", "fit"),
    "nan_weight": ("poisson", "fit"),
    "inf_weight": ("bernoulli", "fit"),
    "negative_weight": ("bernoulli", "fit"),
    "nan_feature_to_predict": ("bernoulli", "predict"),
    "inf_feature_to_predict": ("poisson", "predict"),
    "negative_count_feature_to_predict": ("multinomial_nb", "predict"),
    "wrong_width_to_predict": ("bernoulli", "predict"),
}


def _clean(model: str):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, D))
    eta = 0.5 * x[:, 0] - 0.3 * x[:, 1]
    if model == "poisson":
        y = rng.poisson(np.exp(eta)).astype(np.float64)
    elif model == "multinomial_nb":
        x = rng.poisson(2.0, size=(N, D)).astype(np.float64)
        y = (x[:, 0] + rng.normal(size=N) > 2).astype(np.float64)
    else:
        y = (eta + rng.normal(size=N) > 0).astype(np.float64)
    return x, y, np.ones(N)


def _bad(case: str):
    """``(model, x, y, weight)`` with the defect of ``case``: for a "predict" case the
    clean rows to fit and ``x`` the rows to predict."""
    model, _ = BAD[case]
    x, y, w = _clean(model)
    x = x.copy()
    if case.startswith("nan_feature"):
        x[9, 2] = np.nan
    elif case.startswith("inf_feature"):
        x[4, 1] = -np.inf
    elif case.startswith("negative_count_feature"):
        # a count model's features are counts or weights such as tf-idf: >= 0
        x[6, 0] = -1.5
    elif case.startswith("wrong_width"):
        x = np.hstack([x, x[:, :1]])
    elif case == "negative_count":
        y[5] = -1.0
    elif case == "fractional_label":
        y[5] = 0.5
    elif case == "label_outside":
        y[5] = 2.0
    elif case == "nan_weight":
        w[3] = np.nan
    elif case == "inf_weight":
        w[3] = np.inf
    elif case == "negative_weight":
        w[3] = -1.0
    return model, x, y, w


def _csv(path, x, y=None, w=None, header=True):
    columns = [x[:, j] for j in range(x.shape[1])]
    names = [f"x{j}" for j in range(x.shape[1])]
    for name, col in (("y", y), ("w", w)):
        if col is not None:
            columns.append(col)
            names.append(name)
    with open(path, "w") as fh:
        if header:
            fh.write(",".join(names) + "\n")
        for row in zip(*columns):
            fh.write(",".join(repr(float(v)) for v in row) + "\n")
    return path


def _train(tmp_path, model, x, y, w, run_dir):
    data = _csv(tmp_path / "rows.csv", x, y, w)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"seed_everything: 0\nmodel:\n  model:\n    class_path: {MODELS[model][1]}\n"
        f"data:\n  source: {data}\n  target: y\n  weight: w\n  batch_size: null\n"
        f"  standardize: {str(model != 'multinomial_nb').lower()}\n"
        "trainer:\n  max_epochs: 2\n  enable_progress_bar: false\n"
    )
    return main(["--config", str(config), "--run_dir", str(run_dir)])


def _cli_error(capsys, code) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0].removeprefix("error: ")


def _door_message(door, case, tmp_path, capsys) -> str:
    """The message door ``door`` refuses ``case`` with (an InputError's, or the CLI's
    one ``error:`` line with exit status 2, leaving no output)."""
    model, x, y, w = _bad(case)
    core, _, estimator = MODELS[model]
    weighted = "weight" in case
    if door == "python_fit":
        with pytest.raises(InputError) as err:
            core().fit(x, y, weight=w if weighted else None)
        return str(err.value)
    if door == "sklearn_fit":
        with pytest.raises(InputError) as err:
            estimator().fit(x, y, sample_weight=w if weighted else None)
        return str(err.value)
    if door == "train_py":
        message = _cli_error(capsys, _train(tmp_path, model, x, y, w, tmp_path / "run"))
        assert not (tmp_path / "run").exists()
        return message
    clean_x, clean_y, _ = _clean(model)
    if door == "python_predict":
        fitted = core()
        fitted.fit(clean_x, clean_y)
        with pytest.raises(InputError) as err:
            fitted.predict_proba(x)
        return str(err.value)
    if door == "sklearn_predict":
        fitted = estimator().fit(clean_x, clean_y)
        with pytest.raises(InputError) as err:
            getattr(fitted, "predict_proba", fitted.predict)(x)
        return str(err.value)
    assert door == "predict_cli"
    assert _train(tmp_path, model, clean_x, clean_y, np.ones(N), tmp_path / "run") == 0
    capsys.readouterr()
    rows = _csv(tmp_path / "new.csv", x, header=not case.startswith("wrong_width"))
    out = tmp_path / "preds.csv"
    code = main(["predict", "--run_dir", str(tmp_path / "run"), "--input", str(rows), "--output", str(out)])
    message = _cli_error(capsys, code)
    assert not out.exists()
    return message


DOORS = {
    "fit": ["sklearn_fit", "train_py"],
    "predict": ["sklearn_predict", "predict_cli"],
}
#: (case, door) pairs where the door cannot receive the defect, with the reason
NOT_APPLICABLE = {
    ("label_outside", "sklearn_fit"): "the scikit-learn classifiers encode any labels",
    ("fractional_label", "sklearn_fit"): "scikit-learn reads 0.5 as a label of its own (a third class)",
    ("empty_declared_class", "sklearn_fit"): "scikit-learn's classes are the labels seen",
    ("negative_count_feature", "sklearn_fit"): (
        "scikit-learn's message for negative counts (its check_estimator requires "
        "'Negative values in data passed to MultinomialNB')"
    ),
    ("wrong_width_to_predict", "predict_cli"): (
        "the CLI reads a file: a width error is the file's layout (the message names the file "
        "and how its columns are matched: by name, or by position without a header)"
    ),
    ("wrong_width_to_predict", "sklearn_predict"): (
        "scikit-learn's message for a NumPy X of another width (its check_estimator "
        "requires 'X has 4 features, but ... is expecting 3'); a tensor gets the core's"
    ),
}


@pytest.mark.parametrize(
    "case, door",
    [(c, d) for c, (_, kind) in BAD.items() for d in DOORS[kind]],
)
def test_every_door_refuses_every_bad_input_with_one_message(tmp_path, capsys, case, door):
    if (case, door) in NOT_APPLICABLE:
        pytest.skip(NOT_APPLICABLE[(case, door)])
    reference = "python_fit" if BAD[case][1] == "fit" else "python_predict"
    expected = _door_message(reference, case, tmp_path, capsys)
    assert _door_message(door, case, tmp_path, capsys) == expected
