"""Built-in datasets that need no download.

scikit-learn's shipped tables (breast_cancer, iris, wine, digits, diabetes),
seeded synthetic generators (Gaussian classes, moons, XOR), the Rotten Tomatoes
reviews and the eleven NIST StRD least squares problems (``nist_<name>``). Every entry of
:data:`DATASETS` is a function ``(**options) -> Dataset``; adding a dataset is
one line::

    DATASETS["my_counts"] = my_generator   # my_generator(seed=0, ...) -> Dataset
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import numpy as np

from .._validation import fail
from .dataset import Dataset, Task
from .movie_reviews import movie_review_counts
from .nist import NIST_LLS, nist_dataset
from .simulate import glm_dataset

__all__ = ["DATASETS", "load_dataset", "gaussian_classes", "moons", "xor"]


def _sklearn(loader: str, task: Task) -> Callable[[], Dataset]:
    def load() -> Dataset:
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, loader)()
        n_classes = int(np.max(bunch.target)) + 1 if task == "classification" else None
        return Dataset(
            np.asarray(bunch.data, dtype=np.float64),
            np.asarray(bunch.target),
            task,
            n_classes,
            [str(n) for n in bunch.feature_names],
            f"scikit-learn {loader}()",
        )

    load.__doc__ = f"scikit-learn's shipped ``{loader}()`` ({task})."
    return load


def gaussian_classes(
    n_samples: int = 400,
    n_classes: int = 2,
    n_features: int = 2,
    means: Sequence[Sequence[float]] | None = None,
    covariances: Sequence[Sequence[Sequence[float]]] | None = None,
    separation: float = 2.0,
    shared_covariance: bool = True,
    priors: Sequence[float] | None = None,
    seed: int = 0,
) -> Dataset:
    """Classes drawn from Gaussians ``x | C_k ~ N(mu_k, Sigma_k)`` (the lecture notes on
    probabilistic classification, §3; Bishop PRML §4.2.1).

    With one shared covariance the Bayes boundary is linear (logistic / softmax
    regression is the right model); with different covariances it is quadratic.

    Args:
        n_samples: total number of samples.
        n_classes: K.
        n_features: d.
        means: (K, d) class means; default: the K means evenly spaced on a circle
            of radius ``separation`` in the first two coordinates.
        covariances: (K, d, d) class covariances; default: a fixed correlated
            matrix for every class when ``shared_covariance``, else class-specific
            scalings of it.
        separation: radius of the default means.
        shared_covariance: see ``covariances``.
        priors: class probabilities (default uniform).
        seed: random seed.
    """
    if n_classes < 2 or n_features < 1 or n_samples < n_classes:
        raise fail(
            "gaussian_classes",
            "n_classes >= 2, n_features >= 1, n_samples >= n_classes",
            (n_samples, n_classes, n_features),
        )
    rng = np.random.default_rng(seed)
    if means is None:
        angle = 2 * np.pi * np.arange(n_classes) / n_classes
        mu = np.zeros((n_classes, n_features))
        mu[:, 0] = separation * np.cos(angle)
        if n_features > 1:
            mu[:, 1] = separation * np.sin(angle)
    else:
        mu = np.asarray(means, dtype=np.float64)
    if covariances is None:
        base = 0.5 * np.eye(n_features) + 0.5 * np.full((n_features, n_features), 0.6)
        np.fill_diagonal(base, 1.0)
        scales = (
            np.ones(n_classes)
            if shared_covariance
            else 0.4 + 1.2 * np.arange(n_classes) / max(n_classes - 1, 1)
        )
        cov = np.stack([s * base for s in scales])
    else:
        cov = np.asarray(covariances, dtype=np.float64)
    if mu.shape != (n_classes, n_features) or cov.shape != (n_classes, n_features, n_features):
        raise fail(
            "gaussian_classes means/covariances",
            f"shapes ({n_classes}, {n_features}) and ({n_classes}, {n_features}, {n_features})",
            (mu.shape, cov.shape),
        )
    p = np.full(n_classes, 1.0 / n_classes) if priors is None else np.asarray(priors, dtype=np.float64)
    y = rng.choice(n_classes, size=n_samples, p=p / p.sum())
    x = np.empty((n_samples, n_features))
    for k in range(n_classes):
        idx = np.flatnonzero(y == k)
        x[idx] = rng.multivariate_normal(mu[k], cov[k], size=idx.size)
    kind = "shared" if covariances is None and shared_covariance else "given/different"
    return Dataset(
        x,
        y,
        "classification",
        n_classes,
        description=f"{n_classes} Gaussian classes, {kind} covariance, seed {seed}",
    )


def moons(n_samples: int = 400, noise: float = 0.2, seed: int = 0) -> Dataset:
    """Two interleaving half circles (scikit-learn ``make_moons``, the example of the lecture notes
    on probabilistic classification, §15)."""
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=n_samples, noise=noise, random_state=seed)
    return Dataset(x, y, "classification", 2, description=f"moons, noise {noise}, seed {seed}")


def xor(n_samples: int = 400, noise: float = 0.3, seed: int = 0) -> Dataset:
    """XOR: four Gaussian blobs at (+-1, +-1), class 1 where the signs differ.

    No linear boundary separates the classes better than chance; a basis
    expansion (e.g. the product ``x0 x1``) does.
    """
    rng = np.random.default_rng(seed)
    corner = rng.choice([-1.0, 1.0], size=(n_samples, 2))
    x = corner + noise * rng.standard_normal((n_samples, 2))
    y = (corner[:, 0] != corner[:, 1]).astype(np.int64)
    return Dataset(x, y, "classification", 2, description=f"xor, noise {noise}, seed {seed}")


#: Registry of built-in dataset names to loaders ``(**options) -> Dataset``.
DATASETS: dict[str, Callable[..., Dataset]] = {
    "breast_cancer": _sklearn("load_breast_cancer", "classification"),
    "iris": _sklearn("load_iris", "classification"),
    "wine": _sklearn("load_wine", "classification"),
    "digits": _sklearn("load_digits", "classification"),
    "diabetes": _sklearn("load_diabetes", "regression"),
    "gaussians2": partial(gaussian_classes, n_classes=2),
    "gaussians3": partial(gaussian_classes, n_classes=3),
    "moons": moons,
    "xor": xor,
}

# Data simulated from each single-output GLM family (``glm_poisson`` etc.; options:
# link, n_samples, n_features, dispersion, seed).
DATASETS.update(
    {
        f"glm_{f}": partial(glm_dataset, f)
        for f in ("gaussian", "bernoulli", "binomial", "poisson", "gamma", "exponential")
    }
)


def _movie_reviews(min_count: int = 2, max_size: int | None = None, include_plots: bool = False) -> Dataset:
    """Real Rotten Tomatoes review snippets (fresh/rotten) as bag-of-words counts
    (shipped in ``torchglm/data/movie_reviews``; provenance in its README)."""
    return movie_review_counts(min_count, max_size, include_plots)


DATASETS["movie_reviews"] = _movie_reviews
# The NIST StRD linear least squares problems with certified values (``nist_filip``,
# ``nist_longley``, ...; :mod:`torchglm.data.nist`).
DATASETS.update({f"nist_{name.lower()}": partial(nist_dataset, name) for name in NIST_LLS})


def load_dataset(name: str, **options) -> Dataset:
    """Load a built-in dataset by name (see :data:`DATASETS`).

    Raises:
        InputError: unknown name or options the loader does not take.
    """
    if name not in DATASETS:
        raise fail(
            "source", f"a data file path or a built-in dataset (one of {sorted(DATASETS)})", repr(name)
        )
    try:
        return DATASETS[name](**options)
    except TypeError as err:
        raise fail(
            f"dataset_options for '{name}'", "options the dataset's loader accepts", str(err)
        ) from None
