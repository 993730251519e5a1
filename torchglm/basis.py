"""Fixed basis functions ``phi(x)`` as ``nn.Module`` feature maps.

A linear model on ``phi(x)`` instead of ``x`` keeps every solver, penalty and
likelihood unchanged while its decision boundary in input space becomes
non-linear: "linear-separability in feature space does not imply
linear-separability in input space" (the lecture notes on probabilistic classification, §15;
Bishop PRML §3.1 and §4.3.1). Three families of maps are provided:

* :class:`GaussianRBF`  ``phi_j(x) = exp(-||x - mu_j||^2 / (2 s_j^2))`` with centers
  from k-means on the training data, on a grid, or given;
* :class:`Polynomial`   all monomials up to ``degree`` (scikit-learn
  ``PolynomialFeatures`` order, column for column);
* :class:`Sigmoidal`    ``phi_ij(x) = sigma((x_i - mu_ij) / s_i)`` per input feature.

Interface shared by all bases (what :mod:`torchglm.training` relies on):

* ``out_features(n_in) -> int`` gives the width of ``phi(x)`` for ``n_in`` input
  columns *before* fitting, so a model can be built first;
* ``fit(x_train) -> self`` fits the data-dependent parts (centers, widths) and is
  a no-op check for data-independent maps; ``requires_fit`` tells which;
* fitted centers and widths are buffers: ``state_dict()`` carries them, a fresh
  unfitted module loads them (the buffers are resized on load), and ``.to(device)``
  moves them. Fitting is deterministic given ``seed``.

Example:
    >>> x = torch.randn(200, 2, dtype=torch.float64)
    >>> rbf = GaussianRBF(n_centers=12, seed=0).fit(x)
    >>> rbf(x).shape, rbf.out_features(2)
    (torch.Size([200, 12]), 12)
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence, Union

import torch
from torch import nn

from ._validation import NotFittedError, check_features, check_positive, fail

__all__ = [
    "Basis",
    "GaussianRBF",
    "Polynomial",
    "Sigmoidal",
    "BASES",
    "get_basis",
    "kmeans",
]

# A sequence of rows (from a config file) or a tensor (from Python).
CentersArg = Union[str, Sequence[Sequence[float]]]


def kmeans(
    x: torch.Tensor, n_clusters: int, seed: int = 0, max_iter: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means with k-means++ seeding (Arthur & Vassilvitskii 2007).

    k-means++ draws the first center uniformly and each next one with probability
    proportional to ``D(x)^2``, the squared distance to the nearest chosen center;
    Lloyd's iterations then alternate assignment ``r_n = argmin_j ||x_n - mu_j||^2``
    and update ``mu_j = mean{x_n : r_n = j}`` (Bishop PRML 9.1) until the assignment
    stops changing. A cluster that empties keeps its previous center.

    Args:
        x: data, shape (n_samples, n_features).
        n_clusters: number of centers ``k`` (at most the number of distinct rows).
        seed: seed of the ``torch.Generator`` that drives the k-means++ draws.
        max_iter: maximum number of Lloyd iterations.

    Returns:
        ``(centers, labels)``: shapes (k, n_features) and (n_samples,).

    Raises:
        InputError: if ``n_clusters`` is not in ``[1, n_samples]``.
    """
    n = x.shape[0]
    if not isinstance(n_clusters, int) or not 1 <= n_clusters <= n:
        raise fail("n_clusters", f"an integer in [1, {n}] (the number of samples)", n_clusters)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    # Draws happen on the CPU generator (device given explicitly: Lightning's
    # configure_model runs under a default-device context) so that the centers are
    # the same on every device.
    first = int(torch.randint(n, (1,), generator=gen, device="cpu"))
    centers = [x[first]]
    d2 = ((x - x[first]) ** 2).sum(1)
    for _ in range(1, n_clusters):
        total = d2.sum()
        if float(total) == 0.0:
            raise fail("n_clusters", "at most the number of distinct rows", n_clusters)
        idx = int(torch.multinomial((d2 / total).cpu(), 1, generator=gen))
        centers.append(x[idx])
        d2 = torch.minimum(d2, ((x - x[idx]) ** 2).sum(1))
    mu = torch.stack(centers)
    labels = torch.cdist(x, mu).argmin(1)
    for _ in range(max_iter):
        counts = torch.bincount(labels, minlength=n_clusters).to(x.dtype)
        sums = torch.zeros_like(mu).index_add_(0, labels, x)
        mu = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], mu)
        new = torch.cdist(x, mu).argmin(1)
        if torch.equal(new, labels):
            break
        labels = new
    return mu, labels


