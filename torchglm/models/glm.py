"""Generalized linear models as single-layer ``nn.Module``s.

``eta = W x + b`` (one ``nn.Linear``), ``mu = g^{-1}(eta)`` through the family's
link, trained on the family's negative log-likelihood (the lecture notes on probabilistic classification,
§6; §15: "logistic regression as a one-layer neural net"; McCullagh & Nelder §2.2).

The objective every solver minimizes is the weighted mean NLL plus an L2
penalty on the weights (not the bias)::

    E(w) = sum_i s_i nll(eta_i, y_i) / sum_i s_i + (l2 / 2) ||W||^2

which is the negative log posterior (divided by the total weight) under the
Gaussian prior ``w ~ N(0, lambda I)`` (the lecture notes, §14; Bishop PRML §4.5.1) with
``l2 = 1 / (lambda sum_i s_i)``.
"""

from __future__ import annotations

import contextlib

import math

import torch
from torch import nn

from ._fitted import FittedFlag
from .._validation import (
    as_data,
    as_tensor,
    check_features,
    check_offset,
    check_positive,
    check_same_length,
    check_targets,
    check_weight,
    fail,
    to_tensor,
)
from ..families import Family, get_family
from ..links import Link
from ..passes import linear_predictor
from ..penalty import L2Penalty
from ..solvers import fit as _fit
from ..solvers.curvature import scale_rows
from ..solvers.eta_derivatives import eta_derivatives
from ..solvers import make_fitter as _make_fitter
from ..solvers.products import rt_x

__all__ = [
    "GeneralizedLinearModel",
    "LogisticRegression",
    "ProbitRegression",
    "SoftmaxRegression",
]


