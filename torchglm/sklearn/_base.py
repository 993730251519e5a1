"""What every torchglm scikit-learn estimator shares: parameters to torch, inputs in,
labels encoded, outputs back to NumPy.

Data flow: scikit-learn's ``validate_data`` applies scikit-learn's conventions
(``n_features_in_``, ``feature_names_in_``, its error messages for NaN, empty or
1-D input) and returns a NumPy array or a scipy CSR matrix; the core model then
converts it once, with :func:`torchglm._validation.to_tensor`, onto its own
device. A ``torch.Tensor`` skips scikit-learn's validation (it may live on a GPU)
and goes to the core model as it is, whose own checks then apply.

Finiteness is the library's one gate (:mod:`torchglm._validation`), not
scikit-learn's: ``X`` passes ``validate_data`` with ``ensure_all_finite=False`` and
the core model rejects NaN/inf with the message ``model.fit`` gives, and a numeric
``y`` is checked (:func:`check_target_values`) before scikit-learn would reject it
in its own words; ``score`` checks its ``y`` the same way, and ``sample_weight``
too. So a NaN, an inf, a negative Poisson count reads the same through every door.

A prediction passes one gate: scikit-learn's ``check_is_fitted`` (once), its
``validate_data`` (feature names, ``n_features_in_``), then the core model's
``check_features`` (the one finiteness scan, the model's domain) and its unchecked
path (``forward``, ``log_posterior``), not the core's validated ``predict*``, which
would check fitted and finite again (:meth:`TorchEstimator._predict_input`).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from .._validation import check_finite, fail, to_tensor

__all__ = ["TorchEstimator", "check_target_values"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class TorchEstimator(BaseEstimator):
    """Mixin: ``device``/``dtype`` parameters, input validation and NumPy outputs.

    Subclasses set ``_accept_sparse`` (whether scipy.sparse input is accepted: it
    reaches the core model as a torch CSR tensor, so it stays sparse).
    """

    _accept_sparse: bool = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accept_sparse
        return tags

    # -- parameters -------------------------------------------------------------
    def _torch_dtype(self) -> torch.dtype:
        """``dtype`` ("float32", "float64" or a torch floating dtype) as a torch dtype."""
        if isinstance(self.dtype, torch.dtype) and self.dtype.is_floating_point:
            return self.dtype
        if self.dtype in _DTYPES:
            return _DTYPES[self.dtype]
        raise fail("dtype", "'float32', 'float64' or a torch floating-point dtype", repr(self.dtype))

    def _torch_device(self) -> torch.device:
        try:
            return torch.device(self.device)
        except (RuntimeError, TypeError) as err:
            raise fail(
                "device", "a torch device such as 'cpu' or 'cuda'", f"{self.device!r} ({err})"
            ) from None

    # -- inputs -------------------------------------------------------------------
    def _validate_X(self, X, reset: bool):
        """``X`` checked by scikit-learn's rules (NumPy/CSR out), or a tensor as it is."""
        if isinstance(X, torch.Tensor):
            if X.dim() != 2:
                raise fail("X", "a 2-D tensor of shape (n_samples, n_features)", f"shape {tuple(X.shape)}")
            if reset:
                self.n_features_in_ = int(X.shape[1])
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            elif X.shape[1] != self.n_features_in_:
                raise fail("X", f"{self.n_features_in_} feature columns", int(X.shape[1]))
            return X
        return validate_data(
            self,
            X,
            reset=reset,
            accept_sparse="csr" if self._accept_sparse else False,
            dtype=[np.float64, np.float32],
            ensure_all_finite=False,  # the core model's gate: the library's message
        )

    def _validate_Xy(self, X, y, y_numeric: bool = False):
        """Fit inputs: ``(X, y)`` with ``y`` a NumPy vector (a tensor ``X`` keeps its device)."""
        if isinstance(X, torch.Tensor):
            X = self._validate_X(X, reset=True)
            if y is None:
                raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
            y = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
            check_target_values(y)
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise fail("y", f"a 1-D array of {X.shape[0]} targets", f"shape {y.shape}")
            return X, y
        if isinstance(y, torch.Tensor):
            y = y.detach().cpu().numpy()
        check_target_values(y)
        return validate_data(
            self,
            X,
            y,
            accept_sparse="csr" if self._accept_sparse else False,
            dtype=[np.float64, np.float32],
            y_numeric=y_numeric,
            ensure_all_finite=False,  # the core model's gate: the library's message
        )

    def _sample_weight(self, sample_weight, X):
        if sample_weight is None:
            return None
        if isinstance(sample_weight, torch.Tensor):
            sample_weight = sample_weight.detach().cpu().numpy()
        # NaN/inf weights get model.fit's message (scikit-learn's check would say it in
        # its words); shape and dtype are scikit-learn's, negative weights the core's
        check_target_values(sample_weight, "weight")
        return _check_sample_weight(sample_weight, np.empty((X.shape[0], 0)), dtype=np.float64)

    def _fitted_input(self, X):
        """``X`` for a fitted estimator: the one fitted check (scikit-learn's
        ``NotFittedError``), then scikit-learn's conventions (:meth:`_validate_X`).
        For callers whose next step is a gate of the core (``glm_results``, ``score``,
        the Bayesian predictive); predictions use :meth:`_predict_input`."""
        check_is_fitted(self)
        return self._validate_X(X, reset=False)

    def _predict_input(self, X) -> torch.Tensor:
        """``X`` through the one prediction gate: :meth:`_fitted_input`, then the core
        model's ``check_features`` (a tensor on its device, its width, finite, in its
        domain, in its dtype) without the core's own fitted check, which
        ``check_is_fitted`` has just made (``model_`` exists only after a fit). The
        caller then takes the core's unchecked path (``forward``, ``log_posterior``):
        one fitted check and one finiteness scan per prediction."""
        X = self._fitted_input(X)  # before model_ is read: the fitted check first
        return self.model_.check_features(X)


