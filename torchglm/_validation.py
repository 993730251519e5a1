"""Input validation at the library's boundary.

Every check raises :class:`InputError` with one message template::

    <argument>: expected <what was expected>, got <what was got>

so a user (or ``train.py``) can tell at once which input is wrong. Checks run
once, where data enters (``fit``, ``loss``, the data module), never inside a
solver's inner loop. Finiteness checks reduce on the tensor's own device and
bring back a single boolean.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

__all__ = [
    "warn",
    "optional_import",
    "InputError",
    "NotFittedError",
    "ConvergenceWarning",
    "adopt_sklearn_warning",
    "SeparationWarning",
    "NumericalWarning",
    "PerformanceWarning",
    "existing_file",
    "fail",
    "check_features",
    "check_finite",
    "stored_values",
    "host_readable",
    "check_same_length",
    "check_weight",
    "check_offset",
    "check_magnitude",
    "check_class_weights",
    "check_classes",
    "check_targets",
    "check_positive",
    "as_tensor",
    "to_tensor",
    "as_data",
    "feature_names_of",
    "per_sample_tensors",
]


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside torchglm: the user's
    line that called into the library (or the framework's, e.g. Lightning's, that
    did), so the warning points at the caller wherever inside the package it
    arose (Python 3.12's ``skip_file_prefixes``, by hand)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    adopt_sklearn_warning()  # a filter on scikit-learn's class, loaded since, catches it
    warnings.warn(message, category, stacklevel=level + 1)


def optional_import(module: str, feature: str, extra: str):
    """Import an optional dependency, or raise an :class:`InputError` that names the
    feature needing it and the extra that installs it (``pip install torchglm[extra]``)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(
            f"{feature}: needs the optional dependency '{module.split('.')[0]}', "
            f"not installed (pip install 'torchglm[{extra}]')"
        ) from None


class InputError(ValueError):
    """A user-supplied argument, array or config value is invalid."""


class NotFittedError(RuntimeError):
    """A model was used for prediction before it was fitted."""


class _UntilSklearn(UserWarning):
    """:class:`ConvergenceWarning`'s base until scikit-learn is loaded (a class of the
    same layout as scikit-learn's, so that one can replace it)."""


class ConvergenceWarning(_UntilSklearn):
    """An iterative solver stopped before meeting its convergence criterion.

    A subclass of ``sklearn.exceptions.ConvergenceWarning`` once scikit-learn is
    loaded (of ``UserWarning`` until then), so either class filters it: the library
    does not import scikit-learn itself (2.7 s of a 5 s ``import torchglm``, paid by
    every worker of a ``GridSearchCV``), but adopts its class as the base where
    scikit-learn is in use: at ``import torchglm`` when it is loaded already, at
    ``import torchglm.sklearn``, and before each warning the library issues
    (:func:`adopt_sklearn_warning`), so a filter or ``pytest.warns`` with
    scikit-learn's class catches every one of them."""


def adopt_sklearn_warning() -> None:
    """Make ``sklearn.exceptions.ConvergenceWarning`` the base of
    :class:`ConvergenceWarning` where scikit-learn is loaded (a no-op otherwise, and
    once done). The class object stays the same: filters on it keep working."""
    exceptions = sys.modules.get("sklearn.exceptions")
    base = getattr(exceptions, "ConvergenceWarning", None)
    if base is not None and ConvergenceWarning.__bases__ != (base,):
        ConvergenceWarning.__bases__ = (base,)


adopt_sklearn_warning()


class SeparationWarning(UserWarning):
    """The data are (quasi-)completely separated: the unpenalized MLE does not exist.

    In the GLM sense: samples whose targets sit on the boundary of the mean space
    (a probability 0 or 1, a count 0) are fitted ever closer to it along a direction
    that changes no other fitted mean, so ``eta -> +-inf`` there (e.g. a Poisson with
    every count 0 in a level of a dummy)."""


class NumericalWarning(UserWarning):
    """A numerical safeguard (damping, jitter, regularized fallback) was applied."""


class PerformanceWarning(UserWarning):
    """A requested fast path does not apply to this fit; it runs the general way
    (same results, slower)."""


