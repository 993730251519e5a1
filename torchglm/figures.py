"""The lecture's figures, reproduced from real fits.

Run ``python -m torchglm.figures [NAME|all] --out DIR [--quick]``; each figure is
one function in :data:`FIGURES` that fits the models it shows, writes
``DIR/<name>.png`` and returns the numbers it measured (printed as JSON):

* ``gda_shared``         two Gaussian classes with one shared covariance: the
  class-conditional densities and the sigmoidal posterior (the lecture notes on probabilistic
  classification, §3);
* ``qda_three_classes``  three classes with different covariances: quadratic
  boundaries (the lecture notes, §3);
* ``basis_moons_xor``    moons and XOR: linear logistic regression fails, the same
  model on a Gaussian RBF basis separates them (the lecture notes, §15);
* ``basis_feature_space``  two Gaussian basis functions map data no line separates
  to a plane where one does (the lecture notes, §15; Bishop PRML fig. 4.12);
* ``separable_weight_norm``  separable data: unregularized maximum likelihood drives
  ``||w||`` to infinity and the sigmoid to a step, L2 keeps it finite (the lecture notes, §15);
* ``solver_convergence`` gradient descent, Newton and IRLS on one logistic problem:
  the objective gap per iteration on a log scale (the lecture notes, §7, §8 and §14);
* ``bayes_predictive``   MAP against the Laplace, variational and MCMC predictives far from the data
  (the lecture notes, §12; Bishop PRML §4.5).

``--quick`` shrinks data and iteration budgets so the whole set runs in seconds
(the tests use it); the committed PNGs under ``docs/figures`` come from the full run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Callable

import matplotlib
import torch

from . import plotting
from ._validation import ConvergenceWarning, InputError, fail
from .basis import GaussianRBF
from .bayes import GaussianPrior, laplace_posterior, predictive, sample_posterior
from .bayes.variational import variational_posterior
from .data.batches import TensorBatches
from .data.datasets import gaussian_classes, load_dataset, moons, xor
from .models import LogisticRegression
from .models.discriminant import LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis
from .plotting import save_figure, subplots
from .passes import run_passes

__all__ = ["FIGURES", "make_figure", "main"]


def _tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(ds.x, dtype=torch.float64), torch.as_tensor(ds.y).long()


def _accuracy(model, x, y) -> float:
    with torch.no_grad():
        return float((model.predict(x) == y).double().mean())


# -- 1. two Gaussian classes, shared covariance ----------------------------------------


def gda_shared(out: str, quick: bool = False) -> dict:
    """GDA with a shared covariance (the lecture notes, §3; Bishop PRML §4.2.1):
    ``p(x|C_k) = N(mu_k, Sigma)`` gives ``p(C_1|x) = sigma(w^T x + w_0)`` with
    ``w = Sigma^{-1}(mu_1 - mu_2)``.

    Left: the fitted class-conditional densities with the data; middle: the
    posterior ``p(C_1|x)``, a sigmoid of a linear function, so the boundary is a
    line; right: along the line through the two fitted means, the joint densities
    ``p(x|C_k) p(C_k)`` and the posterior, with logistic regression's posterior
    fitted discriminatively to the same data for comparison.
    """
    ds = gaussian_classes(
        n_samples=120 if quick else 400,
        n_classes=2,
        means=[[-0.8, 0.3], [0.8, -0.3]],
        covariances=[[[1.0, 0.6], [0.6, 1.0]]] * 2,
        seed=0,
    )
    x, y = _tensors(ds)
    gda = LinearDiscriminantAnalysis(2, 2)
    gda.fit(x, y)
    logit = LogisticRegression(2)
    logit.fit(x, y, solver="newton")
    fig, axes = subplots(1, 3, figsize=(15, 4.2))
    plotting.class_conditional_densities(
        gda.class_log_likelihood, x, y, ax=axes[0], title=r"fitted $p(x\,|\,C_k)$, shared $\Sigma$"
    )
    plotting.decision_regions(gda, x, y, ax=axes[1], title=r"GDA posterior $p(C_1\,|\,x)$: linear boundary")
    m0, m1 = gda.means[0], gda.means[1]
    u = (m1 - m0) / torch.linalg.norm(m1 - m0)
    t = torch.linspace(-4.0, 4.0, 400, dtype=torch.float64)
    line = 0.5 * (m0 + m1) + t[:, None] * u
    with torch.no_grad():
        joint = torch.exp(gda.class_log_likelihood(line) + gda.log_prior)
        post = gda.predict_proba(line)[:, 1]
        post_lr = logit.predict_proba(line)
    ax = axes[2]
    for k in range(2):
        ax.plot(t, joint[:, k], c=plotting.CLASS_COLORS[k], label=rf"$p(x|C_{k})p(C_{k})$")
    ax.set_xlabel(r"position along $\mu_1 - \mu_0$")
    ax.set_ylabel("density")
    tw = ax.twinx()
    tw.plot(t, post, c="k", lw=2, label=r"GDA $p(C_1\,|\,x)$")
    tw.plot(t, post_lr, c="k", ls="--", lw=1.2, label=r"logistic regression")
    tw.set_ylim(-0.02, 1.02)
    tw.set_ylabel(r"$p(C_1\,|\,x)$")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = tw.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="center left")
    ax.set_title("densities and the sigmoidal posterior along the means")
    fig.tight_layout()
    path = save_figure(fig, os.path.join(out, "gda_shared.png"))
    return {
        "png": path,
        "gda_train_accuracy": _accuracy(gda, x, y),
        "logistic_train_accuracy": _accuracy(logit, x, y),
    }


# -- 2. three classes, different covariances -----------------------------------------------


def qda_three_classes(out: str, quick: bool = False) -> dict:
    """GDA with one covariance per class (the lecture notes, §3): the log-odds are quadratic in
    ``x``, so the boundaries are conics. Left: the fitted densities; middle: the
    QDA posterior and boundaries; right: the same data with one shared covariance
    (linear boundaries), for contrast."""
    means = [[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]]
    covs = [[[0.4, 0.0], [0.0, 0.4]], [[2.0, 0.9], [0.9, 0.8]], [[0.5, -0.3], [-0.3, 1.6]]]
    ds = gaussian_classes(n_samples=150 if quick else 600, n_classes=3, means=means, covariances=covs, seed=1)
    x, y = _tensors(ds)
    qda = QuadraticDiscriminantAnalysis(2, 3)
    qda.fit(x, y)
    lda = LinearDiscriminantAnalysis(2, 3)
    lda.fit(x, y)
    fig, axes = subplots(1, 3, figsize=(15, 4.2))
    plotting.class_conditional_densities(
        qda.class_log_likelihood, x, y, ax=axes[0], title=r"fitted $p(x\,|\,C_k)$, one $\Sigma_k$ per class"
    )
    plotting.decision_regions(
        qda, x, y, ax=axes[1], title=f"QDA: quadratic boundaries (train acc {_accuracy(qda, x, y):.3f})"
    )
    plotting.decision_regions(
        lda,
        x,
        y,
        ax=axes[2],
        title=f"shared $\\Sigma$: linear boundaries (train acc {_accuracy(lda, x, y):.3f})",
    )
    fig.tight_layout()
    path = save_figure(fig, os.path.join(out, "qda_three_classes.png"))
    return {
        "png": path,
        "qda_train_accuracy": _accuracy(qda, x, y),
        "lda_train_accuracy": _accuracy(lda, x, y),
    }


# -- 3. moons and XOR: a Gaussian basis makes them separable -----------------------------------

#: the RBF setting of the figure and of ``tests/test_basis.py``.
RBF_CENTERS, RBF_L2 = 16, 1e-3


def basis_moons_xor(out: str, quick: bool = False) -> dict:
    """Fixed basis functions (the lecture notes, §15): logistic regression on ``phi(x)``, 16
    Gaussian RBFs with k-means centers (crosses), against the same model on ``x``; test accuracy
    on fresh draws in each title. Both fitted by Newton's method on mean NLL + (l2/2)||w||^2."""
    n_train, n_test = (150, 300) if quick else (400, 2000)
    data = {
        "moons (noise 0.2)": lambda n, s: moons(n, noise=0.2, seed=s),
        "XOR (noise 0.4)": lambda n, s: xor(n, noise=0.4, seed=s),
    }
    fig, axes = subplots(2, 2, figsize=(10.5, 8.4))
    result = {}
    for row, (name, make) in enumerate(data.items()):
        x, y = _tensors(make(n_train, 0))
        x_test, y_test = _tensors(make(n_test, 1))
        linear = LogisticRegression(2, l2=RBF_L2)
        linear.fit(x, y, solver="newton")
        rbf = GaussianRBF(RBF_CENTERS, seed=0).fit(x)
        model = LogisticRegression(rbf.out_features(2), l2=RBF_L2)
        model.fit(rbf(x), y, solver="newton")
        acc_lin = _accuracy(linear, x_test, y_test)
        acc_rbf = _accuracy(model, rbf(x_test), y_test)
        key = name.split()[0].lower()
        result[f"{key}_linear_test_accuracy"] = acc_lin
        result[f"{key}_rbf_test_accuracy"] = acc_rbf
        plotting.decision_regions(
            linear, x, y, ax=axes[row, 0], title=f"{name}, linear: test acc {acc_lin:.3f}"
        )
        plotting.decision_regions(
            model,
            x,
            y,
            basis=rbf,
            ax=axes[row, 1],
            title=f"{name}, {RBF_CENTERS} Gaussian RBFs: test acc {acc_rbf:.3f}",
        )
        c = rbf.centers.numpy()
        axes[row, 1].scatter(c[:, 0], c[:, 1], marker="x", c="k", s=40, linewidths=1.5, label="RBF centers")
    fig.tight_layout()
    result["png"] = save_figure(fig, os.path.join(out, "basis_moons_xor.png"))
    result["n_train"], result["n_test"] = n_train, n_test
    return result


