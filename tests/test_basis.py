"""Fixed basis functions: closed forms, scikit-learn parity, determinism, checkpoints,
and the claim of the lecture notes on probabilistic classification, §15, that a Gaussian basis makes
moons and XOR linearly separable."""

import io
import itertools

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs, make_moons
from sklearn.preprocessing import PolynomialFeatures

from torchglm import InputError, LogisticRegression, NotFittedError
from torchglm.basis import BASES, GaussianRBF, Polynomial, Sigmoidal, get_basis, kmeans
from torchglm.solvers import fit

from data_util import gaussian_design

# One data-dependent configuration per registered basis (the registry drives the tests).
CONFIGS = {
    "rbf": [
        dict(n_centers=7, seed=3),
        dict(n_centers=4, centers="grid", per_center=True, include_input=True, include_bias=True),
        dict(n_centers=5, per_center=True, grid_margin=0.1),
    ],
    "polynomial": [dict(degree=3), dict(degree=2, interaction_only=True, include_bias=False)],
    "sigmoidal": [dict(n_centers=4), dict(n_centers=3, centers="quantile", include_input=True)],
}
CASES = [(name, kw) for name in BASES for kw in CONFIGS[name]]


def test_every_registered_basis_has_a_config():
    assert set(CONFIGS) == set(BASES)


@pytest.mark.parametrize("name,kw", CASES)
def test_out_features_matches_forward_width(name, kw):
    for d in (1, 2, 3):
        basis = get_basis(name, **kw)
        n_out = basis.out_features(d)  # known before fitting
        x = gaussian_design(40, d)
        assert basis.fit(x)(x).shape == (40, n_out)


@pytest.mark.parametrize("name,kw", CASES)
def test_fit_is_deterministic(name, kw):
    x = gaussian_design(60, 2)
    a = get_basis(name, **kw).fit(x)
    b = get_basis(name, **kw).fit(x)
    assert torch.equal(a(x), b(x))