def fail(name: str, expected: str, got: object) -> InputError:
    """Build the library's single error message: ``name: expected ..., got ...``."""
    return InputError(f"{name}: expected {expected}, got {got}")


def existing_file(name: str, path, what: str = "file") -> Path:
    """``path`` as a :class:`~pathlib.Path` if it names an existing regular file.

    Raises:
        InputError: it is missing, a directory, or not a regular file (``/dev/zero``, a
            FIFO: reading one would never end or never start).
    """
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        raise fail(name, f"a {what}", f"'{path}' (a directory)")
    if path.exists():
        raise fail(name, f"a regular {what}", f"'{path}' (a device, FIFO or socket)")
    raise fail(name, f"an existing {what}", f"'{path}' (not found)")


def host_readable(t: torch.Tensor) -> bool:
    """Whether a value of ``t`` can be read on the host at no cost, for a data-dependent
    shortcut: on a CPU (no device sync) and outside :mod:`torch.func`'s transforms
    (``vmap`` forbids ``.item()``)."""
    return t.device.type == "cpu" and not torch._C._functorch.is_functorch_wrapped_tensor(t)


def stored_values(t: torch.Tensor) -> torch.Tensor:
    """The stored entries of a sparse (COO/CSR) tensor (a COO tensor coalesced: one
    entry per position); a dense tensor itself."""
    if t.layout == torch.strided:
        return t
    return t.coalesce().values() if t.layout == torch.sparse_coo else t.values()


def check_finite(name: str, t: torch.Tensor, first_row: int = 0) -> tuple[float, float] | None:
    """Raise if ``t`` holds NaN or +-inf, reporting how many and where the first is
    (``first_row``: the index of ``t``'s first row in the whole data, for a chunk of it).

    Returns the smallest and largest (stored) value, or ``None`` for an integer or
    empty tensor: the one reduction that decides finiteness (``aminmax`` propagates
    NaN, and an inf is an extreme) also bounds the magnitude (:func:`check_magnitude`).
    """
    values = stored_values(t)
    if not values.is_floating_point() or values.numel() == 0:
        return None
    lo, hi = (float(v) for v in torch.aminmax(values))
    if math.isfinite(lo) and math.isfinite(hi):
        return lo, hi
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        n_bad = int(bad.sum())
        n_nan = int(torch.isnan(values).sum())
        if values is t:
            first = tuple(int(i) for i in bad.nonzero()[0])
            first = (first[0] + first_row, *first[1:])
        else:
            first = "a stored value"
        raise fail(
            name,
            "finite values (no NaN or inf)",
            f"{n_bad} non-finite entries ({n_nan} NaN, {n_bad - n_nan} inf), first at index {first}",
        )


def check_features(
    name: str, x: torch.Tensor, n_features: int | None = None, magnitude: bool = False
) -> tuple[float, float] | None:
    """Check a design matrix: 2-D, floating point, finite, with ``n_features`` columns
    (and with ``magnitude``, small enough for its sums of squares: :func:`check_magnitude`).

    Returns its smallest and largest (stored) value from the read that checked it
    (:func:`check_finite`; ``None`` without stored values), for a caller that needs its
    magnitude too."""
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
    extremes = check_finite(name, x)
    if magnitude:
        check_magnitude(name, x, extremes)
    return extremes


def check_same_length(names: Sequence[str], *tensors: torch.Tensor) -> None:
    """Check that all tensors have the same first dimension (number of samples)."""
    lengths = [int(t.shape[0]) for t in tensors]
    if len(set(lengths)) > 1:
        pairs = ", ".join(f"{n}={L}" for n, L in zip(names, lengths))
        raise fail("/".join(names), "the same number of samples", pairs)


def as_tensor(name: str, value, like: torch.Tensor) -> torch.Tensor | None:
    """``value`` as a tensor: ``None`` and tensors pass unchanged; array-likes (lists,
    NumPy arrays, pandas Series) go through :func:`to_tensor` into ``like``'s dtype
    and device.

    Raises:
        InputError: if ``value`` cannot be converted.
    """
    if value is None or isinstance(value, torch.Tensor):
        return value
    return to_tensor(name, value).to(dtype=like.dtype, device=like.device)


