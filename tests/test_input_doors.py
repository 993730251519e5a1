"""One input gate for every door: the same bad rows give the same ``InputError`` message
through ``model.fit``, ``train.py`` (the data module), and the scikit-learn wrappers'
``fit`` and ``score`` (all of them call :mod:`torchglm._validation`)."""

import numpy as np
import pytest
import torch

from torchglm import InputError
from torchglm.models import GeneralizedLinearModel
from torchglm.sklearn import GLMRegressor, LogisticRegression
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