class Basis(nn.Module):
    """Base class of fixed feature maps ``phi: R^d -> R^M``.

    Subclasses implement ``_features(x)`` (the basis functions proper) and
    ``_n_basis(n_in)``; this class appends the optional original features and
    constant column, keeps the fitted flag (a buffer, so checkpoints remember
    it) and resizes fitted buffers when a state dict is loaded into a fresh module.

    Args:
        include_input: append the original ``x`` columns after the basis functions.
        include_bias: append a constant column of ones (leave ``False`` when the
            model fits its own intercept).
    """

    #: True when ``fit`` learns something from the data (centers, widths).
    requires_fit: bool = False
    #: names of buffers whose shape is only known after ``fit``.
    _fitted_buffers: tuple[str, ...] = ()

    def __init__(self, include_input: bool = False, include_bias: bool = False):
        super().__init__()
        self.include_input = bool(include_input)
        self.include_bias = bool(include_bias)
        # The buffers travel with checkpoints; their Python mirrors keep forward()
        # free of device-to-host syncs.
        self.register_buffer("_fitted", torch.tensor(False))
        self.register_buffer("n_in", torch.tensor(-1))
        self._fitted_now, self._n_in_now = False, -1

    def _set_n_in(self, n_in: int) -> None:
        self.n_in.fill_(n_in)
        self._n_in_now = int(n_in)

    def _ready_without_fit(self) -> None:
        """Mark a basis that needs no data (given centers, polynomial) as usable."""
        self.requires_fit = False
        self._fitted.fill_(True)
        self._fitted_now = True

    # -- the interface -----------------------------------------------------------
    def out_features(self, n_in: int) -> int:
        """Width ``M`` of ``phi(x)`` for inputs with ``n_in`` columns."""
        if not isinstance(n_in, int) or n_in < 1:
            raise fail("n_in", "a positive integer", n_in)
        return self._n_basis(n_in) + (n_in if self.include_input else 0) + int(self.include_bias)

    def fit(self, x: torch.Tensor) -> "Basis":
        """Fit the data-dependent parts on training inputs ``x`` (n_samples, d); return self."""
        check_features("x", x)
        self._fit(x)
        self._set_n_in(x.shape[1])
        self._fitted.fill_(True)
        self._fitted_now = True
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``phi(x)``: shape (n_samples, out_features(d))."""
        if not self._fitted_now:
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: call fit(x_train) first")
        n_in = self._n_in_now
        if x.dim() != 2 or (n_in > 0 and x.shape[1] != n_in):
            raise fail(
                "x", f"a 2-D tensor with {n_in if n_in > 0 else 'd'} columns", f"shape {tuple(x.shape)}"
            )
        parts = [self._features(x)]
        if self.include_input:
            parts.append(x)
        if self.include_bias:
            parts.append(torch.ones_like(x[:, :1]))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    @property
    def is_fitted(self) -> bool:
        return self._fitted_now

    # -- subclass hooks ------------------------------------------------------------
    def _n_basis(self, n_in: int) -> int:
        raise NotImplementedError

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _fit(self, x: torch.Tensor) -> None:
        """Data-independent bases learn nothing; they only remember ``d``."""

    # -- checkpoints ---------------------------------------------------------------
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Fitted buffers have data-dependent shapes; an unfitted module holds empty
        # placeholders, so take the checkpoint's shapes before copying the values.
        for name in self._fitted_buffers:
            key = prefix + name
            if key in state_dict:
                ref = getattr(self, name)
                setattr(self, name, torch.empty_like(state_dict[key], device=ref.device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._fitted_now, self._n_in_now = bool(self._fitted), int(self.n_in)


def _as_tensor_rows(name: str, value) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.get_default_dtype())
    if t.dim() != 2 or t.shape[0] == 0:
        raise fail(name, "a 2-D array of shape (n_centers, n_features)", f"shape {tuple(t.shape)}")
    return t.clone()


def _grid_axes(x: torch.Tensor, n_per_axis: int, margin: float) -> list[torch.Tensor]:
    """``n_per_axis`` evenly spaced points per column over [min - m, max + m],
    ``m = margin * (max - min)``."""
    lo, hi = x.min(0).values, x.max(0).values
    pad = margin * (hi - lo)
    return [
        torch.linspace(float(a), float(b), n_per_axis, dtype=x.dtype, device=x.device)
        for a, b in zip(lo - pad, hi + pad)
    ]


class GaussianRBF(Basis):
    """Gaussian radial basis ``phi_j(x) = exp(-||x - mu_j||^2 / (2 s_j^2))``.

    The "Gaussian basis functions with centers shown by crosses" of the lecture notes on
    probabilistic classification, §15 (Bishop PRML §4.3.1, fig. 4.12); with enough centers a
    logistic model on ``phi(x)`` separates classes that are not linearly separable in ``x``
    (the moons and XOR problems).

    Args:
        n_centers: number of centers for ``centers="kmeans"``; the number *per
            input axis* for ``centers="grid"`` (``n_centers ** d`` in all).
        centers: ``"kmeans"`` (k-means++ seeded Lloyd on the training inputs),
            ``"grid"`` (a regular grid over the training range, widened by
            ``grid_margin``), or the centers themselves, shape (M, d).
        width: the scale ``s``: one number for all centers, one per center, or
            ``None`` for a data-driven choice: the distance from each center to
            its nearest other center (``per_center=True``) or the mean of those
            distances (one shared width).
        per_center: with ``width=None``, one width per center instead of a shared one.
        include_input: append the original features.
        include_bias: append a column of ones.
        seed: seed of the k-means++ initialization.
        grid_margin: fraction of the data range added on each side of the grid.

    Raises:
        InputError: on an unknown ``centers`` mode, non-positive widths, or
            given centers/widths of inconsistent shapes.

    Example:
        >>> from sklearn.datasets import make_moons
        >>> X, y = make_moons(200, noise=0.2, random_state=0)
        >>> phi = GaussianRBF(n_centers=20, seed=0).fit(torch.as_tensor(X))
        >>> phi(torch.as_tensor(X)).shape
        torch.Size([200, 20])
    """

    requires_fit = True
    _fitted_buffers = ("centers", "widths")

    def __init__(
        self,
        n_centers: int = 10,
        centers: CentersArg = "kmeans",
        width: Union[float, Sequence[float], None] = None,
        per_center: bool = False,
        include_input: bool = False,
        include_bias: bool = False,
        seed: int = 0,
        grid_margin: float = 0.0,
    ):
        given = not isinstance(centers, str)
        if given:
            c = _as_tensor_rows("centers", centers)
            if width is None:
                raise fail("width", "a number or one width per center when centers are given", None)
        elif centers not in ("kmeans", "grid"):
            raise fail("centers", "'kmeans', 'grid' or an (M, d) array of centers", repr(centers))
        if not given and (not isinstance(n_centers, int) or n_centers < 1):
            raise fail("n_centers", "a positive integer", n_centers)
        check_positive("grid_margin", grid_margin, allow_zero=True)
        super().__init__(include_input, include_bias)
        self.mode = "given" if given else centers
        self.n_centers = int(c.shape[0]) if given else int(n_centers)
        self.per_center = bool(per_center)
        self.seed = int(seed)
        self.grid_margin = float(grid_margin)
        self._width_arg = None if width is None else torch.as_tensor(width, dtype=torch.float64)
        if self._width_arg is not None:
            if self._width_arg.dim() > 1 or bool((self._width_arg <= 0).any()):
                raise fail("width", "a positive number or a 1-D array of positive widths", width)
        self.register_buffer("centers", torch.empty(0, 0))
        self.register_buffer("widths", torch.empty(0))
        if given:
            self._set(c, self._given_widths(c))
            self._set_n_in(c.shape[1])
            self._ready_without_fit()

    def _n_basis(self, n_in: int) -> int:
        return self.n_centers**n_in if self.mode == "grid" else self.n_centers

    def _given_widths(self, c: torch.Tensor) -> torch.Tensor:
        w = self._width_arg.to(dtype=c.dtype, device=c.device)
        if w.dim() == 1 and w.shape[0] != c.shape[0]:
            raise fail("width", f"one width per center ({c.shape[0]})", f"{w.shape[0]} widths")
        return w.expand(c.shape[0]).clone()

    def _set(self, c: torch.Tensor, w: torch.Tensor) -> None:
        self.centers = c
        self.widths = w

    def _fit(self, x: torch.Tensor) -> None:
        if self.mode == "given":
            if x.shape[1] != self.centers.shape[1]:
                raise fail("x", f"{self.centers.shape[1]} columns (the centers' dimension)", x.shape[1])
            return
        if self.mode == "kmeans":
            c, _ = kmeans(x, self.n_centers, seed=self.seed)
        else:
            axes = _grid_axes(x, self.n_centers, self.grid_margin)
            c = torch.cartesian_prod(*axes).reshape(-1, x.shape[1])
        if self._width_arg is not None:
            w = self._given_widths(c)
        elif c.shape[0] == 1:
            # One center: the data's RMS spread around it.
            w = ((x - c) ** 2).sum(1).mean().sqrt().reshape(1)
        else:
            d = torch.cdist(c, c)
            d.fill_diagonal_(float("inf"))
            nearest = d.min(1).values
            w = nearest if self.per_center else nearest.mean().expand(c.shape[0]).clone()
        if bool((w <= 0).any()):
            raise fail("centers", "distinct centers (a zero width would follow)", "coincident centers")
        self._set(c, w)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        c = self.centers.to(x.dtype)
        w = self.widths.to(x.dtype)
        # ||x - mu||^2 through cdist: no (n, M, d) intermediate.
        d2 = torch.cdist(x, c).square()
        return torch.exp(-0.5 * d2 / w.square())

    def extra_repr(self) -> str:
        return (
            f"n_centers={self.n_centers}, centers={self.mode!r}, per_center={self.per_center}, "
            f"include_input={self.include_input}, include_bias={self.include_bias}"
        )


class Polynomial(Basis):
    """All monomials ``prod_i x_i^{k_i}`` with ``sum_i k_i <= degree``.

    Columns come in scikit-learn ``PolynomialFeatures`` order: the constant (if
    ``include_bias``), then degree 1, 2, ... each in
    ``itertools.combinations_with_replacement`` order of the input indices
    (``combinations`` for ``interaction_only``), so coefficients can be compared
    column for column.

    Args:
        degree: maximal total degree (>= 1).
        interaction_only: only products of distinct features (no ``x_i^2``).
        include_bias: start with a column of ones (scikit-learn's default).

    Data-independent: ``fit`` is optional (it only pins the number of columns).

    Example:
        >>> Polynomial(2)(torch.tensor([[2.0, 3.0]]))
        tensor([[1., 2., 3., 4., 6., 9.]])
    """

    def __init__(self, degree: int = 2, interaction_only: bool = False, include_bias: bool = True):
        if not isinstance(degree, int) or degree < 1:
            raise fail("degree", "an integer >= 1", degree)
        super().__init__(include_input=False, include_bias=False)
        self._ready_without_fit()
        self.degree = degree
        self.interaction_only = bool(interaction_only)
        self.poly_bias = bool(include_bias)
        self._index_cache: dict[int, torch.Tensor] = {}

    def _combinations(self, n_in: int) -> list[tuple[int, ...]]:
        comb = itertools.combinations if self.interaction_only else itertools.combinations_with_replacement
        start = 0 if self.poly_bias else 1
        return [c for k in range(start, self.degree + 1) for c in comb(range(n_in), k)]

    def _n_basis(self, n_in: int) -> int:
        if self.interaction_only:
            n = sum(math.comb(n_in, k) for k in range(1, min(self.degree, n_in) + 1))
        else:
            n = math.comb(n_in + self.degree, self.degree) - 1
        return n + int(self.poly_bias)

    def _index(self, n_in: int) -> torch.Tensor:
        # Column j of phi is prod over the j-th row of indices into [1, x_1, ..., x_d]
        # (index 0 is the constant pad for monomials of lower degree).
        if n_in not in self._index_cache:
            rows = [[i + 1 for i in c] + [0] * (self.degree - len(c)) for c in self._combinations(n_in)]
            index = torch.tensor(rows, dtype=torch.long, device="cpu")
            self._index_cache[n_in] = index.reshape(-1, self.degree)
        return self._index_cache[n_in]

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        idx = self._index(x.shape[1]).to(x.device)
        padded = torch.cat([torch.ones_like(x[:, :1]), x], dim=1)
        return padded[:, idx].prod(-1)

    def extra_repr(self) -> str:
        return (
            f"degree={self.degree}, interaction_only={self.interaction_only}, include_bias={self.poly_bias}"
        )


class Sigmoidal(Basis):
    """Logistic-sigmoid basis ``phi_ij(x) = sigma((x_i - mu_ij) / s_i)``.

    Bishop PRML 3.1 (eq. 3.5) defines it for a scalar input; for ``d`` inputs
    each feature gets its own ``n_centers`` sigmoids, so ``M = d * n_centers``
    (columns ordered feature-major: all of ``x_1``'s, then ``x_2``'s, ...).

    Args:
        n_centers: sigmoids per input feature.
        centers: ``"grid"`` (evenly spaced over each feature's training range),
            ``"quantile"`` (at the training quantiles ``(j + 1/2) / n_centers``),
            or given locations, shape (d, n_centers).
        scale: the slope scale ``s`` (one number or one per feature); ``None``
            takes the spacing between adjacent centers of each feature.
        include_input: append the original features.
        include_bias: append a column of ones.

    Example:
        >>> s = Sigmoidal(n_centers=3, centers=[[-1.0, 0.0, 1.0]], scale=1.0)
        >>> s(torch.zeros(1, 1))
        tensor([[0.7311, 0.5000, 0.2689]])
    """

    requires_fit = True
    _fitted_buffers = ("locations", "scales")

    def __init__(
        self,
        n_centers: int = 5,
        centers: CentersArg = "grid",
        scale: Union[float, Sequence[float], None] = None,
        include_input: bool = False,
        include_bias: bool = False,
    ):
        given = not isinstance(centers, str)
        if given:
            loc = _as_tensor_rows("centers", centers)
        elif centers not in ("grid", "quantile"):
            raise fail("centers", "'grid', 'quantile' or a (d, n_centers) array", repr(centers))
        elif not isinstance(n_centers, int) or n_centers < 1:
            raise fail("n_centers", "a positive integer", n_centers)
        super().__init__(include_input, include_bias)
        self.mode = "given" if given else centers
        self.n_centers = int(loc.shape[1]) if given else int(n_centers)
        self._scale_arg = None if scale is None else torch.as_tensor(scale, dtype=torch.float64)
        if self._scale_arg is not None and (self._scale_arg.dim() > 1 or bool((self._scale_arg <= 0).any())):
            raise fail("scale", "a positive number or one positive scale per feature", scale)
        if given and self._scale_arg is None and self.n_centers < 2:
            raise fail("scale", "a number when a single location per feature is given", None)
        self.register_buffer("locations", torch.empty(0, 0))
        self.register_buffer("scales", torch.empty(0))
        if given:
            self.locations, self.scales = loc, self._scales_for(loc)
            self._set_n_in(loc.shape[0])
            self._ready_without_fit()

    def _n_basis(self, n_in: int) -> int:
        return n_in * self.n_centers

    def _scales_for(self, loc: torch.Tensor) -> torch.Tensor:
        d = loc.shape[0]
        if self._scale_arg is None:
            if loc.shape[1] < 2:
                raise fail("scale", "a number when n_centers is 1", None)
            return (loc[:, 1:] - loc[:, :-1]).abs().mean(1)
        s = self._scale_arg.to(dtype=loc.dtype, device=loc.device)
        if s.dim() == 1 and s.shape[0] != d:
            raise fail("scale", f"one scale per feature ({d})", f"{s.shape[0]} scales")
        return s.expand(d).clone()

    def _fit(self, x: torch.Tensor) -> None:
        if self.mode == "given":
            if x.shape[1] != self.locations.shape[0]:
                raise fail("x", f"{self.locations.shape[0]} columns (rows of centers)", x.shape[1])
            return
        if self.mode == "grid":
            loc = torch.stack(_grid_axes(x, self.n_centers, 0.0))
        else:
            q = (torch.arange(self.n_centers, dtype=x.dtype, device=x.device) + 0.5) / self.n_centers
            loc = torch.quantile(x, q, dim=0).T.contiguous()
        scales = self._scales_for(loc)
        if bool((scales <= 0).any()):
            raise fail(
                "x",
                "features that vary on the training data (a zero scale would follow)",
                "a constant column",
            )
        self.locations, self.scales = loc, scales

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        loc = self.locations.to(x.dtype)
        s = self.scales.to(x.dtype)
        return torch.sigmoid((x[:, :, None] - loc[None]) / s[None, :, None]).flatten(1)

    def extra_repr(self) -> str:
        return f"n_centers={self.n_centers}, centers={self.mode!r}"


#: registry of basis maps by name (configs may also give a ``class_path``).
BASES: dict[str, type[Basis]] = {
    "rbf": GaussianRBF,
    "polynomial": Polynomial,
    "sigmoidal": Sigmoidal,
}


def get_basis(name: str, **kwargs) -> Basis:
    """Build a basis from its registry name and constructor arguments."""
    if name not in BASES:
        raise fail("basis", f"one of {sorted(BASES)}", repr(name))
    return BASES[name](**kwargs)
