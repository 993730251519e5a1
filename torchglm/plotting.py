"""The pictures people look at: decision regions, posteriors, class-conditional
densities, calibration, and solver convergence.

Every function draws on a :class:`matplotlib.figure.Figure` made directly (not
through ``pyplot``, so importing this module never changes a notebook's backend and
no figure is kept by pyplot's registry; saving renders with Agg), returns the
:class:`matplotlib.figure.Figure` (so a caller can log it to TensorBoard with
``SummaryWriter.add_figure``) and leaves saving to :func:`save_figure`. Models are
used only through ``predict_proba(x)``: p(C_1|x) of shape (n,) for binary models,
class probabilities (n, K) otherwise; an optional fixed ``basis`` is applied first,
``predict_proba(basis(x))``.
"""

from __future__ import annotations

import io
import os
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from PIL import Image  # (a matplotlib dependency)

from ._validation import fail

__all__ = [
    "CLASS_COLORS",
    "save_figure",
    "subplots",
    "input_grid",
    "posterior_on_grid",
    "decision_regions",
    "class_conditional_densities",
    "calibration_bins",
    "reliability_diagram",
    "solver_convergence",
    "weight_norm_paths",
]

#: one colour per class label (C_0 blue, C_1 red, ...).
CLASS_COLORS = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown")
#: default resolution of saved PNGs (small files for the repository).
DPI = 90


def save_figure(
    fig: Figure, path: str | os.PathLike, dpi: int = DPI, close: bool = True, palette: bool = True
) -> str:
    """Write ``fig`` as a PNG (creating parent directories); return the path.

    ``palette`` stores it with a 256-colour palette (Pillow's median cut, no
    dithering): heat maps come out about 3.5 times smaller, with no visible change.
    """
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if palette:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        buf.seek(0)
        with Image.open(buf) as img:
            img.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
                path, optimize=True
            )
    else:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    if close:
        fig.clear()  # not pyplot's: nothing else holds it
    return path


