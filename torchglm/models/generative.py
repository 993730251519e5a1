"""Generative classifiers: class-conditional densities plus Bayes' rule.

A generative classifier models the joint ``p(x, C_k) = p(x | C_k) p(C_k)`` and
classifies through Bayes' rule (seed 000, "Generative models"; seed 001)::

    a_k(x) = log p(x | C_k) + log p(C_k)          (the joint log-likelihood)
    p(C_k | x) = exp(a_k) / sum_j exp(a_j) = softmax(a)_k

so ``a`` plays the role of the linear predictor ``eta`` of a categorical GLM:
:meth:`GenerativeClassifier.forward` returns it, ``family`` is
:class:`~torchglm.families.Categorical`, and ``family.nll(model(x), y)`` is the
negative log posterior ``-log p(C_y | x)`` (a cross entropy). The trainer thus
computes the same metrics for generative and discriminative models.

Fitting is maximum likelihood in closed form from sufficient statistics. Every
statistic is a sum over samples (weighted class counts ``n_k = sum_i s_i t_ik``,
``sum_i s_i t_ik x_i``, ...), accumulated batch by batch and all-reduced across
processes before the MLE is formed (:class:`ClosedFormFitter`), so one pass
over any batch split gives the same fit as one pass over all the data.

Subclasses give:
    * ``_check_domain(name, x)``: support checks (counts, binary values...).
    * ``_statistic_shapes()``: ``{name: shape}`` of the per-class sums.
    * ``_batch_statistics(x, r)``: those sums for one batch, ``r`` being the
      (n, K) matrix of weighted class indicators ``s_i t_ik``.
    * ``_finalize(stats, class_count)``: the MLE from the summed statistics,
      written into buffers.
    * ``class_log_likelihood(x)``: ``log p(x | C_k)``, shape (n, K).
    * ``_sample_features(y, generator)``: draws ``x ~ p(x | C_{y_i})``.
    * ``n_parameters``: the number of estimated parameters (seed 000, "Degrees of freedom").
    * optionally ``_linear_parameters()`` -> ``(W (K, d), b (K,))`` when
      ``log p(x | C_k) = W_k x + b_k`` up to a term shared by all classes,
      which enables :meth:`GenerativeClassifier.to_linear`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._fitted import FittedFlag
from .._validation import (
    InputError,
    check_finite,
    check_same_length,
    check_weight,
    fail,
)
from ..data.batches import Batch, TensorBatches
from ..families import Categorical
from ..solvers.base import FitResult, Fitter, all_reduce_sum, run_passes

__all__ = ["GenerativeClassifier", "ClosedFormFitter"]


def _stored_values(x: torch.Tensor) -> torch.Tensor:
    """The stored entries of a dense or sparse (COO/CSR) tensor."""
    if x.layout == torch.sparse_coo:
        return x.coalesce().values()
    if x.layout == torch.sparse_csr:
        return x.values()
    return x


def row_sum(x: torch.Tensor, fn=None) -> torch.Tensor:
    """``sum_j fn(x_ij)`` for each row of a dense or sparse matrix, shape (n,).

    For sparse input only stored entries are visited, so ``fn(0)`` must be 0.
    """
    if x.layout == torch.strided:
        return (x if fn is None else fn(x)).sum(dim=1)
    coo = x.to_sparse_coo().coalesce() if x.layout != torch.sparse_coo else x.coalesce()
    values = coo.values() if fn is None else fn(coo.values())
    out = torch.zeros(x.shape[0], dtype=values.dtype, device=values.device)
    return out.index_add_(0, coo.indices()[0], values)


def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` for dense or sparse ``x`` (n, d) and dense ``w`` (d, m)."""
    if x.layout == torch.strided:
        return x @ w
    return torch.sparse.mm(x, w)


