"""Generative classifiers: class-conditional densities plus Bayes' rule.

A generative classifier models the joint ``p(x, C_k) = p(x | C_k) p(C_k)`` and
classifies through Bayes' rule (the lecture notes on probabilistic classification, §2; Bishop PRML §4.2)::

    a_k(x) = log p(x | C_k) + log p(C_k)          (the joint log-likelihood)
    p(C_k | x) = exp(a_k) / sum_j exp(a_j) = softmax(a)_k

so ``a`` plays the role of the linear predictor ``eta`` of a categorical GLM:
:meth:`GenerativeClassifier.forward` returns it, ``family`` is
:class:`~torchglm.families.Categorical`, and ``family.nll(model(x), y)`` is the
negative log posterior ``-log p(C_y | x)`` (a cross entropy). The trainer thus
computes the same metrics for generative and discriminative models.

The posterior is unchanged when a term ``c(x)`` shared by all classes is dropped
from ``a`` (the lecture notes, §2: it cancels in the softmax), and is formed by ``log_softmax``
(``a - max_k a_k`` first), so its rows sum to 1 to rounding for any finite ``a``;
a non-finite ``a`` (a squared distance that overflows the dtype) raises
:class:`~torchglm.InputError` instead of returning NaN.

Fitting is maximum likelihood in closed form from sufficient statistics. Every
statistic is a sum over samples (weighted class counts ``n_k = sum_i s_i t_ik``,
``sum_i s_i t_ik x_i``, ...; Gaussian second moments are summed around a
per-class shift and merged across processes with Chan's formula, see
:mod:`torchglm.models._moments`), accumulated batch by batch and all-reduced
across processes before the MLE is formed (:class:`ClosedFormFitter`), so one
pass over any batch split gives the same fit as one pass over all the data.

Precision follows the data: statistics are accumulated in
``torch.promote_types(model.dtype, X.dtype)`` and a fit moves the model's buffers
to that dtype, so float64 data fitted into a default (float32) model gives a
float64 model; nothing is cast down. Prediction casts its input to the model's
dtype (a value that overflows it is an InputError).

Subclasses give:
    * ``_check_domain(name, x, extremes)``: support checks (counts, binary values...);
      ``extremes``: the stored values' ``(min, max)`` the finiteness check read.
    * either ``_moments_kind`` (``"diagonal"``, ``"full"`` or ``"pooled"``:
      class means and centred scatter, :class:`~torchglm.models._moments.ClassMoments`),
      or ``_statistic_shapes()`` (``{name: shape}`` of the per-class sums) and
      ``_batch_statistics(x, r)`` (those sums for one batch, ``r`` being the
      (n, K) matrix of weighted class indicators ``s_i t_ik``).
    * ``_finalize(stats, class_count)``: the MLE from the reduced statistics,
      written into buffers.
    * ``class_log_likelihood(x)``: ``log p(x | C_k)``, shape (n, K).
    * optionally ``relative_log_likelihood(x)``: ``log p(x | C_k) - c(x)`` with
      ``c(x)`` shared by the classes and dropped for precision (default: ``c = 0``).
    * ``_sample_features(y, generator)``: draws ``x ~ p(x | C_{y_i})``.
    * ``n_parameters``: the number of estimated parameters (the lecture notes, §7, "Degrees of freedom").
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
from ._moments import ClassMoments, SumStatistics, agree_dtype
from .._validation import (
    InputError,
    as_tensor,
    check_class_weights,
    check_finite,
    check_same_length,
    check_weight,
    fail,
    feature_names_of,
    to_tensor,
)
from ..data.batches import Batch, TensorBatches
from ..families import Categorical
from ..passes import FitResult, Fitter, run_passes
from ..solvers.sparse_rows import SparseRows

__all__ = ["GenerativeClassifier", "ClosedFormFitter"]


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
    # The solvers' product back onto sparse rows (scipy's CSR-transpose product on a
    # CPU: 0.85 s through COO's sparse.mm measured on a 25,000 x 10,000 bag of words).
    return SparseRows.of(x, None, x.dtype).rt(r)


class GenerativeClassifier(FittedFlag, nn.Module):
    """Base class: fitted class-conditional densities, posteriors by Bayes' rule.

    Args:
        n_features: number of input columns ``d``.
        n_classes: number of classes ``K`` (labels ``0..K-1``).
        priors: fixed class priors ``p(C_k)`` (K positive numbers summing to 1);
            ``None`` fits them by maximum likelihood, ``pi_k = n_k / n`` (the lecture notes, §4).
        dtype: dtype of the fitted statistics (default: torch's default dtype). A
            fit with wider data (float64 into float32) moves the model to the
            data's dtype: precision follows the data and is never cast down.

    Attributes:
        family: a :class:`~torchglm.families.Categorical` family:
            ``family.is_classifier`` is True and ``family.nll(model(x), y)`` is
            ``-log p(C_y | x)``.
        class_count: (K,) weighted number of training samples per class.
        log_prior: (K,) ``log p(C_k)``.
    """

    family = Categorical()

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        priors: Sequence[float] | torch.Tensor | None = None,
        dtype: torch.dtype | None = None,
    ):
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
        prior = (
            torch.full((n_classes,), 1.0 / n_classes, dtype=dtype)
            if priors is None
            else self._check_priors(priors, dtype)
        )
        self.register_buffer("class_count", torch.zeros(n_classes, dtype=dtype))
        self.register_buffer("log_prior", prior.log())
        #: column names of the last fit's DataFrame (``None`` for arrays and tensors).
        self.feature_names: list[str] | None = None
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
    def _check_domain(self, name: str, x: torch.Tensor, extremes: tuple[float, float] | None) -> None:
        """Check that ``x`` lies in the support of ``p(x | C_k)``; raise InputError.
        ``extremes``: the smallest and largest stored value (from the finiteness
        check's one reduction; ``None`` for an integer tensor)."""

    #: ``None`` (plain sums from ``_batch_statistics``) or the layout of the class
    #: moments: ``"diagonal"``, ``"full"`` or ``"pooled"`` (see :class:`ClassMoments`).
    _moments_kind: str | None = None

    def _statistic_shapes(self) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _batch_statistics(self, x: torch.Tensor, r: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _accumulator(self, dtype: torch.dtype, device: torch.device):
        """The statistics one pass accumulates, in ``dtype``."""
        if self._moments_kind is not None:
            return ClassMoments(self.n_classes, self.n_features, self._moments_kind, dtype, device)
        return SumStatistics(self.n_classes, self._statistic_shapes(), self._batch_statistics, dtype, device)

    def _finalize(self, stats: dict[str, torch.Tensor], class_count: torch.Tensor) -> None:
        raise NotImplementedError

    def class_log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """``log p(x | C_k)`` for each sample and class, shape (n, K)."""
        raise NotImplementedError

    def relative_log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """``log p(x | C_k) - c(x)`` with ``c(x)`` shared by every class, shape (n, K).

        The posterior and the decision depend on ``a`` only up to such a term
        (the lecture notes, §3, "Multiple classes"); a model drops it where it would swamp the
        differences between classes (the multinomial coefficient, ``x^T Sigma^{-1} x``).
        """
        return self.class_log_likelihood(x)

    def _sample_features(self, y: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError

    def _linear_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(
            f"{type(self).__name__} has no linear form (its log-odds are not linear in x)"
        )

    @property
    def n_parameters(self) -> int:
        """Number of estimated parameters (class priors count only when fitted)."""
        raise NotImplementedError

    @property
    def _n_prior_parameters(self) -> int:
        return self.n_classes - 1 if self.fit_priors else 0

    # -- prediction ------------------------------------------------------------

    def check_features(self, x: torch.Tensor, name: str = "X", promote: bool = False) -> torch.Tensor:
        """Validate a feature matrix (dense, or sparse where the model allows it): a
        tensor or an array-like (NumPy, pandas, scipy.sparse), converted once by
        :func:`~torchglm._validation.to_tensor` onto the model's device.

        Returns it in the model's dtype, or with ``promote=True`` (fitting) in
        ``torch.promote_types(model.dtype, x.dtype)``, so data are never cast down.

        Raises:
            InputError: not a 2-D real tensor, wrong width, no rows, non-finite
                values (or values that overflow the model's dtype), values outside
                the model's support.
        """
        x = to_tensor(name, x, device=self.log_prior.device, float_dtype=self.dtype)
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
        dtype = self.working_dtype(x) if promote else self.dtype
        cast = x.to(dtype)
        try:
            extremes = check_finite(name, cast)
        except InputError:
            if cast is x or not x.is_floating_point():
                raise
            check_finite(name, x)  # the input itself is bad: say so
            raise fail(
                name,
                f"values within the range of {dtype} (the model's dtype)",
                f"values that overflow when cast from {x.dtype}",
            ) from None
        self._check_domain(name, cast, extremes)
        return cast

    def working_dtype(self, x: torch.Tensor) -> torch.dtype:
        """The dtype a fit on ``x`` accumulates in: the wider of the model's and the data's."""
        return torch.promote_types(self.dtype, x.dtype) if x.is_floating_point() else self.dtype

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

    def _checked(self, x: torch.Tensor) -> torch.Tensor:
        self.check_fitted()
        return self.check_features(x)

    def _finite(self, value: torch.Tensor, x: torch.Tensor, what: str) -> torch.Tensor:
        """Raise instead of returning NaN when ``value`` (one entry per row) overflowed."""
        bad = ~torch.isfinite(value)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            big = float(x[i].abs().max()) if x.layout == torch.strided else float("nan")
            raise fail(
                "X",
                f"features small enough that {what} is finite in {self.dtype}",
                f"{int(bad.sum())} rows where it overflows, first row {i} (max |x| = {big:.3g})",
            )
        return value

    def _relative_joint(self, x: torch.Tensor) -> torch.Tensor:
        """``a_k - c(x)`` for checked ``x``; every row has a finite maximum."""
        a = self.relative_log_likelihood(x) + self.log_prior
        # amax propagates NaN and catches +inf and all -inf rows; a -inf entry
        # below a finite maximum is a posterior of exactly 0.
        self._finite(a.amax(dim=1), x, "log p(x | C_k) + log p(C_k)")
        return a

    @torch.no_grad()
    def predict_log_proba(self, x: torch.Tensor) -> torch.Tensor:
        """``log p(C_k | x) = log_softmax(a)_k``, shape (n, K), in the model's dtype.

        ``a`` is max-shifted before the normalizer (``log_softmax``), so
        ``exp`` of a row sums to 1 to rounding even at ``|a| ~ 1e34``.

        Raises:
            NotFittedError: before a fit.
            InputError: invalid ``x``, or ``a`` not finite in the model's dtype.
        """
        return self.log_posterior(self._checked(x))

    def log_posterior(self, x: torch.Tensor) -> torch.Tensor:
        """``log p(C_k | x)`` as :meth:`predict_log_proba`, for features that have
        passed :meth:`check_features` (no fitted check, no input gate: the path of a
        caller that made both, as the scikit-learn estimators do once per call)."""
        return torch.log_softmax(self._relative_joint(x), dim=1)

    @torch.no_grad()
    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        """Posterior class probabilities ``p(C_k | x) = softmax(a)_k``, shape (n, K)."""
        return self.predict_log_proba(x).exp()

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The most probable class ``argmax_k a_k(x)``, shape (n,)."""
        x = self._checked(x)
        return self._relative_joint(x).argmax(dim=1)

    @torch.no_grad()
    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """The marginal log density ``log p(x) = logsumexp_k a_k(x)``, shape (n,)."""
        x = self._checked(x)
        return self._finite(torch.logsumexp(self.joint_log_likelihood(x), dim=1), x, "log p(x)")

    # -- sampling --------------------------------------------------------------
    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``n`` pairs from the fitted joint: ``y ~ p(C)``, ``x ~ p(x | C_y)``.

        A generative model can "generate random documents statistically equivalent to
        the documents in the collection" (the lecture notes, §2).

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
        ``p(C_k | x) = softmax(W x + b)_k`` (the lecture notes, §5, and §13:
        "Naive Bayes is a linear classifier"; Bishop PRML §4.2.4).
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
    def make_fitter(
        self, solver: str = "closed_form", validate: bool = True, **options
    ) -> "ClosedFormFitter":
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

    def check_data(self, x, y, weight=None, promote: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate features, labels and weights (tensors or array-likes); return
        ``(x, y)`` with long labels (``x`` as :meth:`check_features` returns it)."""
        x = self.check_features(x, promote=promote)
        y = to_tensor("y", y, device=x.device)
        check_same_length(["X", "y"], x, y)
        weight = as_tensor("weight", weight, x)
        check_weight(weight, x.shape[0])
        return x, self.family.check_target(y, self.n_classes)

    def fit(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        batch_size: int | None = None,
    ) -> FitResult:
        """Maximum likelihood fit in one pass (in place).

        Args:
            x: features (n_samples, n_features): a tensor or an array-like (NumPy,
                pandas: its column names become ``feature_names``); dense, or
                sparse (torch COO/CSR, scipy.sparse) for the count models.
            y: class labels in ``0..K-1``, shape (n_samples,).
            weight: optional non-negative sample weights (n_samples,): every
                sufficient statistic becomes a weighted sum.
            batch_size: accumulate in slices of this many rows (dense input only);
                the result does not depend on it.

        The statistics are accumulated in the wider of the model's and the data's
        dtype, and the model moves to that dtype (float64 data give a float64 model).

        Returns:
            The :class:`~torchglm.passes.FitResult` (``converged=True``, one pass).

        Raises:
            InputError: invalid data, an empty class, or a statistic that
                admits no estimate (see the subclass).
        """
        names = feature_names_of(x)
        if weight is not None:
            weight = to_tensor("weight", weight, device=self.log_prior.device)
        x, y = self.check_data(x, y, weight, promote=True)
        fitter = self.make_fitter(validate=False)
        if x.layout != torch.strided:
            if batch_size is not None:
                raise fail("batch_size", "None for sparse input (one batch)", batch_size)
            batches = [Batch(x, y, weight)]
        else:
            batches = TensorBatches(x, y, weight, batch_size=batch_size)
        result = run_passes(fitter, batches, max_passes=1)
        self.feature_names = names
        return result

    def _check_class_count(self, class_count: torch.Tensor) -> None:
        check_class_weights("y", class_count)

    def _set_fitted(self, class_count: torch.Tensor) -> None:
        self.class_count.copy_(class_count)
        if self.fit_priors:
            self.log_prior.copy_(class_count.log() - class_count.sum().log())
        self.mark_fitted()

    def extra_repr(self) -> str:
        return f"n_features={self.n_features}, n_classes={self.n_classes}, fit_priors={self.fit_priors}"


class ClosedFormFitter(Fitter):
    """One pass of sufficient statistics, then the closed-form MLE.

    ``start_pass`` forgets the statistics, ``accumulate`` adds one batch's
    ``n_k = sum_i s_i t_ik`` and the model's per-class statistics (created at the
    first batch in the model's :meth:`~GenerativeClassifier.working_dtype` for it),
    ``end_pass`` agrees the dtype across processes, reduces the statistics
    (all-reduced sums; see :mod:`torchglm.models._moments`), moves the model to
    that dtype if it is wider, forms the MLE and returns ``done = True``.
    """

    def __init__(self, model: GenerativeClassifier, validate: bool = True):
        self.validate = validate
        self.restart_from(model)

    def begin(self) -> None:
        # The statistics take the model's device and dtype at the pass, not here.
        self.result = FitResult("closed_form", message="not run")
        self._acc = None
        self._started = False

    def start_pass(self) -> None:
        self._acc = None
        self._started = True

    def accumulate(self, batch: Batch) -> None:
        if not self._started:
            raise RuntimeError("accumulate() called before start_pass()")
        m = self.model
        x, y, weight = batch.x, batch.y, batch.weight
        if self.validate:
            x, y = m.check_data(x, y, weight, promote=True)
        else:
            x = x.to(m.working_dtype(x))
            y = y.long()
        dtype = x.dtype
        if self._acc is None:
            self._acc = m._accumulator(dtype, m.log_prior.device)
        elif self._acc.dtype != torch.promote_types(self._acc.dtype, dtype):
            self._acc.to(torch.promote_types(self._acc.dtype, dtype))
        dtype = self._acc.dtype
        x = x.to(dtype)
        r = F.one_hot(y, m.n_classes).to(dtype)
        if weight is not None:
            r = r * weight.to(dtype).unsqueeze(1)
        self._acc.add(x, y, r)

    def end_pass(self) -> bool:
        if not self._started:
            raise RuntimeError("end_pass() called before start_pass()")
        m = self.model
        device = m.log_prior.device
        acc = self._acc if self._acc is not None else m._accumulator(m.dtype, device)
        dtype = agree_dtype(acc.dtype, device)
        if dtype != acc.dtype:
            acc.to(dtype)
        stats, class_count = acc.reduce()
        if dtype != m.dtype:
            m.to(dtype)
        with torch.no_grad():
            m._finalize(stats, class_count)
        self.done = True
        self.result = FitResult(
            "closed_form",
            converged=True,
            n_iter=1,
            message="closed-form maximum likelihood from one pass of sufficient statistics",
            extra={"n_samples": float(class_count.sum())},
        )
        self._acc = None
        self._started = False
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
    for eps in [0.0] + [10.0**p for p in range(-10, 0)]:
        jittered = cov + eps * scale * eye if eps else cov
        L, info = torch.linalg.cholesky_ex(jittered)
        if not bool(info.any()):
            return jittered, L, 2 * L.diagonal(dim1=-2, dim2=-1).log().sum(dim=-1), eps
    raise InputError(
        f"{name}: expected a matrix that jitter up to 0.1 x its mean variance makes "
        f"positive definite, got a non-finite or indefinite matrix"
    )


LOG_2PI = math.log(2 * math.pi)