def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, **kwargs):
    """``(fig, axes)`` like ``pyplot.subplots``, on a :class:`Figure` of its own (no
    pyplot: the caller's backend is untouched and nothing is registered to close)."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def _axes(ax, figsize=(5.0, 4.2)):
    if ax is None:
        fig = Figure(figsize=figsize)
        return fig, fig.subplots()
    return ax.figure, ax


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _check_2d(x: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] != 2:
        raise fail("x", "2-D inputs of shape (n_samples, 2) to draw in the plane", tuple(x.shape))


def input_grid(
    x: torch.Tensor, resolution: int = 200, margin: float = 0.25, limits: Sequence[float] | None = None
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """A ``resolution x resolution`` grid over the data range widened by ``margin``
    (a fraction of the range), or over ``limits = (x0_min, x0_max, x1_min, x1_max)``.

    Returns:
        ``(points, xx, yy)``: the grid as a (resolution^2, 2) tensor on ``x``'s
        device/dtype, and the two coordinate arrays of shape (resolution, resolution).
    """
    _check_2d(x)
    if limits is None:
        lo, hi = _numpy(x.min(0).values), _numpy(x.max(0).values)
        pad = margin * (hi - lo)
        limits = (lo[0] - pad[0], hi[0] + pad[0], lo[1] - pad[1], hi[1] + pad[1])
    xs = np.linspace(limits[0], limits[1], resolution)
    ys = np.linspace(limits[2], limits[3], resolution)
    xx, yy = np.meshgrid(xs, ys)
    pts = torch.as_tensor(np.stack([xx.ravel(), yy.ravel()], 1), dtype=x.dtype, device=x.device)
    return pts, xx, yy


@torch.no_grad()
def posterior_on_grid(model, points: torch.Tensor, basis: Callable | None = None) -> np.ndarray:
    """``predict_proba`` on grid points as an (n, K) array (binary models give K = 2)."""
    feats = basis(points) if basis is not None else points
    p = _numpy(model.predict_proba(feats))
    return np.stack([1 - p, p], 1) if p.ndim == 1 else p


def _scatter(ax, x, y, n_classes: int, s: float = 14, alpha: float = 1.0) -> None:
    # Label k is class C_k (binary models give p(C_1|x), as in the GLM docstrings).
    x, y = _numpy(x), _numpy(y).astype(int)
    for k in range(n_classes):
        m = y == k
        ax.scatter(
            x[m, 0],
            x[m, 1],
            s=s,
            c=CLASS_COLORS[k % len(CLASS_COLORS)],
            edgecolors="k",
            linewidths=0.4,
            alpha=alpha,
            label=f"$C_{k}$",
        )


def decision_regions(
    model,
    x: torch.Tensor,
    y: torch.Tensor,
    basis: Callable | None = None,
    ax=None,
    resolution: int = 200,
    margin: float = 0.25,
    limits: Sequence[float] | None = None,
    title: str | None = None,
    colorbar: bool = True,
    levels: Sequence[float] = (0.5,),
) -> Figure:
    """Decision regions and posterior of a classifier on 2-D inputs, with the data.

    Binary models: a heat map of ``p(C_1|x)`` (blue 0 to red 1) with the boundary
    ``p(C_1|x) = 1/2`` in black. ``K > 2`` classes: each grid point is coloured by the
    posterior-weighted mixture of the class colours ``sum_k p(C_k|x) c_k``, so pure
    regions are saturated and uncertain ones blend; the boundaries are the zero sets
    of ``p_k - max_{j != k} p_j`` (the lecture notes on probabilistic classification, §3: "posterior
    distribution of classes, with boundary surfaces").

    Args:
        model: anything with ``predict_proba`` (a GLM, a generative classifier).
        x: training inputs (n, 2), drawn as points.
        y: integer labels (n,).
        basis: optional feature map applied before the model.
        ax: draw into this axes instead of a new figure.
        resolution: grid points per axis.
        margin: fraction of the data range added around it.
        limits: explicit ``(x0_min, x0_max, x1_min, x1_max)``.
        title: axes title.
        colorbar: add a ``p(C_1|x)`` colour bar (binary only).
        levels: posterior contours drawn for binary models (the boundary 0.5 bold).

    Raises:
        InputError: if ``x`` is not (n, 2).
    """
    fig, ax = _axes(ax)
    pts, xx, yy = input_grid(x, resolution, margin, limits)
    p = posterior_on_grid(model, pts, basis)
    K = p.shape[1]
    shape = xx.shape
    extent = (xx.min(), xx.max(), yy.min(), yy.max())
    if K == 2:
        im = ax.imshow(
            p[:, 1].reshape(shape),
            origin="lower",
            extent=extent,
            aspect="auto",
            cmap="RdBu_r",
            vmin=0.0,
            vmax=1.0,
            alpha=0.85,
        )
        lv = sorted(levels)
        cs = ax.contour(
            xx,
            yy,
            p[:, 1].reshape(shape),
            levels=lv,
            colors="k",
            linewidths=[1.5 if v == 0.5 else 0.7 for v in lv],
        )
        if len(lv) > 1:
            ax.clabel(cs, fontsize=7, fmt="%.1f")
        if colorbar:
            fig.colorbar(im, ax=ax, label=r"$p(C_1\,|\,x)$")
    else:
        colors = np.array([to_rgb(CLASS_COLORS[k % len(CLASS_COLORS)]) for k in range(K)])
        rgb = 1.0 - 0.45 * (p @ (1.0 - colors))  # tinted towards white, weighted by p
        ax.imshow(rgb.reshape(*shape, 3), origin="lower", extent=extent, aspect="auto")
        for k in range(K):
            others = np.delete(p, k, axis=1).max(1)
            ax.contour(xx, yy, (p[:, k] - others).reshape(shape), levels=[0.0], colors="k", linewidths=1.2)
    _scatter(ax, x, y, max(K, int(_numpy(y).max()) + 1))
    ax.set_xlim(extent[0], extent[1])
    ax.set_ylim(extent[2], extent[3])
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
    if title:
        ax.set_title(title)
    return fig


def class_conditional_densities(
    log_density: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor | None = None,
    ax=None,
    resolution: int = 150,
    margin: float = 0.25,
    limits: Sequence[float] | None = None,
    title: str | None = None,
    n_levels: int = 6,
) -> Figure:
    """Contours of the class-conditional densities ``p(x|C_k)`` of a generative model.

    Args:
        log_density: maps points (m, 2) to ``log p(x|C_k)``, shape (m, K) (for a
            fitted GDA model, its per-class Gaussian log densities).
        x: inputs used for the plotting range (and drawn when ``y`` is given).
        y: optional labels of ``x``.
        ax, resolution, margin, limits, title: as in :func:`decision_regions`.
        n_levels: contour levels per class, evenly spaced up to its peak.

    Raises:
        InputError: if ``x`` is not (n, 2).
    """
    fig, ax = _axes(ax)
    pts, xx, yy = input_grid(x, resolution, margin, limits)
    with torch.no_grad():
        dens = np.exp(_numpy(log_density(pts)))
    for k in range(dens.shape[1]):
        d = dens[:, k].reshape(xx.shape)
        levels = np.linspace(0, d.max(), n_levels + 2)[1:-1]
        ax.contour(
            xx, yy, d, levels=levels, colors=CLASS_COLORS[k % len(CLASS_COLORS)], linewidths=1.4, zorder=3
        )
    if y is not None:
        _scatter(ax, x, y, max(dens.shape[1], int(_numpy(y).max()) + 1), s=8, alpha=0.35)
    ax.set_xlim(xx.min(), xx.max())
    ax.set_ylim(yy.min(), yy.max())
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
    ax.set_title(title or r"class-conditional densities $p(x\,|\,C_k)$")
    return fig


def calibration_bins(
    y: torch.Tensor, proba: torch.Tensor, n_bins: int = 10
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal-width reliability bins over [0, 1].

    Binary ``proba`` (n,) is ``p(C_1|x)`` and the observed frequency is that of
    ``y = 1``; for (n, K) probabilities the confidence ``max_k p_k`` is binned
    against the accuracy of the arg-max. A value on an inner edge goes to the lower
    bin (scikit-learn ``calibration_curve``'s convention); empty bins are dropped.

    Returns:
        ``(mean_predicted, observed_frequency, counts)`` over the non-empty bins.
    """
    y_np, p_np = _numpy(y).astype(int), _numpy(proba).astype(float)
    if p_np.ndim == 1:
        conf, hit = p_np, (y_np == 1).astype(float)
    else:
        conf, hit = p_np.max(1), (p_np.argmax(1) == y_np).astype(float)
    if int(n_bins) < 1:
        raise fail("n_bins", "a positive integer", n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.searchsorted(edges[1:-1], conf)  # side="left": (a, b] bins
    counts = np.bincount(idx, minlength=n_bins).astype(float)
    keep = counts > 0
    mean_pred = np.bincount(idx, weights=conf, minlength=n_bins)[keep] / counts[keep]
    freq = np.bincount(idx, weights=hit, minlength=n_bins)[keep] / counts[keep]
    return mean_pred, freq, counts[keep]


def reliability_diagram(
    y: torch.Tensor,
    proba: torch.Tensor | Mapping[str, torch.Tensor],
    n_bins: int = 10,
    ax=None,
    title: str | None = None,
) -> Figure:
    """Reliability (calibration) diagram: observed frequency against predicted
    probability per bin, with the diagonal of perfect calibration, the expected
    calibration error ``ECE = sum_b (n_b / n) |freq_b - conf_b|`` in the legend, and
    a histogram of the predictions underneath.

    Args:
        y: labels (n,).
        proba: ``predict_proba`` output ((n,) or (n, K)), or a mapping from a model
            name to such an output to compare several models on the same data.
        n_bins: equal-width bins over [0, 1].
        ax: draw the curve into this axes (no histogram then).
        title: axes title.
    """
    curves = proba if isinstance(proba, Mapping) else {"model": proba}
    if ax is None:
        fig = Figure(figsize=(4.6, 5.2))
        ax, hax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    else:
        fig, hax = ax.figure, None
    ax.plot([0, 1], [0, 1], ls="--", c="0.5", lw=1, label="perfectly calibrated")
    for i, (name, p) in enumerate(curves.items()):
        conf, freq, counts = calibration_bins(y, p, n_bins)
        ece = float((counts * np.abs(freq - conf)).sum() / counts.sum())
        color = f"C{i}"
        ax.plot(conf, freq, "o-", c=color, ms=4, label=f"{name} (ECE {ece:.3f})")
        if hax is not None:
            p_np = _numpy(p)
            values = p_np if p_np.ndim == 1 else p_np.max(1)
            hax.hist(values, bins=np.linspace(0, 1, n_bins + 1), color=color, alpha=0.5)
    binary = _numpy(next(iter(curves.values()))).ndim == 1
    ax.set_ylabel("observed frequency of $C_1$" if binary else "accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title or "reliability diagram")
    xlabel = r"predicted $p(C_1\,|\,x)$" if binary else r"confidence $\max_k p(C_k\,|\,x)$"
    if hax is not None:
        hax.set_xlabel(xlabel)
        hax.set_ylabel("count")
    else:
        ax.set_xlabel(xlabel)
    return fig


def solver_convergence(
    histories: Mapping[str, Sequence[Mapping[str, float]]],
    optimum: float | None = None,
    keys: Sequence[str] = ("loss", "grad_norm"),
    title: str | None = None,
    logx: bool = False,
) -> Figure:
    """Objective gap and gradient norm per iteration for several solvers on one problem.

    Args:
        histories: solver name -> ``FitResult.history`` (one dict per iteration).
        optimum: the reference minimum ``E*`` of the objective; the first panel then
            shows ``E(w_k) - E*`` on a log scale. Gaps below the rounding level of
            ``E`` in float64, ``4 eps max(1, |E*|)``, are drawn on that level (a dotted
            line): they are the optimum to working precision. ``None`` draws the
            objective itself.
        keys: history entries to draw, one panel each; the first is the objective.
        title: figure title.
        logx: logarithmic iteration axis (drawn at ``k + 1``), so a solver that
            needs 10 steps and one that needs 1000 are both readable.

    Raises:
        InputError: if a history lacks one of ``keys``.
    """
    fig = Figure(figsize=(4.8 * len(keys), 3.8))
    axes = fig.subplots(1, len(keys), squeeze=False)
    floor = 4 * np.finfo(np.float64).eps * max(1.0, abs(optimum)) if optimum is not None else 0.0
    styles = [
        dict(marker="o", ls="-"),
        dict(marker="x", ls="--"),
        dict(marker="s", ls=":"),
        dict(marker="^", ls="-."),
    ]
    for i, (name, hist) in enumerate(histories.items()):
        for j, (key, ax) in enumerate(zip(keys, axes[0])):
            if any(key not in h for h in hist):
                raise fail(
                    f"histories['{name}']",
                    f"a '{key}' entry in every iteration",
                    sorted(hist[0]) if hist else "an empty history",
                )
            v = np.array([float(h[key]) for h in hist])
            it = np.arange(len(v)) + (1 if logx else 0)
            if j == 0 and optimum is not None:
                v = np.maximum(v - optimum, floor)
            keep = v > 0
            style = dict(styles[i % len(styles)])
            if len(v) > 40:
                style["marker"] = None
            ax.plot(it[keep], v[keep], ms=4, label=name, **style)
    for j, (key, ax) in enumerate(zip(keys, axes[0])):
        label = key.replace("_", " ")
        if j == 0 and optimum is not None:
            label = f"{label} $-$ optimum"
            ax.axhline(floor, c="0.5", ls=":", lw=1, label="rounding level of $E$")
        ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
        ax.set_ylabel(label)
        ax.set_xlabel("iteration + 1" if logx else "iteration")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def weight_norm_paths(
    paths: Mapping[str, Sequence[float]], ax=None, title: str | None = None, logy: bool = False
) -> Figure:
    """``||w||`` per iteration, one curve per run (e.g. with and without L2 on
    separable data, where the unpenalized norm grows without bound; the lecture notes on
    probabilistic classification, §15: "ML solution can over-fit")."""
    fig, ax = _axes(ax)
    for name, v in paths.items():
        v = np.asarray(v, dtype=float)
        ax.plot(np.arange(len(v)), v, label=name)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel(r"$\|w\|$")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or r"weight norm per iteration")
    return fig
