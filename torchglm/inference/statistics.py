"""The per-observation sums of a fitted GLM, one pass each: weights, deviance,
Pearson's statistic, log-likelihoods, and the intercept-only (null) model.

Every quantity is a sum over batches (all-reduced across processes), so the same
code serves in-memory tensors, larger-than-memory batches and many processes.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import torch

from .._validation import fail
from ..data.batches import Batch
from ..models.glm import GeneralizedLinearModel
from ..passes import all_reduce_sum, run_passes
from ..solvers.api import make_fitter
from ..solvers.layout import flat_parameters, set_flat_parameters


def _features(model, feature_names) -> list[str]:
    """The columns' names: ``feature_names`` (checked), else ``x0, x1, ...``."""
    if feature_names is None:
        return [f"x{j}" for j in range(model.n_features)]
    if len(feature_names) != model.n_features:
        raise fail("feature_names", f"{model.n_features} names", len(feature_names))
    return list(feature_names)


class _Sums:
    """One pass of the per-observation statistics at fixed parameters."""

    def __init__(self, family, dtype, device):
        z = lambda: torch.zeros((), dtype=dtype, device=device)  # noqa: E731
        self.family = family
        self.dtype = dtype
        self.weight, self.rows, self.wy, self.deviance, self.pearson, self.saturated = (z() for _ in range(6))
        self.has_offset = False

    def add(self, eta, y, w):
        fam = self.family
        mu = fam.mean(eta)
        w = torch.ones_like(eta) if w is None else w.to(self.dtype)
        self.weight += w.sum()
        self.rows += eta.shape[0]
        self.wy += (w * y).sum()
        self.deviance += (w * fam.unit_deviance(y, mu)).sum()
        if fam.is_classifier or fam.weight_is_trials:
            # fitted probabilities numerically 0 or 1 on the side of y: separation
            sat = ((mu < 1e-10) & (y == 0)) | ((mu > 1 - 1e-10) & (y == 1))
            self.saturated += (sat & (w > 0)).sum()
        self.pearson += (w * (y - mu) ** 2 / fam.variance(mu)).sum()

    def finish(self):
        all_reduce_sum(self.weight, self.rows, self.wy, self.deviance, self.pearson, self.saturated)
        return self


def _batch_eta(model, batch: Batch, dtype):
    """``eta`` at the model's parameters (the model's ``linear_predictor``), targets and
    weights, all in ``dtype``."""
    theta = flat_parameters(model, dtype)
    offset = None if batch.offset is None else batch.offset.to(dtype)
    eta = model.linear_predictor(theta, batch.x.to(dtype), offset)
    y = batch.y.to(dtype) if batch.y.is_floating_point() else batch.y
    w = None if batch.weight is None else batch.weight.to(dtype)
    return eta, y, w


def _log_likelihood(model, batches, dtype, scale, intercept=None, var_weight=None):
    """``sum_i s_i log p(y_i | eta_i, phi)`` at the model (or at ``eta = intercept + offset``).

    With variance weights ``v_i`` (``var_weight``, in the batches' row order; the batches'
    weights are then ``f_i v_i``) row ``i`` has the dispersion ``phi / v_i`` and counts
    ``f_i`` times: ``sum_i f_i log p(y_i | eta_i, phi / v_i)`` (statsmodels' ``loglike``
    with ``var_weights``; R's ``logLik`` of a ``glm`` with prior weights)."""
    fam = model.family
    total = None
    start = 0
    for batch in batches:
        eta, y, w = _batch_eta(model, batch, dtype)
        if intercept is not None:
            eta = _null_eta(batch, eta, intercept, dtype)
        if var_weight is None:
            ll = fam.log_likelihood(eta, y, w, scale=scale)
        else:
            v = var_weight[start : start + eta.shape[0]].to(dtype)
            start += eta.shape[0]
            ll = fam.log_likelihood(eta, y, w / v, scale=scale / v)
        total = ll if total is None else total + ll
    all_reduce_sum(total)
    return total


def _null_eta(batch, eta, intercept, dtype):
    off = torch.zeros_like(eta) if batch.offset is None else batch.offset.to(dtype)
    return off + intercept


def _null_intercept(model, batches, dtype, sums: _Sums) -> torch.Tensor:
    """MLE of the intercept-only model ``eta_i = b + offset_i``.

    Without offsets ``mu^ = sum s_i y_i / sum s_i`` for every link (the score
    equation of a constant mean), ``b = g(mu^)``. With offsets the solvers fit it
    (Newton, one pass per iteration, started at that ``b``): a model with the one
    column ``x_i = 1`` and no separate intercept.
    """
    b = model.family.link.link((sums.wy / sums.weight).to(dtype))
    if not sums.has_offset:
        return b
    with torch.random.fork_rng(devices=[]):  # nn.Linear's init must not move the caller's RNG
        null = GeneralizedLinearModel(
            1, model.family, n_classes=model.n_classes, fit_intercept=False, dtype=dtype
        ).to(b.device)
    set_flat_parameters(null, b.reshape(1))
    fitter = make_fitter(null, "newton", dtype=dtype)
    run_passes(fitter, _ConstantColumn(batches, dtype), 50 * fitter.max_iter + 10)
    return flat_parameters(null, dtype)[0]