def class_sums(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``r^T x``: per-class weighted sums of the rows of ``x``, shape (K, d)."""
    if x.layout == torch.strided:
        return r.T @ x
    coo = x.to_sparse_coo() if x.layout != torch.sparse_coo else x
    return torch.sparse.mm(coo.t(), r).T


class GenerativeClassifier(FittedFlag, nn.Module):
    """Base class: fitted class-conditional densities, posteriors by Bayes' rule.

    Args:
        n_features: number of input columns ``d``.
        n_classes: number of classes ``K`` (labels ``0..K-1``).
        priors: fixed class priors ``p(C_k)`` (K positive numbers summing to 1);
            ``None`` fits them by maximum likelihood, ``pi_k = n_k / n`` (seed 000).
        dtype: dtype of the fitted statistics (default: torch's default dtype).

    Attributes:
        family: a :class:`~torchglm.families.Categorical` family:
            ``family.is_classifier`` is True and ``family.nll(model(x), y)`` is
            ``-log p(C_y | x)``.
        class_count: (K,) weighted number of training samples per class.
        log_prior: (K,) ``log p(C_k)``.
    """

    family = Categorical()

    def __init__(self, n_features: int, n_classes: int = 2,
                 priors: Sequence[float] | torch.Tensor | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
            raise fail("n_features", "a positive integer", n_features)
        if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 2:
            raise fail("n_classes", "an integer >= 2", n_classes)
        self.n_features = n_features
        self.n_classes = n_classes
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if not dtype.is_floating_point:
            raise fail("dtype", "a floating-point dtype", dtype)
        self.fit_priors = priors is None
        prior = (torch.full((n_classes,), 1.0 / n_classes, dtype=dtype)
                 if priors is None else self._check_priors(priors, dtype))
        self.register_buffer("class_count", torch.zeros(n_classes, dtype=dtype))
        self.register_buffer("log_prior", prior.log())
        self._register_fitted_flag()

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the fitted statistics (follows ``.to(dtype)``)."""
        return self.log_prior.dtype

    def _check_priors(self, priors, dtype: torch.dtype) -> torch.Tensor:
        p = torch.as_tensor(priors, dtype=dtype).flatten()
        if p.shape != (self.n_classes,):
            raise fail("priors", f"{self.n_classes} class probabilities", f"shape {tuple(p.shape)}")
        if not bool(torch.isfinite(p).all()) or bool((p <= 0).any()):
            raise fail("priors", "positive finite probabilities", p.tolist())
        if abs(float(p.sum()) - 1.0) > 1e-8:
            raise fail("priors", "probabilities summing to 1", f"sum {float(p.sum())}")
        return p / p.sum()

    # -- hooks subclasses implement -------------------------------------------
    def _check_domain(self, name: str, x: torch.Tensor) -> None:
        """Check that ``x`` lies in the support of ``p(x | C_k)``; raise InputError."""

    def _statistic_shapes(self) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _batch_statistics(self, x: torch.Tensor, r: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _finalize(self, stats: dict[str, torch.Tensor], class_count: torch.Tensor) -> None:
        raise NotImplementedError

    def class_log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """``log p(x | C_k)`` for each sample and class, shape (n, K)."""
        raise NotImplementedError

    def _sample_features(self, y: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError

    def _linear_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} has no linear form (its log-odds are not linear in x)")

    @property
    def n_parameters(self) -> int:
        """Number of estimated parameters (class priors count only when fitted)."""
        raise NotImplementedError

    @property
    def _n_prior_parameters(self) -> int:
        return self.n_classes - 1 if self.fit_priors else 0

    # -- prediction ------------------------------------------------------------

    def check_features(self, x: torch.Tensor, name: str = "X") -> torch.Tensor:
        """Validate a feature matrix (dense, or sparse where the model allows it)
        and return it in the model's dtype."""
        if not isinstance(x, torch.Tensor):
            raise fail(name, "a torch.Tensor", type(x).__name__)
        if x.dim() != 2:
            raise fail(name, "a 2-D tensor of shape (n_samples, n_features)", f"shape {tuple(x.shape)}")
        if x.layout != torch.strided and not self.accepts_sparse:
            raise fail(name, f"a dense tensor for {type(self).__name__}", f"layout {x.layout}")
        if x.shape[1] != self.n_features:
            raise fail(name, f"{self.n_features} feature columns", x.shape[1])
        if x.shape[0] == 0:
            raise fail(name, "at least one sample", "0 rows")
        if torch.is_complex(x):
            raise fail(name, "a real tensor", f"dtype {x.dtype}")
        x = x.to(self.dtype)
        check_finite(name, x)
        self._check_domain(name, x)
        return x

    #: whether torch sparse (COO/CSR) feature matrices are accepted.
    accepts_sparse: bool = False

    def joint_log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """``a_k(x) = log p(x | C_k) + log p(C_k)``, shape (n, K), without input checks."""
        return self.class_log_likelihood(x) + self.log_prior

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The joint log-likelihoods ``a = log p(x | C_k) + log p(C_k)``, (n, K).

        This is the ``eta`` of the categorical family: ``softmax(a)`` is the
        posterior and ``family.nll(a, y)`` is ``-log p(C_y | x)``. No input checks
        (the trainer's hot path); the ``predict*`` methods validate.
        """
        return self.joint_log_likelihood(x.to(self.dtype))

    def predict_log_proba(self, x: torch.Tensor) -> torch.Tensor:
        """``log p(C_k | x) = a_k - logsumexp_j a_j``, shape (n, K)."""
        self.check_fitted()
        a = self.joint_log_likelihood(self.check_features(x))
        return a - torch.logsumexp(a, dim=1, keepdim=True)

    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        """Posterior class probabilities ``p(C_k | x)``, shape (n, K)."""
        return self.predict_log_proba(x).exp()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The most probable class ``argmax_k a_k(x)``, shape (n,)."""
        self.check_fitted()
        return self.joint_log_likelihood(self.check_features(x)).argmax(dim=1)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """The marginal log density ``log p(x) = logsumexp_k a_k(x)``, shape (n,)."""
        self.check_fitted()
        return torch.logsumexp(self.joint_log_likelihood(self.check_features(x)), dim=1)

    # -- sampling --------------------------------------------------------------
    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``n`` pairs from the fitted joint: ``y ~ p(C)``, ``x ~ p(x | C_y)``.

        Seed 000: a generative model can "generate random documents statistically
        equivalent to the documents in the collection".

        Args:
            n: number of samples.
            generator: a ``torch.Generator`` on the model's device, for reproducibility.

        Returns:
            ``(x, y)``: features (n, d) and class labels (n,).
        """
        self.check_fitted()
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise fail("n", "a positive integer", n)
        y = torch.multinomial(self.log_prior.exp(), n, replacement=True, generator=generator)
        return self._sample_features(y, generator), y

    # -- the implied linear model ----------------------------------------------
    def to_linear(self):
        """The discriminative model with the same posterior.

        When ``a_k(x) = w_k^T x + w_k0`` up to a term shared by all classes,
        ``p(C_k | x) = softmax(W x + b)_k`` (seed 000, "Generative models and the
        exponential family"; seed 002, "Naive Bayes is a linear classifier").
        Two classes give a :class:`~torchglm.LogisticRegression` with
        ``w = w_1 - w_0`` and ``w0 = w_10 - w_00`` (class 1 is the positive
        class ``C_1``); more give a :class:`~torchglm.SoftmaxRegression` with
        one row per class.

        Returns:
            A fitted ``LogisticRegression`` or ``SoftmaxRegression`` in this model's dtype.

        Raises:
            NotImplementedError: for models whose log-odds are not linear (QDA, Gaussian NB).
        """
        from .glm import LogisticRegression, SoftmaxRegression

        self.check_fitted()
        w, b = self._linear_parameters()
        b = b + self.log_prior
        if self.n_classes == 2:
            model = LogisticRegression(self.n_features, dtype=self.dtype)
            w, b = (w[1] - w[0]).unsqueeze(0), (b[1] - b[0]).unsqueeze(0)
        else:
            model = SoftmaxRegression(self.n_features, self.n_classes, dtype=self.dtype)
        model = model.to(w.device)
        with torch.no_grad():
            model.linear.weight.copy_(w)
            model.linear.bias.copy_(b)
        model.mark_fitted()
        return model

    # -- fitting ---------------------------------------------------------------
    def make_fitter(self, solver: str = "closed_form", validate: bool = True, **options) -> "ClosedFormFitter":
        """A one-pass :class:`ClosedFormFitter` (the trainer's entry point).

        Args:
            solver: ``"closed_form"`` (``"auto"`` is accepted as its synonym).
            validate: check each batch's features and labels as it arrives (the
                boundary for streamed data); :meth:`fit` checks all data once
                and turns this off.
        """
        if solver not in ("closed_form", "auto"):
            raise fail("solver", f"'closed_form' for {type(self).__name__}", repr(solver))
        if options:
            raise fail("options", "no options for the closed-form fit", sorted(options))
        return ClosedFormFitter(self, validate=validate)

    def check_data(self, x: torch.Tensor, y: torch.Tensor,
                   weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate features, labels and weights; return ``(x, y)`` with long labels."""
        x = self.check_features(x)
        if not isinstance(y, torch.Tensor):
            raise fail("y", "a torch.Tensor", type(y).__name__)
        check_same_length(["X", "y"], x, y)
        check_weight(weight, x.shape[0])
        return x, self.family.check_target(y, self.n_classes)

    def fit(self, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None,
            batch_size: int | None = None) -> FitResult:
        """Maximum likelihood fit in one pass (in place).

        Args:
            x: features (n_samples, n_features); dense, or torch sparse COO/CSR
                for the count models.
            y: class labels in ``0..K-1``, shape (n_samples,).
            weight: optional non-negative sample weights (n_samples,): every
                sufficient statistic becomes a weighted sum.
            batch_size: accumulate in slices of this many rows (dense input only);
                the result does not depend on it.

        Returns:
            The :class:`~torchglm.solvers.base.FitResult` (``converged=True``, one pass).

        Raises:
            InputError: invalid data, an empty class, or a statistic that
                admits no estimate (see the subclass).
        """
        x, y = self.check_data(x, y, weight)
        fitter = self.make_fitter(validate=False)
        if x.layout != torch.strided:
            if batch_size is not None:
                raise fail("batch_size", "None for sparse input (one batch)", batch_size)
            batches = [Batch(x, y, weight)]
        else:
            batches = TensorBatches(x, y, weight, batch_size=batch_size)
        return run_passes(fitter, batches, max_passes=1)

    def _check_class_count(self, class_count: torch.Tensor) -> None:
        empty = (class_count <= 0).nonzero().flatten()
        if empty.numel():
            k = int(empty[0])
            raise InputError(
                f"y: expected samples (positive total weight) in every class 0..{self.n_classes - 1}, "
                f"got none in class {k}"
            )

    def _set_fitted(self, class_count: torch.Tensor) -> None:
        self.class_count.copy_(class_count)
        if self.fit_priors:
            self.log_prior.copy_(class_count.log() - class_count.sum().log())
        self.mark_fitted()

    def extra_repr(self) -> str:
        return f"n_features={self.n_features}, n_classes={self.n_classes}, fit_priors={self.fit_priors}"


class ClosedFormFitter(Fitter):
    """One pass of sufficient statistics, then the closed-form MLE.

    ``start_pass`` zeroes the sums, ``accumulate`` adds one batch's
    ``n_k = sum_i s_i t_ik`` and the model's per-class sums, ``end_pass``
    all-reduces them (:func:`~torchglm.solvers.base.all_reduce_sum`), forms the
    MLE and returns ``done = True``.
    """

    def __init__(self, model: GenerativeClassifier, validate: bool = True):
        self.model = model
        self.validate = validate
        self.done = False
        self.result = FitResult("closed_form", message="not run")
        self._stats: dict[str, torch.Tensor] | None = None

    def start_pass(self) -> None:
        m = self.model
        like = m.log_prior
        self._stats = {"class_count": torch.zeros(m.n_classes, dtype=like.dtype, device=like.device)}
        for name, shape in m._statistic_shapes().items():
            self._stats[name] = torch.zeros(shape, dtype=like.dtype, device=like.device)

    def accumulate(self, batch: Batch) -> None:
        if self._stats is None:
            raise RuntimeError("accumulate() called before start_pass()")
        m = self.model
        x, y, weight = batch.x, batch.y, batch.weight
        if self.validate:
            x, y = m.check_data(x, y, weight)
        else:
            x = x.to(m.dtype)
            y = y.long()
        r = F.one_hot(y, m.n_classes).to(m.dtype)
        if weight is not None:
            r = r * weight.to(m.dtype).unsqueeze(1)
        self._stats["class_count"] += r.sum(dim=0)
        for name, value in m._batch_statistics(x, r).items():
            self._stats[name] += value

    def end_pass(self) -> bool:
        if self._stats is None:
            raise RuntimeError("end_pass() called before start_pass()")
        stats = self._stats
        all_reduce_sum(*stats.values())
        class_count = stats.pop("class_count")
        with torch.no_grad():
            self.model._finalize(stats, class_count)
        self.done = True
        self.result = FitResult(
            "closed_form", converged=True, n_iter=1,
            message="closed-form maximum likelihood from one pass of sufficient statistics",
            extra={"n_samples": float(class_count.sum())},
        )
        self._stats = None
        return True


def log_det_and_factor(cov: torch.Tensor, name: str):
    """Cholesky factor of (a batch of) covariance matrices, with jitter if needed.

    Tries ``cov`` itself, then ``cov + eps * c * I`` for ``eps = 1e-10, 1e-9, ..., 1e-1``
    with ``c`` the mean diagonal (1 where it is not positive). Returns
    ``(cov_used, L, log|cov_used|, eps)``; the caller warns when ``eps > 0``.

    Raises:
        InputError: if no jitter up to 0.1 makes the matrix positive definite.
    """
    d = cov.shape[-1]
    eye = torch.eye(d, dtype=cov.dtype, device=cov.device)
    scale = cov.diagonal(dim1=-2, dim2=-1).mean(dim=-1)[..., None, None]
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    for eps in [0.0] + [10.0 ** p for p in range(-10, 0)]:
        jittered = cov + eps * scale * eye if eps else cov
        L, info = torch.linalg.cholesky_ex(jittered)
        if not bool(info.any()):
            return jittered, L, 2 * L.diagonal(dim1=-2, dim2=-1).log().sum(dim=-1), eps
    raise InputError(f"{name}: expected a matrix that jitter up to 0.1 x its mean variance makes "
                     f"positive definite, got a non-finite or indefinite matrix")


LOG_2PI = math.log(2 * math.pi)
