"""Input validation at the library's boundary.

Every check raises :class:`InputError` with one message template::

    <argument>: expected <what was expected>, got <what was got>

so a user (or ``train.py``) can tell at once which input is wrong. Checks run
once, where data enters (``fit``, ``loss``, the data module), never inside a
solver's inner loop. Finiteness checks reduce on the tensor's own device and
bring back a single boolean.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = [
    "InputError",
    "NotFittedError",
    "ConvergenceWarning",
    "SeparationWarning",
    "NumericalWarning",
    "fail",
    "check_features",
    "check_finite",
    "check_same_length",
    "check_weight",
    "check_positive",
]


class InputError(ValueError):
    """A user-supplied argument, array or config value is invalid."""


class NotFittedError(RuntimeError):
    """A model was used for prediction before it was fitted."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its convergence criterion."""


class SeparationWarning(UserWarning):
    """The data are (quasi-)completely separated: the unpenalized MLE does not exist."""


class NumericalWarning(UserWarning):
    """A numerical safeguard (damping, jitter, regularized fallback) was applied."""


def fail(name: str, expected: str, got: object) -> InputError:
    """Build the library's single error message: ``name: expected ..., got ...``."""
    return InputError(f"{name}: expected {expected}, got {got}")


def check_finite(name: str, t: torch.Tensor) -> None:
    """Raise if ``t`` holds NaN or +-inf, reporting how many and where the first is."""
    if t.is_sparse or t.layout != torch.strided:
        values = t.coalesce().values() if t.layout == torch.sparse_coo else t.values()
    else:
        values = t
    if not values.is_floating_point():
        return
    # One reduction: a sum is finite when every entry is (finite entries that
    # overflow the sum fall through to the exact scan below).
    if bool(torch.isfinite(values.sum())):
        return
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        n_bad = int(bad.sum())
        n_nan = int(torch.isnan(values).sum())
        first = tuple(int(i) for i in bad.nonzero()[0]) if values is t else "a stored value"
        raise fail(
            name,
            "finite values (no NaN or inf)",
            f"{n_bad} non-finite entries ({n_nan} NaN, {n_bad - n_nan} inf), first at index {first}",
        )


def check_features(name: str, x: torch.Tensor, n_features: int | None = None) -> torch.Tensor:
    """Check a design matrix: 2-D, floating point, finite, with ``n_features`` columns."""
    if not isinstance(x, torch.Tensor):
        raise fail(name, "a torch.Tensor", type(x).__name__)
    if x.dim() != 2:
        raise fail(name, "a 2-D tensor of shape (n_samples, n_features)", f"shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise fail(name, "a floating-point tensor", f"dtype {x.dtype}")
    if n_features is not None and x.shape[1] != n_features:
        raise fail(name, f"{n_features} feature columns", f"{x.shape[1]}")
    if x.shape[0] == 0:
        raise fail(name, "at least one sample", "0 rows")
    check_finite(name, x)
    return x


def check_same_length(names: Sequence[str], *tensors: torch.Tensor) -> None:
    """Check that all tensors have the same first dimension (number of samples)."""
    lengths = [int(t.shape[0]) for t in tensors]
    if len(set(lengths)) > 1:
        pairs = ", ".join(f"{n}={L}" for n, L in zip(names, lengths))
        raise fail("/".join(names), "the same number of samples", pairs)


def check_weight(weight: torch.Tensor | None, n: int) -> None:
    """Check sample weights: 1-D, length ``n``, finite and non-negative."""
    if weight is None:
        return
    if weight.dim() != 1 or weight.shape[0] != n:
        raise fail("weight", f"a 1-D tensor of length {n}", f"shape {tuple(weight.shape)}")
    check_finite("weight", weight)
    if bool((weight < 0).any()):
        raise fail("weight", "non-negative sample weights", f"min {float(weight.min())}")


def check_positive(name: str, value: float, allow_zero: bool = False) -> None:
    """Check a scalar hyper-parameter (learning rate, batch size, penalty...)."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok or value != value:  # value != value catches NaN
        raise fail(name, "a non-negative number" if allow_zero else "a positive number", value)
