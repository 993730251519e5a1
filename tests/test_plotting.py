"""Plotting helpers: the numbers behind the pictures are checked against references,
and every figure is rendered and read back as pixels."""

import matplotlib.image as mpimg
import numpy as np
import pytest
import torch
from sklearn.calibration import calibration_curve

from torchglm import InputError, LogisticRegression, SoftmaxRegression
from torchglm.basis import GaussianRBF
from torchglm.plotting import (
    calibration_bins,
    class_conditional_densities,
    decision_regions,
    input_grid,
    posterior_on_grid,
    reliability_diagram,
    save_figure,
    solver_convergence,
    weight_norm_paths,
)


def _assert_png_has_content(path):
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    rgb = img[..., :3].reshape(-1, 3)
    assert np.unique(rgb, axis=0).shape[0] > 10  # not one colour (nor a handful)


def _data(seed=0, n=80):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 2, generator=g) + 2.0 * y[:, None] - 1.0
    return x, y


def _model_with_weights(w, b):
    m = LogisticRegression(2)
    with torch.no_grad():
        m.linear.weight.copy_(torch.tensor([w]))
        m.linear.bias.fill_(b)
    m.mark_fitted()
    return m


@pytest.mark.parametrize("n_bins", [5, 10])
def test_calibration_bins_match_sklearn(n_bins):
    g = torch.Generator().manual_seed(0)
    p = torch.rand(500, generator=g)
    y = (torch.rand(500, generator=g) < p**2).long()
    conf, freq, counts = calibration_bins(y, p, n_bins)
    ref_freq, ref_conf = calibration_curve(y.numpy(), p.numpy(), n_bins=n_bins)
    np.testing.assert_allclose(conf, ref_conf, rtol=1e-12)
    np.testing.assert_allclose(freq, ref_freq, rtol=1e-12)
    assert counts.sum() == 500


def test_calibration_bins_multiclass_use_confidence_and_accuracy():
    proba = torch.tensor([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    y = torch.tensor([0, 2, 0, 2])
    conf, freq, counts = calibration_bins(y, proba, n_bins=10)
    # bins (0.5,0.6] -> 0.6 hit; (0.6,0.7] -> 0.7 miss; (0.7,0.8] -> 0.8 hit; (0.8,0.9] -> 0.9 hit
    np.testing.assert_allclose(conf, [0.6, 0.7, 0.8, 0.9])
    np.testing.assert_allclose(freq, [1.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(counts, [1, 1, 1, 1])


def test_posterior_on_grid_is_the_models_sigmoid():
    m = _model_with_weights([1.0, -2.0], 0.5)
    x, _ = _data()
    pts, xx, yy = input_grid(x, resolution=7)
    p = posterior_on_grid(m, pts)
    eta = pts[:, 0] - 2 * pts[:, 1] + 0.5
    np.testing.assert_allclose(p[:, 1], torch.sigmoid(eta).numpy(), rtol=1e-13)
    np.testing.assert_allclose(p.sum(1), 1.0)
    assert xx.shape == (7, 7) and pts.shape == (49, 2)
    np.testing.assert_allclose(pts[:, 0].numpy(), xx.ravel())


def test_decision_regions_binary_with_basis_and_multiclass(tmp_path):
    x, y = _data()
    rbf = GaussianRBF(5, seed=0).fit(x)
    m = LogisticRegression(5)
    with torch.no_grad():
        m.linear.weight.copy_(torch.linspace(-2, 2, 5)[None])
    m.mark_fitted()
    _assert_png_has_content(
        save_figure(decision_regions(m, x, y, basis=rbf, resolution=40), tmp_path / "binary.png")
    )
    s = SoftmaxRegression(2, 3)
    with torch.no_grad():
        s.linear.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]]))
    s.mark_fitted()
    y3 = torch.arange(80) % 3
    _assert_png_has_content(save_figure(decision_regions(s, x, y3, resolution=40), tmp_path / "three.png"))


def test_decision_regions_refuses_non_planar_inputs():
    with pytest.raises(InputError, match="x"):
        decision_regions(LogisticRegression(3), torch.zeros(5, 3), torch.zeros(5))


def test_class_conditional_densities_and_reliability(tmp_path):
    x, y = _data()
    means = torch.tensor([[-1.0, -1.0], [1.0, 1.0]])

    def log_density(p):
        return -0.5 * ((p[:, None, :] - means[None]) ** 2).sum(-1) - np.log(2 * np.pi)

    _assert_png_has_content(
        save_figure(class_conditional_densities(log_density, x, y, resolution=40), tmp_path / "dens.png")
    )
    m = _model_with_weights([1.0, 1.0], 0.0)
    fig = reliability_diagram(y, {"a": m.predict_proba(x), "b": torch.sigmoid(3 * (x[:, 0] + x[:, 1]))})
    _assert_png_has_content(save_figure(fig, tmp_path / "rel.png"))


def test_solver_convergence_and_weight_norms(tmp_path):
    hist = {
        "gd": [{"loss": 1.0 + 0.5**k, "grad_norm": 0.5**k} for k in range(30)],
        "newton": [{"loss": 1.0 + 10.0 ** (-(2**k)), "grad_norm": 10.0 ** (-(2**k))} for k in range(5)],
    }
    _assert_png_has_content(save_figure(solver_convergence(hist, optimum=1.0), tmp_path / "conv.png"))
    with pytest.raises(InputError, match="grad_norm"):
        solver_convergence({"x": [{"loss": 1.0}]})
    paths = {"no L2": np.log1p(np.arange(100)), "L2": 1 - np.exp(-np.arange(100) / 10)}
    _assert_png_has_content(save_figure(weight_norm_paths(paths), tmp_path / "w.png"))


def test_palette_png_looks_like_the_full_colour_one(tmp_path):
    x, y = _data()
    m = _model_with_weights([1.0, -0.5], 0.2)
    full = mpimg.imread(
        save_figure(decision_regions(m, x, y, resolution=60), tmp_path / "a.png", palette=False)
    )[..., :3]
    small = mpimg.imread(save_figure(decision_regions(m, x, y, resolution=60), tmp_path / "b.png"))[..., :3]
    assert full.shape == small.shape
    assert np.abs(full - small).mean() < 0.01
    assert (tmp_path / "b.png").stat().st_size < (tmp_path / "a.png").stat().st_size


def test_importing_the_plotting_modules_keeps_the_users_backend():
    """No ``matplotlib.use`` at import (it changed a notebook's backend): figures are
    made on their own Figure objects, never through pyplot."""
    import subprocess
    import sys

    code = (
        "import matplotlib; import torchglm.plotting, torchglm.figures, "
        "torchglm.training.plot_callbacks; print(matplotlib.get_backend())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "MPLBACKEND": "svg"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "svg"