def _is_scipy_sparse(value) -> bool:
    # duck-typed: scipy.sparse matrices and arrays, without importing scipy here
    return hasattr(value, "tocsr") and hasattr(value, "nnz") and hasattr(value, "shape")


def to_tensor(name: str, value, *, device=None, float_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The library's one conversion of user data into a tensor, at the boundary.

    Accepts a ``torch.Tensor``, a NumPy array, a pandas DataFrame or Series, a
    ``scipy.sparse`` matrix or array (becomes a torch CSR tensor: sparse stays
    sparse) and nested lists of numbers. A tensor is only moved to ``device`` (its
    dtype is the caller's choice, checked by the model). Floating-point array-likes
    keep their precision (the model casts to its dtype where it predicts, and fits
    in at least the data's precision); integer and boolean array-likes become
    ``float_dtype`` when it is given (features) and stay integers otherwise (class
    labels). The result lies on ``device`` when it is given. NumPy input is wrapped
    without a copy where its dtype, byte order and memory layout allow.

    Raises:
        InputError: for values that are not numbers (strings, objects, complex).
    """
    if value is None:
        raise fail(name, "a tensor or an array-like of numbers", "None")
    if isinstance(value, torch.Tensor):  # the caller chose its dtype: checked, not cast
        return value if device is None else value.to(device)
    if _is_scipy_sparse(value):
        csr = value.tocsr()
        if not csr.has_sorted_indices:  # torch's CSR layout wants sorted column indices
            csr = csr.sorted_indices()
        data = _numeric_array(name, csr.data)
        # scipy's int32 indices are kept (no copy): a pass's sparse products read half
        # the index bytes (measured 1.3-2x faster matvecs than int64 on one thread).
        index = np.int32 if csr.indptr.dtype == csr.indices.dtype == np.int32 else np.int64
        t = torch.sparse_csr_tensor(
            torch.from_numpy(csr.indptr.astype(index, copy=False)),
            torch.from_numpy(csr.indices.astype(index, copy=False)),
            torch.from_numpy(data),
            size=tuple(csr.shape),
            check_invariants=False,  # scipy's CSR with sorted indices is a valid torch CSR
        )
    else:
        t = torch.from_numpy(_numeric_array(name, value))
    if float_dtype is not None and not t.is_floating_point():
        t = t.to(float_dtype)
    return t if device is None else t.to(device)


def _numeric_array(name: str, value) -> np.ndarray:
    """``value`` as a native-endian, contiguous NumPy array of booleans or real numbers."""
    try:
        arr = np.asarray(value)
        if arr.dtype == object:  # mixed pandas columns, nullable integers: numbers or an error
            arr = arr.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise fail(name, "a tensor or an array-like of numbers", f"{type(value).__name__} ({err})") from None
    if arr.dtype.kind not in "biuf":
        raise fail(
            name, "a tensor or an array-like of numbers", f"{type(value).__name__} of dtype {arr.dtype}"
        )
    if arr.dtype.kind == "u" and arr.dtype != np.uint8:
        arr = arr.astype(np.int64)  # torch has no uint16/32/64 arithmetic
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    arr = np.ascontiguousarray(arr)
    if not arr.flags.writeable:  # torch.from_numpy shares memory and wants it writable
        arr = arr.copy()
    return arr


def feature_names_of(x) -> list[str] | None:
    """The column names of a pandas DataFrame (as strings); ``None`` for other inputs."""
    columns = getattr(x, "columns", None)
    if columns is None or isinstance(x, torch.Tensor):
        return None
    return [str(c) for c in columns]


def as_data(x, y=None, weight=None, offset=None, *, device=None, float_dtype: torch.dtype | None = None):
    """``(x, y, weight, offset)`` through :func:`to_tensor`: ``x`` (integers become
    ``float_dtype``) and ``y`` on ``device``, ``weight`` and ``offset`` in ``x``'s
    dtype and device (:func:`as_tensor`). ``None`` entries stay ``None``."""
    x = to_tensor("X", x, device=device, float_dtype=float_dtype)
    y = None if y is None else to_tensor("y", y, device=x.device)
    weight, offset = per_sample_tensors(x, weight, offset)
    return x, y, weight, offset


def _check_per_sample(name: str, t: torch.Tensor, n: int) -> None:
    """A per-sample vector (weights, offsets): a tensor, 1-D of length ``n``, finite."""
    if not isinstance(t, torch.Tensor):
        raise fail(name, "a torch.Tensor", type(t).__name__)
    if t.shape != (n,):
        raise fail(name, f"a 1-D tensor of length {n}", f"shape {tuple(t.shape)}")
    check_finite(name, t)


def per_sample_tensors(x, weight, offset):
    """Array-like ``weight`` and ``offset`` as tensors in ``x``'s dtype and device
    (:func:`as_tensor`); left as they are when ``x`` is not a tensor (its own check
    reports it)."""
    if not isinstance(x, torch.Tensor):
        return weight, offset
    return as_tensor("weight", weight, x), as_tensor("offset", offset, x)


def check_weight(weight: torch.Tensor | None, n: int) -> None:
    """Check sample weights: 1-D, length ``n``, finite, non-negative, positive total.

    An all-zero weight vector leaves the weighted mean objective ``0 / 0``."""
    if weight is None:
        return
    _check_per_sample("weight", weight, n)
    if bool((weight < 0).any()):
        raise fail("weight", "non-negative sample weights", f"min {float(weight.min())}")
    if not bool(weight.sum() > 0):
        raise fail("weight", "a positive total weight (some sample with weight > 0)", "all weights 0")


def check_offset(offset: torch.Tensor | None, n: int) -> None:
    """Check an offset (a known term added to eta): 1-D, length ``n``, finite."""
    if offset is not None:
        _check_per_sample("offset", offset, n)


def square_sum_bound(dtype: torch.dtype, n: int) -> float:
    """The largest ``|value|`` whose sums of ``n`` squares stay finite in ``dtype``:
    ``sqrt(finfo.max / n)`` (:func:`check_magnitude`'s bound)."""
    return math.sqrt(torch.finfo(dtype).max / max(n, 1))


def check_magnitude(
    name: str,
    t: torch.Tensor,
    extremes: tuple[float, float] | None = None,
    remedy: str = "rescale the data",
    column_max: torch.Tensor | None = None,
    n_samples: int | None = None,
) -> None:
    """Check that sums of squares of ``t`` can neither overflow nor underflow its dtype.

    A fit forms ``sum_i x_ij x_ik`` (Hessian, Gram matrix) and ``sum_i y_i^2``
    (Gaussian NLL, deviance, Pearson X^2): with ``n`` rows every such sum stays
    below ``finfo.max`` when ``max |t| <= sqrt(finfo.max / n)``. Beyond it the fit
    would return garbage (an overflowed Hessian, a zero step reported as
    converged), so the values must be rescaled.

    The other side, for a design matrix (2-D ``t``): a column whose largest
    magnitude is below ``sqrt(finfo.tiny)`` has every ``x_ij^2`` below the smallest
    normal number, so its Hessian column ``sum_i w_i x_ij x_ik`` is 0 or subnormal
    (no significant digits): every solver would see a singular curvature and a
    gradient that is already "small", and stop at the start reporting convergence.
    An all-zero column is left alone (it carries no information at any scale).
    (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.1 on the
    normalized range.)

    ``extremes``: ``t``'s smallest and largest value when already known
    (:func:`check_finite` returns them); ``remedy``: what the message tells the user to do;
    ``column_max``: a 2-D ``t``'s ``max_i |t_ij|`` per column when already known;
    ``n_samples``: the rows of the data when ``t`` stands for them (data streamed from
    disk: the two rows of its column minima and maxima have the data's extremes and
    column magnitudes; default ``t.shape[0]``).

    Raises:
        InputError: naming the largest (or the smallest column's) magnitude and the bound.
    """
    if not t.is_floating_point() or t.numel() == 0:
        return
    if extremes is None:
        values = stored_values(t)
        if values.numel() == 0:
            return
        extremes = tuple(float(v) for v in torch.aminmax(values))  # one pass, no |values| copy
    lo, hi = extremes
    dtype = str(t.dtype).replace("torch.", "")
    n = int(t.shape[0]) if n_samples is None else int(n_samples)
    bound = square_sum_bound(t.dtype, n)
    largest = max(-lo, hi)
    if largest > bound:
        raise fail(
            name,
            f"|values| <= sqrt(finfo({dtype}).max / n_samples) = {bound:.3g} "
            f"so that sums of squares cannot overflow ({remedy})",
            f"max |{name}| = {largest:.3g}",
        )
    if t.dim() != 2:
        return
    floor = math.sqrt(torch.finfo(t.dtype).tiny)
    if column_max is None and _columns_reach(t, floor):
        return
    column_max = _column_max_abs(t) if column_max is None else column_max
    small = (column_max > 0) & (column_max < floor)
    if bool(small.any()):
        j = int(small.nonzero()[0, 0])
        raise fail(
            name,
            f"every nonzero column with max |value| >= sqrt(finfo({dtype}).tiny) = {floor:.3g} "
            f"so that its sums of squares do not underflow ({remedy})",
            f"{int(small.sum())} such column(s), first column {j} with max |{name}[:, {j}]| = "
            f"{float(column_max[j]):.3g}",
        )


#: The first rows of a dense matrix in which :func:`_columns_reach` looks for an
#: entry of every column at or above the underflow bound.
_PROOF_ROWS = 1024


def _columns_reach(t: torch.Tensor, floor: float) -> bool:
    """Whether every column of a dense 2-D ``t`` has an entry with ``|t_ij| >= floor``
    among its first :data:`_PROOF_ROWS` rows: then ``max_i |t_ij| >= floor`` for every
    column, and none can underflow, without reading the rest of ``t``. ``False`` (a
    column without such an entry there: all-zero, tiny, or zero in the first rows) sends
    :func:`check_magnitude` to the exact per-column maxima. Per-column reductions of
    the whole matrix cost far more than its global extremes: 1,000,000 x 20 float64,
    one thread, 119 ms through NumPy's column minima and maxima against 9 ms for
    ``torch.aminmax`` (NumPy's reduction over axis 0 runs 20 columns at a time)."""
    if t.layout != torch.strided:
        return False
    # The first row alone usually proves it (a standardized design's entries are all
    # nonzero): d values, where the head's column reductions read 1,024 rows along
    # columns (the most of a small fit's checks: 455 x 30, 60 of its 90 us).
    if t.shape[0] and bool((t[0].abs() >= floor).all()):
        return True
    head = t[:_PROOF_ROWS]
    return bool((torch.maximum(-head.amin(0), head.amax(0)) >= floor).all())


#: Rows per group of :func:`_column_reduce`.
_ROW_GROUP = 32


def _column_extremes(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(min_i t_ij, max_i t_ij)`` per column of a dense (n, d) matrix with n >= 1. A
    float32/float64 matrix in a CPU's memory through NumPy's reductions over axis 0,
    which run along the contiguous rows (50,000 x 100 float64: 2 x 2.3 ms against
    2 x 4.2 ms for :func:`_column_reduce`, 200,000 x 50: 2 x 7.9 against 2 x 10 ms);
    otherwise :func:`_column_reduce`. Both propagate NaN."""
    if t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and not t.requires_grad:
        a = t.numpy()
        return torch.from_numpy(a.min(0)), torch.from_numpy(a.max(0))
    return _column_reduce(t, torch.amin), _column_reduce(t, torch.amax)


def _column_reduce(t: torch.Tensor, reduce) -> torch.Tensor:
    """``reduce(t, 0)`` of a dense (n, d) matrix, ``reduce`` being ``amin`` or ``amax``.
    A contiguous ``t`` is reduced as (n / 32, 32, d) over the middle axis first, which
    runs along the contiguous columns: on a CPU 3-8x faster than ``aminmax(t, dim=0)``
    (200k x 50 float64: that one reduction cost more than a third of a Newton fit)."""
    n, d = t.shape
    m = n - n % _ROW_GROUP
    if not t.is_contiguous() or m == 0:
        return reduce(t, 0)
    out = reduce(reduce(t[:m].view(-1, _ROW_GROUP, d), 1), 0)
    return out if m == n else reduce(torch.stack([out, reduce(t[m:], 0)]), 0)


def _column_max_abs(t: torch.Tensor) -> torch.Tensor:
    """``max_i |t_ij|`` per column of a dense or sparse (COO/CSR) matrix (0 for a column
    without stored entries), from per-column extremes: no ``|t|`` copy of a dense matrix."""
    if t.layout == torch.strided:
        if not t.shape[0]:
            return t.new_zeros(t.shape[1])
        lo, hi = _column_extremes(t)
        return torch.maximum(-lo, hi)
    if t.layout == torch.sparse_coo:
        t = t.coalesce()
        columns, values = t.indices()[1], t.values()
    else:
        columns, values = t.col_indices(), t.values()
    out = values.new_zeros(t.shape[1])
    # In chunks: scatter_reduce wants int64 indices (a CSR's may be int32), and a
    # chunk's |values| and indices stay in cache (no nnz-long temporaries).
    step = 1 << 18
    for i in range(0, values.numel(), step):
        out.scatter_reduce_(0, columns[i : i + step].long(), values[i : i + step].abs(), reduce="amax")
    return out


def check_classes(
    name: str, y: torch.Tensor, weight: torch.Tensor | None = None, n_classes: int | None = None
) -> None:
    """Check that class labels hold at least two classes (among rows of positive weight),
    and, given ``n_classes``, every one of the declared classes.

    With one class the unpenalized MLE does not exist (the intercept runs to
    +-inf); like scikit-learn's classifiers this is an error, not a fit. A declared
    class without samples is the same for that class: ``sum_i log mu_ik`` is absent
    from the likelihood, which keeps rising as ``mu_ik -> 0`` for every ``i``, so its
    intercept runs to -inf (an L2 penalty on the weights does not stop it); the
    generative classifiers cannot estimate its statistics either
    (:func:`check_class_weights`).

    Raises:
        InputError: naming the single class present, or the first declared class
            without samples.
    """
    labels = y if weight is None else y[weight > 0]
    if labels.numel() == 0:
        raise fail(name, "at least two classes", "no labels")
    # Two classes are present iff min < max (one O(n) pass; unique sorts).
    lo, hi = torch.aminmax(labels)
    if bool(lo == hi):
        raise fail(name, "at least two classes", f"a single class {int(lo)}")
    if n_classes is not None and n_classes > 2:
        check_class_weights(name, torch.bincount(labels.long(), minlength=n_classes))


def check_class_weights(name: str, class_weight: torch.Tensor) -> None:
    """Check that every declared class has a positive total weight (``class_weight``:
    shape (K,), the weighted count of each class). The one rule of every classifier:
    discriminative fits (an infinite intercept) and generative ones (no statistics).

    Raises:
        InputError: naming the first class without samples.
    """
    empty = (class_weight <= 0).nonzero().flatten()
    if empty.numel():
        raise fail(
            name,
            f"samples (positive total weight) in each of the n_classes={class_weight.numel()} declared classes",
            f"none in class {int(empty[0])}",
        )


def check_targets(
    family,
    y: torch.Tensor,
    n_classes: int | None = None,
    weight: torch.Tensor | None = None,
    *,
    fitting: bool = True,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The one target gate, for every door (``model.fit``/``loss``, the data module of
    ``train.py``, the scikit-learn estimators' ``fit`` and ``score``): ``y`` in the
    family's support (``family.check_target``: 1-D, finite, labels in
    ``0..n_classes-1``, non-negative counts, positive Gamma targets, proportions),
    real targets cast to ``dtype`` small enough for their sums of squares
    (:func:`check_magnitude`), and with ``fitting`` a classifier's two classes among
    the rows of positive weight (:func:`check_classes`).

    ``family`` is a :class:`~torchglm.families.Family` (duck-typed: this module sits
    below the families).

    Returns:
        ``y`` in the dtype the family's NLL expects (int64 labels, real targets in ``dtype``).

    Raises:
        InputError: the first rule ``y`` breaks, with the library's one message.
    """
    y = family.check_target(y, n_classes)
    if y.is_floating_point():
        if dtype is not None:
            y = y.to(dtype)
        check_magnitude("y", y)
    if fitting and family.is_classifier:
        check_classes("y", y, weight, n_classes if family.multi_output else None)
    return y


def check_positive(name: str, value: float, allow_zero: bool = False) -> None:
    """Check a scalar hyper-parameter (learning rate, batch size, penalty...)."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok or value != value:  # value != value catches NaN
        raise fail(name, "a non-negative number" if allow_zero else "a positive number", value)
