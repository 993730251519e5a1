"""Warnings point at the caller's line, not inside torchglm, however deep in
the package they arise (solvers, Naive Bayes, inference, the scikit-learn wrappers)."""

import warnings

import torch

from torchglm import ConvergenceWarning, LogisticRegression, SeparationWarning
from torchglm.solvers import fit

HERE = __file__


def _caught(call, category):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    hits = [w for w in caught if issubclass(w.category, category)]
    assert hits, [str(w.message) for w in caught]
    return hits


def test_solver_warnings_point_at_the_caller():
    x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    for w in _caught(
        lambda: fit(LogisticRegression(1, dtype=torch.float64), x, y, solver="newton"), SeparationWarning
    ):
        assert w.filename == HERE, w.filename
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(200, 3, generator=g, dtype=torch.float64)
    ys = (torch.rand(200, generator=g, dtype=torch.float64) < torch.sigmoid(xs[:, 0])).long()
    for w in _caught(
        lambda: fit(LogisticRegression(3, dtype=torch.float64), xs, ys, solver="gd", max_iter=2),
        ConvergenceWarning,
    ):
        assert w.filename == HERE, w.filename
    # the model's own fit method: still the caller's line
    m = LogisticRegression(3, dtype=torch.float64)
    for w in _caught(lambda: m.fit(xs, ys, solver="gd", max_iter=2), ConvergenceWarning):
        assert w.filename == HERE, w.filename


def test_generative_and_sklearn_warnings_point_at_the_caller():
    from torchglm import NumericalWarning
    from torchglm.sklearn import GaussianNB

    x = torch.zeros(6, 2, dtype=torch.float64)
    x[:3, 0] = 1.0  # feature 1 constant in every class: zero variance
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    for w in _caught(lambda: GaussianNB(var_smoothing=0.0).fit(x.numpy(), y.numpy()), NumericalWarning):
        assert w.filename == HERE, w.filename