def check_target_values(y, name: str = "y") -> None:
    """A numeric ``y`` (floats: labels of any other type are left to the label
    encoding) through the library's finiteness check, so NaN/inf targets get the
    message ``model.fit`` gives (:func:`torchglm._validation.check_finite`); with
    ``name="weight"`` the same for sample weights."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    arr = np.asarray(y)
    if arr.dtype.kind == "f":
        check_finite(name, to_tensor(name, arr.reshape(-1) if arr.ndim == 0 else arr))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A detached NumPy copy of a result tensor (from any device)."""
    return t.detach().cpu().numpy()


def log_proba_output(log_proba: torch.Tensor) -> np.ndarray:
    """``predict_log_proba``'s output: the eta-scale log-probabilities, except ``-inf``
    where the probability itself underflows to 0, so that it equals
    ``log(predict_proba)`` (scikit-learn's contract) everywhere."""
    underflow = log_proba.exp() == 0
    return to_numpy(log_proba.masked_fill(underflow, float("-inf")))


class LabelEncoding:
    """Classifier mixin: any hashable labels through ``classes_`` (sorted, as
    ``np.unique`` orders them); the core models see ``0..K-1``."""

    #: classifiers that only handle two classes set this
    _binary_only: bool = False

    def _encode(self, y) -> np.ndarray:
        # A 1-D array of integers, booleans or strings is binary or multiclass whatever its
        # values (scikit-learn's type_of_target; ~0.1 ms, a fortieth of a tiny fit): only
        # other targets (floats, 2-D, objects) need its check.
        if not (isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "iubU"):
            check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if self._binary_only and len(self.classes_) > 2:
            y_type = type_of_target(y, input_name="y")
            raise ValueError(f"Only binary classification is supported. The type of the target is {y_type}.")
        if len(self.classes_) < 2:
            raise fail("y", "at least two classes", f"one class ({self.classes_[0]!r})")
        return encoded.astype(np.int64)

    def _decode(self, index: torch.Tensor) -> np.ndarray:
        return self.classes_[to_numpy(index)]

    def score(self, X, y, sample_weight=None) -> float:
        """Mean accuracy on ``X, y`` (scikit-learn's), its ``y`` checked as ``fit``'s is
        (:func:`check_target_values`)."""
        check_target_values(y)
        return super().score(X, y, sample_weight)


class LogProbaOutputs:
    """Classifier mixin: ``predict_log_proba`` and ``predict_proba`` from the
    estimator's ``_log_proba(X)`` (n, K) tensor, columns in the order of ``classes_``
    (``_log_proba`` makes the one fitted check, :meth:`TorchEstimator._predict_input`)."""

    def predict_log_proba(self, X) -> np.ndarray:
        """``log p(C_k | x)`` (n, K) (see :func:`log_proba_output`)."""
        return log_proba_output(self._log_proba(X))

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities (n, K), columns in the order of ``classes_``."""
        return to_numpy(self._log_proba(X).exp())
