"""Every lecture figure runs end to end on a tiny budget and writes a real picture."""

import json

import matplotlib.image as mpimg
import numpy as np
import pytest

from torchglm import InputError
from torchglm.figures import FIGURES, main, make_figure


def _assert_png_has_content(path):
    img = mpimg.imread(path)
    assert img.ndim == 3 and min(img.shape[:2]) > 100
    rgb = img[..., :3].reshape(-1, 3)
    assert np.unique(rgb, axis=0).shape[0] > 10  # not all one colour


# What each figure must show, checked on the numbers it measured (quick budgets).
CLAIMS = {
    "gda_shared": lambda r: (
        r["gda_train_accuracy"] > 0.8 and abs(r["gda_train_accuracy"] - r["logistic_train_accuracy"]) < 0.05
    ),
    "qda_three_classes": lambda r: r["qda_train_accuracy"] >= r["lda_train_accuracy"] > 0.85,
    "basis_moons_xor": lambda r: (
        r["moons_rbf_test_accuracy"] >= 0.95 > 0.90 > r["moons_linear_test_accuracy"]
        and r["xor_rbf_test_accuracy"] >= 0.95 > 0.70 > r["xor_linear_test_accuracy"]
    ),
    "basis_feature_space": lambda r: r["train_accuracy_basis"] == 1.0 > 0.7 > r["train_accuracy_linear"],
    "separable_weight_norm": lambda r: (
        list(r["norm_ml_at"].values()) == sorted(r["norm_ml_at"].values())
        and r["final_norm_ml"] > 1.5 * r["final_norm_l2"]
    ),
    "solver_convergence": lambda r: r["n_iter"]["newton"] == r["n_iter"]["irls"] < r["n_iter"]["gd"],
    "bayes_predictive": lambda r: all(
        r[f"{k}_at_distance_2_far_along_boundary"] + 0.1
        < r[f"{k}_at_distance_2_near_data"]
        < r["map_at_distance_2"]
        for k in ("bayes", "variational", "MCMC")
    ),
}


def test_every_figure_has_a_claim():
    assert set(CLAIMS) == set(FIGURES)


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_quick_run_writes_a_png(name, tmp_path):
    result = make_figure(name, str(tmp_path), quick=True)
    assert result["png"] == str(tmp_path / f"{name}.png")
    _assert_png_has_content(result["png"])
    assert CLAIMS[name](result), result


def test_command_line_runs_one_figure_and_prints_its_numbers(tmp_path, capsys):
    assert main(["qda_three_classes", "--out", str(tmp_path), "--quick"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["qda_three_classes"]["png"].endswith("qda_three_classes.png")
    _assert_png_has_content(tmp_path / "qda_three_classes.png")


def test_unknown_figure_name_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="figure"):
        make_figure("nope", str(tmp_path))


def test_command_line_unknown_name_is_one_error_line(tmp_path, capsys):
    """``torchglm figures NAME`` with an unknown name: exit 2, one ``error:`` line listing the names."""
    from torchglm.training.entry import main as torchglm

    assert torchglm(["figures", "nope", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: figure: expected 'all' or one of"), lines
    assert all(name in lines[0] for name in FIGURES) and "got 'nope'" in lines[0]
    assert captured.out == "" and not list(tmp_path.iterdir())