def basis_feature_space(out: str, quick: bool = False) -> dict:
    """The figure of the lecture notes, §15 (Bishop PRML fig. 4.12): two Gaussian basis functions
    (centers: crosses; green: their 1/2 level sets) map data that no line separates
    in ``(x_1, x_2)`` (class C_0 near the centers, class C_1 on a ring around them)
    to ``(phi_1, phi_2)``, where a line separates them. Logistic regression on the two
    features (Newton, l2 = 1e-2) gives that line; left, its boundary in input space."""
    g = torch.Generator().manual_seed(0)
    n = 60 if quick else 200
    centers = torch.tensor([[-1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    inner = centers[torch.arange(n) % 2] + 0.3 * torch.randn(n, 2, generator=g, dtype=torch.float64)
    angle = 2 * torch.pi * torch.rand(n, generator=g, dtype=torch.float64)
    radius = 2.3 + 0.25 * torch.randn(n, generator=g, dtype=torch.float64)
    ring = torch.stack([1.3 * radius * angle.cos(), radius * angle.sin()], 1)
    x = torch.cat([inner, ring])
    y = torch.cat([torch.zeros(n), torch.ones(n)]).long()
    phi = GaussianRBF(centers=centers.tolist(), width=0.8)
    model = LogisticRegression(2, l2=1e-2)
    model.fit(phi(x), y, solver="newton")
    linear = LogisticRegression(2, l2=1e-2)
    linear.fit(x, y, solver="newton")
    fig, axes = subplots(1, 2, figsize=(11, 4.6))
    ax = axes[0]
    plotting.decision_regions(
        model, x, y, basis=phi, ax=ax, colorbar=False, title="input space: not linearly separable"
    )
    pts, xx, yy = plotting.input_grid(x, 200, 0.25)
    with torch.no_grad():
        f = phi(pts)
    for j in range(2):
        ax.contour(
            xx, yy, f[:, j].reshape(xx.shape).numpy(), levels=[0.5], colors="tab:green", linewidths=1.5
        )
    ax.scatter(
        centers[:, 0],
        centers[:, 1],
        marker="X",
        c="tab:green",
        s=160,
        edgecolors="k",
        linewidths=1.0,
        zorder=4,
    )
    ax = axes[1]
    with torch.no_grad():
        f = phi(x)
    for k in range(2):
        m = y == k
        ax.scatter(
            f[m, 0],
            f[m, 1],
            s=14,
            c=plotting.CLASS_COLORS[k],
            edgecolors="k",
            linewidths=0.4,
            label=f"$C_{k}$",
        )
    w = model.coef[0]
    b = float(model.intercept[0])
    t = torch.linspace(0.0, 1.0, 2, dtype=torch.float64)
    ax.plot(t, -(b + w[0] * t) / w[1], c="k", lw=1.5, label=r"$w^T\phi + w_0 = 0$")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel(r"$\phi_1$")
    ax.set_ylabel(r"$\phi_2$")
    ax.legend(fontsize=8)
    ax.set_title(r"feature space $(\phi_1, \phi_2)$: linearly separable")
    fig.tight_layout()
    path = save_figure(fig, os.path.join(out, "basis_feature_space.png"))
    return {
        "png": path,
        "train_accuracy_basis": _accuracy(model, phi(x), y),
        "train_accuracy_linear": _accuracy(linear, x, y),
    }


# -- 4. separable data: ||w|| -> infinity without L2 ----------------------------------------------


def _separable_1d(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % 2
    # Class 0 on x <= -0.1, class 1 on x >= 0.1, one point of each on the edge of
    # the gap: the margin is 0.1, so ||w|| grows like log(t) / 0.1 (fast).
    x = (0.1 + 2.4 * torch.rand(n, generator=g, dtype=torch.float64)) * (2.0 * y - 1.0)
    x[:2] = torch.tensor([-0.1, 0.1], dtype=torch.float64)
    return x[:, None], y


def _gradient_descent_path(model, x, y, n_iter: int, lr: float) -> tuple[list, list]:
    """Fixed-step gradient descent ``w <- w - lr grad E(w)`` (the library's ``gd``
    fitter, the loop of the lecture notes, §15) driven one pass at a time; ``||w||`` and ``(w, b)`` are
    recorded after every pass (pass ``k + 1`` leaves the model at step ``k``)."""
    fitter = model.make_fitter("gd", lr=lr, max_iter=n_iter, gtol=0.0)
    batches = TensorBatches(x, y)
    norms, params = [], []
    with warnings.catch_warnings():
        # Stopping at max_iter is the point of the experiment, not a failure.
        warnings.simplefilter("ignore", ConvergenceWarning)
        while not fitter.done:
            run_passes(fitter, batches, max_passes=1)
            w = model.coef
            norms.append(float(torch.linalg.norm(w)))
            params.append((float(w[0, 0]), float(model.intercept[0])))
    return norms, params


def separable_weight_norm(out: str, quick: bool = False) -> dict:
    """Maximum likelihood over-fits separable data (the lecture notes, §15; Bishop PRML §4.3.2): on linearly
    separable data the likelihood keeps growing as ``||w||`` grows, so gradient descent drives ``||w||``
    to infinity and ``sigma(w x + b)`` to a step; the penalty ``(l2/2) w^2`` (a
    Gaussian prior, the lecture notes, §14) gives a finite minimizer. Left: ``||w||`` per
    gradient-descent iteration (log-scaled iterations: unpenalized, ``||w||`` grows
    like ``log t``); right: the fitted sigmoid at several iterations."""
    n_iter = 200 if quick else 10000
    x, y = _separable_1d(40)
    lr = 2.0
    paths, params = {}, {}
    for name, l2 in (("no penalty (ML)", 0.0), ("L2, l2 = 0.01", 0.01)):
        model = LogisticRegression(1, l2=l2)
        paths[name], params[name] = _gradient_descent_path(model, x, y, n_iter, lr)
    fig, axes = subplots(1, 2, figsize=(11, 4.2))
    plotting.weight_norm_paths(paths, ax=axes[0], title=r"$\|w\|$ per gradient-descent step")
    axes[0].set_xscale("symlog", linthresh=10)
    ax = axes[1]
    grid = torch.linspace(-3.0, 3.0, 500, dtype=torch.float64)
    ml = params["no penalty (ML)"]
    checkpoints = sorted({min(k, len(ml) - 1) for k in (10, 100, 1000, n_iter)})
    cmap = matplotlib.colormaps["Reds"]
    for i, k in enumerate(checkpoints):
        w, b = ml[k]
        ax.plot(
            grid,
            torch.sigmoid(w * grid + b),
            c=cmap(0.35 + 0.65 * i / max(len(checkpoints) - 1, 1)),
            label=f"ML, step {k}: $w$ = {w:.1f}",
        )
    w, b = params["L2, l2 = 0.01"][-1]
    ax.plot(
        grid,
        torch.sigmoid(w * grid + b),
        c="tab:blue",
        ls="--",
        lw=2,
        label=f"L2, step {len(params['L2, l2 = 0.01']) - 1}: $w$ = {w:.1f}",
    )
    ax.scatter(
        x[:, 0],
        y.double(),
        c=[plotting.CLASS_COLORS[int(k)] for k in y],
        s=14,
        edgecolors="k",
        linewidths=0.4,
        zorder=3,
    )
    ax.set_xlabel("$x$")
    ax.set_ylabel(r"$p(C_1\,|\,x) = \sigma(wx + b)$")
    ax.legend(fontsize=8, loc="center right")
    ax.set_title("separable data: the ML sigmoid becomes a step")
    fig.tight_layout()
    path = save_figure(fig, os.path.join(out, "separable_weight_norm.png"))
    return {
        "png": path,
        "iterations": n_iter,
        "lr": lr,
        "final_norm_ml": paths["no penalty (ML)"][-1],
        "final_norm_l2": paths["L2, l2 = 0.01"][-1],
        "norm_ml_at": {str(k): paths["no penalty (ML)"][k] for k in checkpoints},
    }


# -- 5. gradient descent vs Newton vs IRLS ------------------------------------------------------


def solver_convergence(out: str, quick: bool = False) -> dict:
    """The lecture notes, §7, §8 and §14: the three solvers minimize the same objective, mean NLL +
    (l2/2)||w||^2, on the standardized breast-cancer data (30 features). Newton and
    IRLS (the same step written as weighted least squares) converge quadratically in
    a handful of iterations; gradient descent with a fixed step converges linearly.
    ``E*`` is the smallest objective any solver reached."""
    ds = load_dataset("breast_cancer")
    x, y = _tensors(ds)
    x = (x - x.mean(0)) / x.std(0)
    if quick:
        x, y = x[:150], y[:150]
    l2 = 1e-3
    solvers = {
        "gradient descent": ("gd", 30 if quick else 5000),
        "Newton": ("newton", 50),
        "IRLS": ("irls", 50),
    }
    histories, iters = {}, {}
    for label, (solver, max_iter) in solvers.items():
        model = LogisticRegression(x.shape[1], l2=l2)
        with warnings.catch_warnings():
            # The quick run stops gradient descent early on purpose.
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = model.fit(x, y, solver=solver, max_iter=max_iter)
        histories[label] = result.history
        iters[solver] = result.n_iter
    optimum = min(h["loss"] for hist in histories.values() for h in hist)
    fig = plotting.solver_convergence(
        histories,
        optimum=optimum,
        logx=True,
        title=f"logistic regression, breast cancer (n={x.shape[0]}, d={x.shape[1]}, l2={l2})",
    )
    path = save_figure(fig, os.path.join(out, "solver_convergence.png"))
    return {"png": path, "optimum": optimum, "n_iter": iters}


# -- 6. MAP vs the Bayesian predictive far from the data -------------------------------------------


class _BayesPredictive:
    """``predict_proba`` = the posterior predictive ``p(C_1|x, D)``: the probit
    approximation ``sigma(kappa(sigma_a^2) mu_a)`` for a Gaussian posterior (Laplace,
    variational), the average over the draws for MCMC."""

    def __init__(self, model, posterior):
        self.model, self.posterior = model, posterior

    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        return predictive(self.model, self.posterior, x).proba


def bayes_predictive(out: str, quick: bool = False) -> dict:
    """Bayesian logistic regression (the lecture notes, §12; Bishop PRML §4.5.2): the MAP plug-in
    ``sigma(w_MAP^T x)`` is as confident far from the data as near it, its contours parallel lines;
    the predictive ``p(C_1|x, D) = int sigma(w^T x) p(w|D) dw`` under the Laplace
    posterior ``N(w_MAP, H^{-1})`` (probit approximation ``sigma(kappa(sigma_a^2)
    mu_a)``, Bishop PRML 4.5.2) moderates towards 1/2 where ``sigma_a^2 = x^T S x``
    grows, so its contours fan out away from the training points. Prior
    ``N(0, 4 I)`` on weights and bias; 30 training points.

    Left and middle: the two posteriors on a window far larger than the data, with
    contours at 0.1, 0.3, ..., 0.9. Right: both along the boundary's normal through
    the data centre and through a point 8 units along the boundary.
    """
    ds = gaussian_classes(
        n_samples=30,
        n_classes=2,
        means=[[-1.0, -1.0], [1.0, 1.0]],
        covariances=[[[0.6, 0.0], [0.0, 0.6]]] * 2,
        seed=3,
    )
    x, y = _tensors(ds)
    model = LogisticRegression(2)
    prior = GaussianPrior(variance=4.0, bias_variance=4.0)
    post = laplace_posterior(model, (x, y), prior)
    bayes = _BayesPredictive(model, post)
    # The other two ways to the predictive (the lecture notes, §12, options 2
    # and 3): the Jaakkola-Jordan variational Gaussian and NUTS draws.
    others = {
        "variational": _BayesPredictive(model, variational_posterior(model, (x, y), prior)),
        "MCMC": _BayesPredictive(
            model,
            sample_posterior(
                model,
                (x, y),
                post,
                num_chains=2,
                num_samples=100 if quick else 500,
                warmup_steps=100 if quick else 300,
            ),
        ),
    }
    limits = (-10.0, 10.0, -10.0, 10.0)
    res = 80 if quick else 250
    levels = (0.1, 0.3, 0.5, 0.7, 0.9)
    fig, axes = subplots(1, 3, figsize=(16, 4.4))
    plotting.decision_regions(
        model,
        x,
        y,
        ax=axes[0],
        limits=limits,
        resolution=res,
        levels=levels,
        colorbar=False,
        title=r"MAP plug-in $\sigma(w_{MAP}^T x)$",
    )
    plotting.decision_regions(
        bayes,
        x,
        y,
        ax=axes[1],
        limits=limits,
        resolution=res,
        levels=levels,
        title=r"Laplace predictive $p(C_1\,|\,x, D)$",
    )
    w = model.coef[0]
    b = float(model.intercept[0])
    normal = w / torch.linalg.norm(w)
    along = torch.stack([-normal[1], normal[0]])
    centre = x.mean(0)
    centre = centre - ((w @ centre + b) / (w @ w)) * w  # its projection on the boundary
    s = torch.linspace(-4.0, 4.0, 300, dtype=torch.float64)
    ax = axes[2]
    with torch.no_grad():
        # The MAP curve depends only on the distance to its boundary: one curve.
        ax.plot(
            s,
            model.predict_proba(centre + s[:, None] * normal),
            c="tab:red",
            lw=2,
            label="MAP (the same on both lines)",
        )
        for offset, ls, where in ((0.0, "-", "through the data"), (8.0, "--", "8 along the boundary")):
            pts = centre + offset * along + s[:, None] * normal
            ax.plot(s, bayes.predict_proba(pts), c="k", ls=ls, label=f"Laplace, {where}")
            for (name, pred), colour in zip(others.items(), ("tab:blue", "tab:green")):
                ax.plot(s, pred.predict_proba(pts), c=colour, ls=ls, lw=1, label=f"{name}, {where}")
        far = centre + 8.0 * along + 2.0 * normal
        near = centre + 2.0 * normal
        p_far = float(bayes.predict_proba(far[None])[0])
        p_near = float(bayes.predict_proba(near[None])[0])
        p_others = {
            name: (float(pred.predict_proba(near[None])[0]), float(pred.predict_proba(far[None])[0]))
            for name, pred in others.items()
        }
        p_map = float(model.predict_proba(far[None])[0])
    ax.set_xlabel("signed distance from the MAP boundary")
    ax.set_ylabel(r"$p(C_1\,|\,x)$")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    ax.set_title("slices across the boundary")
    fig.tight_layout()
    path = save_figure(fig, os.path.join(out, "bayes_predictive.png"))
    out = {
        "png": path,
        "map_at_distance_2": p_map,
        "bayes_at_distance_2_near_data": p_near,
        "bayes_at_distance_2_far_along_boundary": p_far,
    }
    for name, (near_p, far_p) in p_others.items():
        out[f"{name}_at_distance_2_near_data"] = near_p
        out[f"{name}_at_distance_2_far_along_boundary"] = far_p
    return out


FIGURES: dict[str, Callable[[str, bool], dict]] = {
    "gda_shared": gda_shared,
    "qda_three_classes": qda_three_classes,
    "basis_moons_xor": basis_moons_xor,
    "basis_feature_space": basis_feature_space,
    "separable_weight_norm": separable_weight_norm,
    "solver_convergence": solver_convergence,
    "bayes_predictive": bayes_predictive,
}


def make_figure(name: str, out: str, quick: bool = False) -> dict:
    """Fit, draw and save one figure; return what it measured."""
    if name not in FIGURES:
        raise fail("figure", f"'all' or one of {list(FIGURES)}", repr(name))
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return FIGURES[name](out, quick)
    finally:
        torch.set_default_dtype(default)


def main(argv: list[str] | None = None) -> int:
    """``torchglm figures [NAME|all] --out DIR [--quick]``: returns the exit status
    (0 ok; 2 and one line ``error: ...`` for an unknown name or an unwritable ``--out``)."""
    parser = argparse.ArgumentParser(
        prog="python -m torchglm.figures", description="Reproduce the lecture's figures from real fits."
    )
    parser.add_argument("name", nargs="?", default="all", help=f"'all' or one of {list(FIGURES)}")
    parser.add_argument("--out", default="docs/figures", help="output directory for the PNGs")
    parser.add_argument("--quick", action="store_true", help="tiny data and iteration budgets")
    args = parser.parse_args(argv)
    names = list(FIGURES) if args.name == "all" else [args.name]
    try:
        if args.name != "all" and args.name not in FIGURES:
            # Before any figure is fitted: the name is checked, not the first figures' fits.
            raise fail("figure", f"'all' or one of {list(FIGURES)}", repr(args.name))
        for name in names:
            try:
                result = make_figure(name, args.out, args.quick)
            except OSError as err:
                raise fail("out", "a writable directory", f"'{args.out}' ({err.strerror or err})") from None
            print(json.dumps({name: result}), flush=True)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