def test_kmeans_seed_changes_the_initialization_but_not_a_clear_optimum():
    x = gaussian_design(200, 2)
    c0, _ = kmeans(x, 9, seed=0)
    c1, _ = kmeans(x, 9, seed=1)
    assert not torch.equal(c0, c1)  # unstructured data: different local optima
    xb = torch.as_tensor(make_blobs(300, centers=3, cluster_std=0.3, random_state=0)[0])
    b0, _ = kmeans(xb, 3, seed=0)
    b1, _ = kmeans(xb, 3, seed=5)
    torch.testing.assert_close(b0[b0[:, 0].argsort()], b1[b1[:, 0].argsort()], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,kw", CASES)
def test_state_dict_round_trip_into_a_fresh_module(name, kw):
    x = gaussian_design(60, 2)
    fitted = get_basis(name, **kw).fit(x)
    buf = io.BytesIO()
    torch.save(fitted.state_dict(), buf)
    buf.seek(0)
    fresh = get_basis(name, **kw)  # unfitted: empty placeholders for centers/widths
    fresh.load_state_dict(torch.load(buf))
    assert fresh.is_fitted
    x_new = gaussian_design(25, 2, seed=9)
    assert torch.equal(fresh(x_new), fitted(x_new))
    with pytest.raises(InputError, match="2 columns"):  # the loaded module remembers d
        fresh(gaussian_design(5, 3))


@pytest.mark.parametrize("name,kw", CASES)
def test_fit_and_transform_follow_the_data_under_a_default_device_context(name, kw):
    # Lightning's configure_model (where the task fits the basis) runs under
    # `with torch.device(...)`; on a GPU run a CPU generator draw without an explicit
    # device failed there. A "meta" default device exposes any tensor created
    # without following the data.
    x = gaussian_design(60, 2)
    ref = get_basis(name, **kw).fit(x)(x)
    basis = get_basis(name, **kw)
    with torch.device("meta"):
        out = basis.fit(x)(x)
    assert out.device == x.device
    assert torch.equal(out, ref)


def test_unfitted_data_dependent_basis_refuses_to_transform():
    with pytest.raises(NotFittedError):
        GaussianRBF(3)(gaussian_design(60, 2))
    with pytest.raises(NotFittedError):
        Sigmoidal(3)(gaussian_design(60, 2))


def test_wrong_inputs_name_the_argument():
    with pytest.raises(InputError, match="centers"):
        GaussianRBF(3, centers="random")
    with pytest.raises(InputError, match="width"):
        GaussianRBF(centers=[[0.0, 0.0]])
    with pytest.raises(InputError, match="width"):
        GaussianRBF(centers=[[0.0, 0.0], [1.0, 1.0]], width=[1.0, 2.0, 3.0])
    with pytest.raises(InputError, match="n_clusters"):
        GaussianRBF(100).fit(gaussian_design(10, 2))
    with pytest.raises(InputError, match="degree"):
        Polynomial(0)
    with pytest.raises(InputError, match="x"):
        GaussianRBF(3).fit(gaussian_design(60, 2))(gaussian_design(5, 3))
    with pytest.raises(InputError, match="basis"):
        get_basis("fourier")


# -- closed forms and references -----------------------------------------------------


@pytest.mark.parametrize("n_in", [1, 2, 4])
@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("interaction_only", [False, True])
@pytest.mark.parametrize("include_bias", [False, True])
def test_polynomial_matches_sklearn_column_for_column(n_in, degree, interaction_only, include_bias):
    x = gaussian_design(30, n_in, seed=1)
    ref = PolynomialFeatures(degree, interaction_only=interaction_only, include_bias=include_bias).fit(
        x.numpy()
    )
    if ref.n_output_features_ == 0:
        pytest.skip("scikit-learn produces no column here")
    basis = Polynomial(degree, interaction_only, include_bias)
    assert basis.out_features(n_in) == ref.n_output_features_
    np.testing.assert_allclose(basis(x).numpy(), ref.transform(x.numpy()), rtol=1e-13, atol=1e-13)


def test_rbf_given_centers_closed_form():
    c = np.array([[0.0, 0.0], [1.0, -1.0], [2.0, 0.5]])
    s = np.array([0.5, 1.0, 2.0])
    x = gaussian_design(20, 2)
    got = GaussianRBF(centers=c.tolist(), width=s.tolist())(x).numpy()
    d2 = ((x.numpy()[:, None, :] - c[None]) ** 2).sum(-1)
    np.testing.assert_allclose(got, np.exp(-d2 / (2 * s**2)), rtol=1e-13)


def test_rbf_default_widths_are_nearest_center_distances():
    x = gaussian_design(100, 2)
    per = GaussianRBF(6, seed=0, per_center=True).fit(x)
    shared = GaussianRBF(6, seed=0).fit(x)
    c = per.centers.numpy()
    d = np.sqrt(((c[:, None] - c[None]) ** 2).sum(-1)) + np.diag(np.full(6, np.inf))
    np.testing.assert_allclose(per.widths.numpy(), d.min(1), rtol=1e-13)
    np.testing.assert_allclose(shared.widths.numpy(), np.full(6, d.min(1).mean()), rtol=1e-13)


def test_rbf_grid_centers_span_the_training_range():
    x = gaussian_design(50, 2)
    rbf = GaussianRBF(3, centers="grid").fit(x)
    lo, hi = x.min(0).values.numpy(), x.max(0).values.numpy()
    axes = [np.linspace(lo[i], hi[i], 3) for i in range(2)]
    expected = np.array(list(itertools.product(*axes)))
    np.testing.assert_allclose(rbf.centers.numpy(), expected, rtol=1e-13)


def test_kmeans_matches_sklearn_on_separated_blobs():
    xb, _ = make_blobs(400, centers=4, cluster_std=0.5, random_state=1)
    ours, labels = kmeans(torch.as_tensor(xb), 4, seed=0)
    ref = KMeans(4, n_init=10, random_state=0).fit(xb)
    order = lambda c: c[np.lexsort(c.T[::-1])]
    np.testing.assert_allclose(order(ours.numpy()), order(ref.cluster_centers_), atol=1e-10)
    inertia = ((xb - ours.numpy()[labels.numpy()]) ** 2).sum()
    assert inertia == pytest.approx(ref.inertia_, rel=1e-10)


def test_sigmoidal_closed_form():
    loc = [[-1.0, 0.0, 1.0], [0.0, 2.0, 4.0]]
    x = gaussian_design(10, 2)
    got = Sigmoidal(centers=loc)(x).numpy()  # scale = center spacing: 1 and 2
    xs = x.numpy()
    ref = np.concatenate(
        [
            1 / (1 + np.exp(-(xs[:, [0]] - np.array(loc[0])) / 1.0)),
            1 / (1 + np.exp(-(xs[:, [1]] - np.array(loc[1])) / 2.0)),
        ],
        axis=1,
    )
    np.testing.assert_allclose(got, ref, rtol=1e-13)


# -- a Gaussian basis makes the classes separable (lecture notes §15; PRML §4.3.1) ---


def _xor(n, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 2, (n, 2), generator=g) * 2 - 1
    return s + 0.4 * torch.randn(n, 2, generator=g), (s[:, 0] * s[:, 1] < 0).long()


def _moons(n, seed):
    x, y = make_moons(n, noise=0.2, random_state=seed)
    return torch.as_tensor(x), torch.as_tensor(y)


def _fit(model, x, y):
    result = fit(model, x, y, solver="newton")  # mean NLL + (l2/2)||w||^2
    assert result.converged
    return model


@pytest.mark.parametrize("data", [_moons, _xor])
def test_rbf_basis_separates_what_a_linear_model_cannot(data):
    x, y = data(400, 0)
    x_test, y_test = data(1000, 1)
    linear = _fit(LogisticRegression(2, l2=1e-3), x, y)
    rbf = GaussianRBF(16, seed=0).fit(x)
    model = _fit(LogisticRegression(rbf.out_features(2), l2=1e-3), rbf(x), y)
    acc_linear = (linear.predict(x_test) == y_test).double().mean()
    acc_rbf = (model.predict(rbf(x_test)) == y_test).double().mean()
    assert acc_linear < 0.90
    assert acc_rbf >= 0.95