class _ConstantColumn:
    """The batches with the design replaced by one column of ones (the intercept-only
    model's design), everything in ``dtype``."""

    def __init__(self, batches: Iterable[Batch], dtype: torch.dtype):
        self.batches, self.dtype = batches, dtype

    def __iter__(self):
        dt = self.dtype
        for b in self.batches:
            ones = torch.ones(b.y.shape[0], 1, dtype=dt, device=b.y.device)
            y = b.y.to(dt) if b.y.is_floating_point() else b.y
            yield Batch(
                ones,
                y,
                None if b.weight is None else b.weight.to(dt),
                None if b.offset is None else b.offset.to(dt),
            )


class _FitStats(NamedTuple):
    """The per-observation sums of one fit, before the covariance."""

    names: list[str]
    J: torch.Tensor | None  # reported coefficients = J theta (None: theta itself)
    S: torch.Tensor  # the objective's normalizer: the Hessian is that of a weighted mean
    nobs: float
    n_rows: int
    n_constants: int  # intercepts in the reported coefficients (df_model = rank - this)
    scale: float
    scale_from_pearson: bool
    pearson: float
    llf: float
    llnull: float
    deviance: float
    null_deviance: float
    saturated: int
    null_b0: torch.Tensor | None
    shift_offset: bool = False  # softmax with an offset: a common shift of every class's eta


def _scalar_stats(model, batches, dtype, feature_names) -> _FitStats:
    fam = model.family
    sums = _Sums(fam, dtype, flat_parameters(model).device)
    for batch in batches:
        eta, yb, w = _batch_eta(model, batch, dtype)
        sums.has_offset |= batch.offset is not None
        sums.add(eta, yb, w)
    sums.finish()
    nobs = float(sums.rows) if fam.weight_is_trials else float(sums.weight)
    b0 = _null_intercept(model, batches, dtype, sums)
    null_dev = torch.zeros((), dtype=dtype, device=sums.weight.device)
    for batch in batches:
        eta, yb, w = _batch_eta(model, batch, dtype)
        d = fam.unit_deviance(yb, fam.mean(_null_eta(batch, eta, b0, dtype)))
        null_dev = null_dev + (d if w is None else w * d).sum()
    all_reduce_sum(null_dev)
    dispersion = fam.has_dispersion
    return _FitStats(
        names=model.parameter_names(_features(model, feature_names)),
        J=None,
        S=sums.weight,
        nobs=nobs,
        n_rows=int(sums.rows),
        n_constants=1,
        scale=1.0,
        scale_from_pearson=dispersion,
        pearson=float(sums.pearson),
        llf=float("nan") if dispersion else float(_log_likelihood(model, batches, dtype, 1.0)),
        llnull=float("nan")
        if dispersion
        else float(_log_likelihood(model, batches, dtype, 1.0, intercept=b0)),
        deviance=float(sums.deviance),
        null_deviance=float(null_dev),
        saturated=int(sums.saturated),
        null_b0=b0,
    )


def _categorical_stats(model, batches, dtype, feature_names) -> _FitStats:
    """Softmax regression: contrasts against class 0, multinomial log-likelihoods.

    An offset ``o_i`` is added to every class's ``eta_ik`` (the model's
    ``linear_predictor``), as for the scalar families. ``softmax(eta_i + o_i 1) =
    softmax(eta_i)``, so it changes neither the likelihood nor its derivatives, and the
    intercept-only model ``eta_ik = b_k + o_i`` still has the MLE ``p_k = n_k / n``:
    ``llnull`` from the class counts stays exact.
    """
    fam = model.family
    K, d = model.n_outputs, model.n_features
    has_bias = model.n_bias > 0
    device = flat_parameters(model).device
    counts = torch.zeros(K, dtype=dtype, device=device)
    S, rows, nll_sum, saturated = (torch.zeros((), dtype=dtype, device=device) for _ in range(4))
    shifted = False
    for batch in batches:
        shifted |= batch.offset is not None
        eta, yb, w = _batch_eta(model, batch, dtype)
        w = torch.ones(eta.shape[0], dtype=dtype, device=device) if w is None else w
        nll = fam.nll(eta, yb)
        S += w.sum()
        rows += eta.shape[0]
        nll_sum += (w * nll).sum()
        counts += torch.zeros_like(counts).index_add_(0, yb.long(), w)
        saturated += ((nll < 1e-10) & (w > 0)).sum()
    all_reduce_sum(S, rows, nll_sum, counts, saturated)
    llf = -float(nll_sum)
    llnull = float(torch.xlogy(counts, counts / S).sum())
    # J theta = [w_k - w_0, b_k - b_0] for k = 1..K-1 in the flat order [W.reshape(-1), b]
    p = K * d + (K if has_bias else 0)
    cols = d + has_bias
    J = torch.zeros((K - 1) * cols, p, dtype=dtype, device=device)
    features = _features(model, feature_names)
    names = []
    for k in range(1, K):
        for j in range(cols):
            row = (k - 1) * cols + j
            if j < d:
                J[row, k * d + j], J[row, j] = 1.0, -1.0
            else:
                J[row, K * d + k], J[row, K * d] = 1.0, -1.0
            names.append(f"{k}:{features[j] if j < d else 'intercept'}")
    return _FitStats(
        names=names,
        J=J,
        S=S,
        nobs=float(S),
        n_rows=int(rows),
        n_constants=(K - 1) if has_bias else 0,
        scale=1.0,
        scale_from_pearson=False,
        pearson=float("nan"),
        llf=llf,
        llnull=llnull,
        deviance=-2 * llf,
        null_deviance=-2 * llnull,
        saturated=int(saturated),
        null_b0=None,
        shift_offset=shifted,
    )