class GeneralizedLinearModel(FittedFlag, nn.Module):
    """A GLM: one linear layer, a family and a link.

    Args:
        n_features: number of input columns ``d``.
        family: a name from :data:`torchglm.families.FAMILIES` or a ``Family``.
        link: a link name; ``None`` takes the family's canonical link.
        n_classes: number of classes ``K`` for the categorical family.
        l2: L2 penalty strength on the weights, finite and ``>= 0`` (the bias is not penalized).
        fit_intercept: include the bias ``w0``.
        dtype: parameter dtype (float64 is the default for Newton-type solvers).

    Example:
        >>> m = GeneralizedLinearModel(3, "bernoulli", link="probit")
        >>> m(torch.zeros(5, 3)).shape
        torch.Size([5])
    """

    def __init__(
        self,
        n_features: int,
        family: str | Family = "bernoulli",
        link: str | Link | None = None,
        n_classes: int | None = None,
        l2: float = 0.0,
        fit_intercept: bool = True,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if not isinstance(n_features, int) or n_features < 1:
            raise fail("n_features", "a positive integer", n_features)
        check_positive("l2", l2, allow_zero=True)
        if not math.isfinite(l2):
            # l2 = inf: the objective is infinite at every w != 0 (and NaN-valued,
            # inf * 0, at w = 0): no fit, only NaNs. Every model, config and
            # scikit-learn wrapper (alpha, l2 = 1 / (C n)) builds through here.
            raise fail("l2", "a finite non-negative number", l2)
        self.family = get_family(family, link)
        if self.family.is_classifier and not self.family.multi_output:
            n_classes = 2 if n_classes is None else n_classes
            if n_classes != 2:
                raise fail("n_classes", f"2 for the '{self.family.name}' family", n_classes)
        self.n_features = n_features
        self.n_classes = n_classes
        self.l2 = float(l2)
        self.fit_intercept = fit_intercept
        #: column names of the last fit's DataFrame (``None`` for arrays and tensors);
        #: :func:`~torchglm.glm_results` names the coefficients after them.
        self.feature_names: list[str] | None = None
        n_out = self.family.n_outputs(n_classes)
        self.linear = nn.Linear(n_features, n_out, bias=fit_intercept, dtype=dtype)
        nn.init.zeros_(self.linear.weight)
        if fit_intercept:
            nn.init.zeros_(self.linear.bias)
        # The fitted flag travels with the state_dict, so a loaded checkpoint predicts.
        self._register_fitted_flag()

    # -- prediction ---------------------------------------------------------
    @property
    def link(self) -> Link:
        return self.family.link

    @property
    def n_outputs(self) -> int:
        """Rows of ``W``: 1 for single-output families, ``K`` for softmax."""
        return self.linear.out_features

    def forward(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """Linear predictor ``eta = x W^T + b (+ offset)``: (n,) or (n, K) for softmax."""
        return linear_predictor(x, self.linear.weight, self.linear.bias, offset, self.family.multi_output)

    # -- parameter layout -----------------------------------------------------
    # The flat vector ``theta = [vec W, b]``: weight row ``k`` (output ``k``) feature ``j``
    # at ``k * n_features + j``, then the biases at ``n_outputs * n_features + k``.
    @property
    def n_weights(self) -> int:
        """Entries of ``W`` in ``theta`` (``n_outputs * n_features``)."""
        return self.linear.weight.numel()

    @property
    def n_bias(self) -> int:
        """Entries of ``b`` in ``theta`` (``n_outputs``, 0 without intercept)."""
        return self.n_outputs if self.has_intercept else 0

    # Read accessors: code outside ``models/`` reads the coefficients through these,
    # never through ``self.linear``, so the layout can change in one place.
    @property
    def has_intercept(self) -> bool:
        """Whether ``eta`` has the bias ``b`` (``fit_intercept`` at construction)."""
        return self.linear.bias is not None

    @property
    def coef(self) -> torch.Tensor:
        """``W`` of shape (n_outputs, n_features): a detached view of the parameter
        (no copy; it shares storage, so it follows later fits)."""
        return self.linear.weight.detach()

    @property
    def intercept(self) -> torch.Tensor | None:
        """``b`` of shape (n_outputs,): a detached view like :attr:`coef`; ``None``
        without intercept."""
        b = self.linear.bias
        return None if b is None else b.detach()

    @property
    def param_dtype(self) -> torch.dtype:
        """The parameters' dtype (inputs are cast to it for prediction)."""
        return self.linear.weight.dtype

    @property
    def param_device(self) -> torch.device:
        """The parameters' device."""
        return self.linear.weight.device

    def linear_predictor(
        self, theta: torch.Tensor, x: torch.Tensor, offset: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``eta = x W^T + b + offset`` at flat parameters ``theta`` (p,) or a stack (S, p)
        (:func:`~torchglm.passes.linear_predictor`); (n,)/(n, K), or (S, n)/(S, n, K) for a stack.
        Computed in the wider of ``theta``'s and ``x``'s dtypes (float32 data under a
        float64 posterior are promoted, never the posterior cast down)."""
        dt = torch.promote_types(theta.dtype, x.dtype)
        theta, x = theta.to(dt), x.to(dt)
        if offset is not None:
            offset = offset.to(dt)
        m = self.n_weights
        W = theta[..., :m].reshape(*theta.shape[:-1], *self.linear.weight.shape)
        b = theta[..., m:] if self.n_bias else None
        return linear_predictor(x, W, b, offset, self.family.multi_output)

    def flat_parameters(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``theta = [W.reshape(-1), b]`` as one detached vector (a copy), in ``dtype``
        (the model's when ``None``)."""
        parts = [self.linear.weight.detach().reshape(-1)]
        if self.linear.bias is not None:
            parts.append(self.linear.bias.detach())
        theta = torch.cat(parts)
        return theta.to(dtype) if dtype is not None else theta.clone()

    def set_flat_parameters(self, theta: torch.Tensor) -> None:
        """Write a flat ``theta = [W.reshape(-1), b]`` into the parameters (cast to
        their dtype), without recording it for autograd."""
        linear = self.linear  # (each module attribute read costs a lookup: a solver writes every step)
        weight, bias = linear.weight, linear.bias
        m, d = weight.shape
        # (Inference mode, where the solvers' passes run, records nothing either.)
        with contextlib.nullcontext() if torch.is_inference_mode_enabled() else torch.no_grad():
            weight.copy_(theta[: m * d].view(m, d))
            if bias is not None:
                bias.copy_(theta[m * d :])

    def parameter_names(self, feature_names: list[str] | None = None) -> list[str]:
        """Names of ``theta``'s entries, in its order.

        Without ``feature_names``: ``weight[k,j]`` then ``bias[k]``. With them (one per
        column): the feature's name (``k:name`` with several outputs), then
        ``intercept`` (``k:intercept``).

        Raises:
            InputError: ``feature_names`` not of length ``n_features``.
        """
        m, d = self.linear.weight.shape
        if feature_names is None:
            weights = [f"weight[{k},{j}]" for k in range(m) for j in range(d)]
            return weights + [f"bias[{k}]" for k in range(self.n_bias)]
        if len(feature_names) != d:
            raise fail("feature_names", f"{d} names", len(feature_names))
        prefix = [""] if m == 1 else [f"{k}:" for k in range(m)]
        names = list(feature_names) if m == 1 else [f"{p}{n}" for p in prefix for n in feature_names]
        return names + [f"{p}intercept" for p in prefix[: self.n_bias]]

    def as_data(self, x, y=None, weight=None, offset=None):
        """Array-likes (NumPy, pandas, scipy.sparse, lists) as tensors on the model's
        device (:func:`~torchglm._validation.as_data`); integer features become the
        model's dtype, floating ones keep their precision."""
        p = self.linear.weight
        return as_data(x, y, weight, offset, device=p.device, float_dtype=p.dtype)

    def check_features(self, x, name: str = "X") -> torch.Tensor:
        """The prediction gate without the fitted check: ``x`` (a tensor or an
        array-like, :func:`~torchglm._validation.to_tensor`) 2-D with
        ``n_features`` columns and finite (:func:`~torchglm._validation.check_features`),
        returned in the parameters' dtype and on their device, ready for :meth:`forward`.

        Raises:
            InputError: a wrong shape or feature count, non-finite values.
        """
        p = self.linear.weight
        x = to_tensor(name, x, device=p.device, float_dtype=p.dtype)
        check_features(name, x, self.n_features)
        return x.to(device=p.device, dtype=p.dtype)

    def _check_predict(self, x, offset) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Validate prediction inputs like :meth:`check_data` and cast them to the
        parameters' dtype and device."""
        self.check_fitted()
        x = self.check_features(x)
        offset = as_tensor("offset", offset, x)
        check_offset(offset, x.shape[0])
        return x, offset

    @torch.no_grad()
    def predict_proba(self, x, offset=None) -> torch.Tensor:
        """The mean ``mu = g^{-1}(eta)``: p(C_1|x) of shape (n,) for binary models,
        class probabilities (n, K) for softmax, E[y|x] for regression families.

        The validated user API: :meth:`forward` (and ``family.mean``) is the
        unchecked path for code that needs gradients or predicts mid-fit.

        Args:
            x: features (n_samples, n_features): a tensor, NumPy array, pandas
                DataFrame or scipy.sparse matrix; cast to the model's dtype and device.
            offset: optional known term added to eta, shape (n_samples,).

        Returns:
            A detached tensor in the model's dtype.

        Raises:
            NotFittedError: before the first fit.
            InputError: a wrong shape or feature count, non-finite values.
        """
        x, offset = self._check_predict(x, offset)
        return self.family.mean(self(x, offset))

    @torch.no_grad()
    def predict(self, x, offset=None) -> torch.Tensor:
        """Labels (classifiers) or the predicted mean (regression families); checked
        like :meth:`predict_proba`."""
        x, offset = self._check_predict(x, offset)
        return self.family.predict(self(x, offset))

    @torch.no_grad()
    def predict_eta(self, x, offset=None) -> torch.Tensor:
        """The linear predictor ``eta``, checked and cast like :meth:`predict_proba`
        (the validated, detached counterpart of :meth:`forward`): (n,) or (n, K)."""
        x, offset = self._check_predict(x, offset)
        return self(x, offset)

    # -- objective ----------------------------------------------------------
    @property
    def l2_penalty(self) -> L2Penalty:
        """The objective's :class:`~torchglm.penalty.L2Penalty` at this model's ``l2``."""
        return L2Penalty(self.l2)

    def penalty(self) -> torch.Tensor:
        """``(l2 / 2) ||W||^2`` over the weights, not the bias (the Gaussian prior of the lecture
        notes, §14)."""
        w = self.linear.weight
        if not self.l2:
            return w.new_zeros(())
        return self.l2_penalty.value(w)

    def objective(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        offset: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Weighted mean NLL + penalty, without input checks (the solvers' hot path)."""
        nll = self.family.nll(self(x, offset), y)
        if weight is None:
            data = nll.mean()
        else:
            data = (weight * nll).sum() / weight.sum()
        return data + self.penalty()

    @torch.no_grad()
    def objective_gradient(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        offset: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[tuple[nn.Parameter, torch.Tensor]]] | None:
        """:meth:`objective` and its gradient in closed form, without an autograd graph.

        By the chain rule through ``eta = x W^T + b (+ offset)`` (the lecture notes on
        probabilistic classification, §8: ``grad = X^T (y - t)``; Bishop PRML §4.3.2)::

            r_i = s_i (dl/deta)_i / sum_j s_j,   grad_W E = r^T X + l2 W,   grad_b E = r^T 1

        with the per-sample ``dl/deta`` of :func:`~torchglm.solvers.eta_derivatives.eta_derivatives`
        (the family's closed form, else :mod:`torch.func` on the eta scale only). The
        mini-batch optimizer then steps on these gradients (``GLMTask``'s ``sgd``):
        the same gradient as ``objective(...).backward()`` up to rounding, at a
        fraction of its cost on small batches.

        Args:
            x, y, weight, offset: as in :meth:`objective` (dense ``x``).

        Returns:
            ``(E, [(parameter, gradient), ...])`` over :meth:`parameters` (``W``, then
            ``b``), or ``None`` where ``E`` is not this class's function of ``W`` and
            ``b``: a subclass that overrides :meth:`objective`, :meth:`forward` or
            :meth:`penalty`, a forward hook on the model, or a sparse ``x``
            (differentiate :meth:`objective` with autograd then).
        """
        if not self.closed_form_gradient or x.layout != torch.strided:
            return None
        # r^T x is one matrix product, which does not promote: a float64 weight or
        # offset beside a float32 x would make r float64 (objective() promotes instead).
        weight = None if weight is None else weight.to(x.dtype)
        offset = None if offset is None else offset.to(x.dtype)
        eta = self.forward(x, offset)  # no hook to run (closed_form_gradient)
        nll, d1 = eta_derivatives(self.family, eta, y, order=1)
        if weight is None:
            data, r = nll.mean(), d1 / nll.shape[0]
        else:
            total = weight.sum()
            data, r = (weight * nll).sum() / total, scale_rows(d1, weight / total)
        r = r if r.dim() == 2 else r.unsqueeze(-1)  # (n, n_outputs)
        W, b = self.linear.weight, self.linear.bias
        grad_W = rt_x(r, x)
        if self.l2:
            grad_W = grad_W + self.l2_penalty.grad(W)
        pairs = [(W, grad_W)] if b is None else [(W, grad_W), (b, r.sum(0))]
        return (data + self.penalty() if self.l2 else data), pairs

    @property
    def closed_form_gradient(self) -> bool:
        """Whether :meth:`objective_gradient` applies: the objective, forward and
        penalty are this class's, and no forward hook can change ``eta``."""
        cls = type(self)
        return (
            not (self._forward_hooks or self._forward_pre_hooks)
            and cls.objective is GeneralizedLinearModel.objective
            and cls.forward is GeneralizedLinearModel.forward
            and cls.penalty is GeneralizedLinearModel.penalty
        )

    def check_data(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        offset: torch.Tensor | None = None,
        *,
        fitting: bool = True,
        return_extremes: bool = False,
    ) -> tuple:
        """Validate a design matrix and targets against this model; return ``(x, y)``
        with ``y`` in the dtype the family expects.

        Args:
            x, y, weight, offset: as in :meth:`loss`, as tensors (:meth:`fit` and
                :meth:`loss` convert array-likes first, :meth:`as_data`).
            fitting: the data are to be fitted: a classifier then needs at least
                two classes among the rows of positive weight (scikit-learn's rule;
                with one class the MLE has an infinite intercept). ``False`` for
                data that are only scored.
            return_extremes: return ``(x, y, extremes)``: ``x``'s smallest and largest
                (stored) value from the one read that checked it
                (:func:`~torchglm._validation.check_features`), for a caller that needs
                its magnitude (:func:`~torchglm.solvers.fit`'s float32 stage) without
                reading ``x`` again.

        Raises:
            InputError: wrong shapes, non-finite values, targets outside the
                family's support, an all-zero weight vector, a single class, or
                values so large that sums of squares overflow
                (``max |x| > sqrt(finfo.max / n_samples)``: rescale them).
        """
        extremes = check_features("X", x, self.n_features, magnitude=True)
        if not isinstance(y, torch.Tensor):
            raise fail("y", "a torch.Tensor", type(y).__name__)
        check_same_length(["X", "y"], x, y)
        check_weight(weight, x.shape[0])
        check_offset(offset, x.shape[0])
        y = check_targets(self.family, y, self.n_classes, weight, fitting=fitting, dtype=x.dtype)
        return (x, y, extremes) if return_extremes else (x, y)

    def loss(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        offset: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Validated objective: weighted mean NLL + ``(l2/2)||W||^2``.

        Args:
            x: features, shape (n_samples, n_features).
            y: targets, shape (n_samples,) (class labels for classifiers).
            weight: optional non-negative sample weights, shape (n_samples,).
            offset: optional known term added to eta, shape (n_samples,).

        Raises:
            InputError: on wrong shapes, non-finite values or invalid targets.
        """
        x, y, weight, offset = self.as_data(x, y, weight, offset)
        x, y = self.check_data(x, y, weight, offset, fitting=False)
        return self.objective(x, y, weight, offset)

    # -- fitting --------------------------------------------------------------
    def make_fitter(self, solver: str = "auto", **options):
        """A pass-based :class:`~torchglm.passes.Fitter` for this model; see
        :func:`torchglm.solvers.make_fitter`. Every model class has this method, so the
        Lightning task and ``fit`` never branch on the model type."""
        return _make_fitter(self, solver, **options)

    def fit(self, x, y, weight=None, offset=None, solver: str = "auto", **options):
        """Fit in place without a Trainer; see :func:`torchglm.solvers.fit`.

        ``x``, ``y``, ``weight`` and ``offset`` may be tensors or array-likes
        (NumPy, pandas, scipy.sparse; see :meth:`as_data`). A DataFrame's column
        names become :attr:`feature_names`.

        Raises:
            InputError: invalid data (see :meth:`check_data`), among them class
                labels holding a single class (named in the message), as in
                scikit-learn: the unpenalized intercept would diverge.
        """
        return _fit(self, x, y, weight=weight, offset=offset, solver=solver, **options)

    def extra_repr(self) -> str:
        return f"family={self.family!r}, n_classes={self.n_classes}, l2={self.l2}"


class LogisticRegression(GeneralizedLinearModel):
    """``p(C_1|x) = sigma(w^T x + w0)`` on cross-entropy (the lecture notes, §7; Bishop PRML §4.3.2).

    The gradient of the summed NLL is ``sum_i (y_i - t_i) x_i`` with ``y_i = sigma(eta_i)``.
    """

    def __init__(
        self, n_features: int, l2: float = 0.0, fit_intercept: bool = True, dtype: torch.dtype | None = None
    ):
        super().__init__(n_features, "bernoulli", "logit", 2, l2, fit_intercept, dtype)


class ProbitRegression(GeneralizedLinearModel):
    """``p(C_1|x) = Phi(w^T x + w0)``, the standard normal CDF (the lecture notes, §11;
    Bishop PRML §4.3.5)."""

    def __init__(
        self, n_features: int, l2: float = 0.0, fit_intercept: bool = True, dtype: torch.dtype | None = None
    ):
        super().__init__(n_features, "bernoulli", "probit", 2, l2, fit_intercept, dtype)


class SoftmaxRegression(GeneralizedLinearModel):
    """``p(C_k|x) = softmax(W x + b)_k`` with 1-of-K targets (the lecture notes, §10; Bishop PRML §4.3.4).

    One weight row per class (K rows): the gradient of the summed NLL for class
    ``j`` is ``sum_i (y_ij - t_ij) x_i``. Unpenalized, adding one vector to every
    row leaves the probabilities unchanged (the Newton solver handles that).

    ``n_classes`` is required here (``None`` is refused); in a ``train.py`` config it
    may be left out, and the number of distinct labels of the data is used.
    """

    def __init__(
        self,
        n_features: int,
        n_classes: int | None = None,
        l2: float = 0.0,
        fit_intercept: bool = True,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(n_features, "categorical", "softmax", n_classes, l2, fit_intercept, dtype)
