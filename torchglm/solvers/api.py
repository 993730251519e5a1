"""``make_fitter`` and ``fit``: choosing and running a solver.

``fit(model, x, y, solver=...)`` validates the data once, slices it into
batches, runs the solver's passes (no ``Trainer``), marks the model fitted and
returns a :class:`~torchglm.passes.FitResult`. The Lightning task drives
the same fitters from :func:`make_fitter` (one epoch = one pass).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect

import torch

from .._validation import NumericalWarning, fail, feature_names_of, square_sum_bound, stored_values, warn
from ..passes import FitResult, Fitter, LinearModel, run_passes
from ..threads import torch_threads
from ..data.batches import TensorBatches
from .layout import hessian_cost
from .finish import NEWTON_MAX_COST
from .sparse_rows import cast_values
from .stepper import StepFitter
from .registry import DIRECT_SOLVERS, SOLVERS
from . import gradient, least_squares, newton, proximal  # noqa: F401 - their fitter classes register themselves

__all__ = ["make_fitter", "fit", "choose_solver", "sparse_lbfgs_memory"]


def _solver_class(name: str, given: str) -> type[Fitter]:
    cls = SOLVERS.get(name) or DIRECT_SOLVERS.get(name)
    if cls is None:
        raise fail("solver", f"one of {sorted(SOLVERS) + sorted(DIRECT_SOLVERS) + ['auto']}", repr(given))
    return cls


#: Above this many flops per Newton pass (``n d~^2 K (K + 1) / 2``), ``auto`` works in
#: float32 and polishes in float64 (the float64 stopping rule still decides).
AUTO_FLOAT32_MIN_FLOPS = 5e7

#: ``auto`` fits a dense design by L-BFGS in float32 with a float64 polish from at
#: least this many flops per pass (``4 n d~ K``: ``eta = X~ W^T`` and ``X~^T (mu - Y)``).
#: A pass's two ``n x d~ x K`` matrix products and its ``n x K`` exponentials ran 2-4x
#: faster in float32 (one thread, 100,000 x 100, K = 100: 0.10 against 0.20 s a
#: pass); the polish begins with the Newton-CG finish in float64, which certifies.
#: One output's pass is two matrix-vector products, memory-bound: 50,000 x 500, one
#: thread, 20 against 33 ms a pass (:data:`DENSE_FLOAT32_LBFGS_OPTIONS`).
#: (A sparse design's L-BFGS works in float32 past the small problems: :func:`_auto_dtype`.)
AUTO_FLOAT32_LBFGS_MIN_FLOPS = 5e7

#: What ``auto`` gives a dense one-output L-BFGS fit in float32
#: (:class:`~.gradient.LBFGSFitter`): the Jacobi start (its first pass reads ``x * x``
#: once, in float32), and the float32 stage leaves its Newton-CG finish to the float64
#: polish, handing on its memory, which preconditions the polish's CG without a
#: float64 ``diag(H)`` (a dense float64 pass reading ``x * x`` cost 2-3 gradient
#: passes). 50,000 x 500 (bench/newton.py), one thread: 7 float32 L-BFGS steps, then
#: one float64 pass and one Hessian-vector product certify (a one-step CG, whose
#: product its certificate reuses), where float64 L-BFGS took 8 steps and its finish a
#: pass with the diagonal and 2 products.
DENSE_FLOAT32_LBFGS_OPTIONS = {"jacobi": True, "finish_in_next_stage": True}

#: At most this many stored entries of the design times outputs (``nnz(X) K``; ``n d K``
#: for a dense ``X``) make a small problem, which ``auto`` fits by Newton-CG instead of
#: L-BFGS where exact Newton is too costly (:func:`choose_solver`).
AUTO_SMALL_MAX_ENTRIES = 2.5e6

#: A small problem whose exact Newton iteration costs at most this many flops (the
#: Hessian's ``n d~^2 K (K + 1) / 2`` plus the Cholesky factor's ``(K d~)^3 / 3``) is
#: fitted by exact Newton whatever its width (:func:`choose_solver`).
AUTO_SMALL_NEWTON_MAX_FLOPS = 1e7

#: A small problem is fitted by exact Newton where its iteration costs at most this
#: many Hessian-vector products' reads of the design (``nnz(X) K`` each): the Hessian's
#: products run at GEMM speed, Newton-CG's at matrix-vector speed, and Newton-CG takes
#: 2-3 times the iterations with 3-70 products each. Measured with both solvers to the
#: same optimum (CPU seconds, one thread, C = 10; Newton in float32 with its float64
#: polish where ``auto`` works so), Newton / Newton-CG at a cost of: 131 products
#: (3,000 x 40, K = 5) 0.52; 143 (5,000 x 140, binary) 0.92; 184 (4,000 x 30, K = 10)
#: 0.84; 203 (10,000 x 200) 0.78; 308 (5,000 x 300) 1.12; 357 (8,000 x 60, K = 10)
#: 1.33; 443 (digits) 0.98-1.08; 719 (3,000 x 200, K = 5) 2.45; 1,169 (2,000 x 1,000)
#: 1.52; 2,445 (1,000 x 100, K = 20) 14.
AUTO_NEWTON_MAX_PRODUCTS = 250


def choose_solver(model: LinearModel, n_samples: int | None = None, n_entries: int | None = None) -> str:
    """The solver ``auto`` picks from the model's shape.

    The Gaussian family with its identity link is least squares: ``qr``
    (Householder QR, error ``eps cond(X~)`` instead of the normal equations'
    ``eps cond(X~)^2``; :mod:`.least_squares`), Newton for a sparse design. Otherwise,
    one Newton iteration costs about ``n d~^2 K (K + 1) / 2`` flops for the
    Hessian (dense matrix products, fast per flop) plus ``(K d~)^3 / 3`` for the
    Cholesky factor; a quasi-Newton iteration costs about ``2 n K d~``
    (memory-bound) but needs many more iterations. Exact Newton is chosen when
    ``d~ K (K + 1) / 2 <= NEWTON_MAX_COST`` (:data:`.finish.NEWTON_MAX_COST`, 128:
    binary problems with up to 127 features, softmax with K = 3 and up to 20
    features). Otherwise a small penalized problem, whose design has at most
    ``AUTO_SMALL_MAX_ENTRIES`` stored entries times outputs (``n_entries K``:
    digits' 1,797 x 64 with K = 10, a 20-newsgroups-sized TF-IDF matrix with 1.9
    million entries and two classes), is fitted by exact Newton where its iteration
    costs at most ``AUTO_SMALL_NEWTON_MAX_FLOPS`` (15 samples of 30 features in 3
    classes: its quadratic convergence lands on the optimum to rounding, where
    Newton-CG's truncated steps stop at the tolerance) or at most
    ``AUTO_NEWTON_MAX_PRODUCTS`` Hessian-vector products (``n_entries K`` each: the
    cost of the choice, measured at both sides), else by Newton-CG: a pass there costs
    little next to a step's fixed work, and Newton-CG reaches the optimum in 10-20
    steps where L-BFGS took 130-190 (digits, C = 10: 32 passes and 1.1 s against
    192 passes and 1.4 s; its Newton iteration costs 443 products, and exact Newton's
    10 Hessian passes took as long as Newton-CG's 336 products). A larger one, or an unpenalized one (whose optimum may not
    exist: separated classes, where L-BFGS's finishing Newton-CG step is what
    declines the certificate), is fitted by L-BFGS, whose fit then ends with a
    Newton-CG verification (on a sparse design :func:`fit` gives it
    :func:`sparse_lbfgs_memory` pairs). ``n_entries`` is the design's stored entries
    (``n_samples d`` for a dense one; ``None``: unknown, not small).
    When :func:`fit` runs ``auto`` Newton with at least ``AUTO_FLOAT32_MIN_FLOPS``
    per pass, L-BFGS on a dense design with at least ``AUTO_FLOAT32_LBFGS_MIN_FLOPS``
    (one output: values whose squares' sums fit float32),
    or L-BFGS on a sparse design above ``AUTO_SMALL_MAX_ENTRIES`` stored entries times
    outputs, and no ``dtype`` is given, it works in float32 and polishes in float64.
    """
    if model.family.least_squares:
        return "qr"
    cost = hessian_cost(model)
    if cost <= NEWTON_MAX_COST:
        return "newton"
    small = (
        n_entries is not None
        and n_samples is not None
        and n_entries * model.n_outputs <= AUTO_SMALL_MAX_ENTRIES
    )
    if not (small and model.l2 > 0):
        return "lbfgs"
    d = model.n_features + model.has_intercept
    newton_flops = n_samples * d * cost + (model.n_outputs * d) ** 3 / 3
    products = newton_flops / max(n_entries * model.n_outputs, 1)  # in Hessian-vector products
    if newton_flops <= AUTO_SMALL_NEWTON_MAX_FLOPS or products <= AUTO_NEWTON_MAX_PRODUCTS:
        return "newton"
    return "newton-cg"


#: The L-BFGS memory ``auto`` gives a sparse design, where its pairs fit in the
#: design's own bytes (:func:`sparse_lbfgs_memory`).
SPARSE_LBFGS_MAX_MEMORY = 30


def sparse_lbfgs_memory(x: torch.Tensor, n_params: int) -> int:
    """The L-BFGS memory ``m`` for ``auto`` on a sparse CSR design with ``n_params``
    parameters: :data:`SPARSE_LBFGS_MAX_MEMORY`, or fewer (not under scipy's default
    10) where the ``2 m`` float64 pairs would take more bytes than the CSR itself.

    On a sparse design the passes, not the directions, are what a fit pays for: the
    two-loop recursion's ``4 m p`` flops per iteration are far below a pass's reads
    of every stored entry (and its fixed cost), and a longer memory saves passes.
    Measured with bench/sparse.py (one thread), passes + Hessian-vector products to
    the certified optimum with ``m = 10`` and 30: 45 + 9 and 28 + 9 on the 25,000 x
    10,000 bag of words, 60 + 10 and 37 + 6 on its first 3,000 rows, 445 + 10 and
    190 + 7 on 100,000 rows of the hashed 2^18-bucket bag of words.
    """
    csr_bytes = x.values().numel() * (x.values().element_size() + x.col_indices().element_size())
    csr_bytes += x.crow_indices().numel() * x.crow_indices().element_size()
    fits = csr_bytes // (2 * 8 * max(n_params, 1))
    return int(min(SPARSE_LBFGS_MAX_MEMORY, max(10, fits)))


def _sparse_lbfgs_options(model: LinearModel, x: torch.Tensor) -> dict:
    """What ``auto`` gives L-BFGS on a sparse design: :func:`sparse_lbfgs_memory`
    pairs, and the Jacobi start (:class:`~.gradient.LBFGSFitter`'s ``jacobi``). Sparse
    counts are not centered or scaled (that would fill them in), and their columns'
    scales can differ by orders of magnitude: on 100,000 rows of bench/sparse.py's
    hashed bag of words (2^18 buckets, Zipf-like word frequencies) plain L-BFGS took
    248 iterations where scikit-learn's took 201. The Jacobi start costs its first
    pass the squared values' product once."""
    n_params = model.n_outputs * (model.n_features + model.has_intercept)
    return {"memory": sparse_lbfgs_memory(x, n_params), "jacobi": True}


@functools.cache
def _option_names(cls: type) -> frozenset[str]:
    """The option names a solver class takes (its and its bases' ``__init__``), read
    once per class (``inspect.signature`` cost a tiny fit about 2% of its time)."""
    allowed = set()
    for klass in cls.__mro__[:-1]:  # not object's (*args, **kwargs)
        init = klass.__dict__.get("__init__")
        if init is not None:
            allowed |= {p for p in inspect.signature(init).parameters if p not in ("self", "model")}
    return frozenset(allowed - {"options", "kwargs"})


@functools.cache
def _default_tol() -> float:
    """:class:`StepFitter`'s default ``tol``, read once (``inspect.signature`` took 35 us
    of every fit)."""
    return inspect.signature(StepFitter.__init__).parameters["tol"].default


def _check_options(name: str, cls: type, options: dict) -> None:
    """Unknown option names are an input error that lists the solver's options."""
    allowed = _option_names(cls)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise fail(f"options of solver '{name}'", f"names among {sorted(allowed)}", unknown)


def make_fitter(model: LinearModel, solver: str = "auto", **options) -> Fitter:
    """A pass-based fitter for ``model``.

    Args:
        model: a ``GeneralizedLinearModel``.
        solver: a name in :data:`SOLVERS` or :data:`DIRECT_SOLVERS`, or ``"auto"``
            (see :func:`choose_solver`).
        **options: the fitter's options (``max_iter``, ``tol``, ``gtol``,
            ``dtype``, ``lr``, ``memory``, ``max_cg``, ...).

    Raises:
        InputError: for an unknown solver name.
        TypeError: for an option the solver does not take (the training task
            reports it as ``solver_options``; :func:`fit` checks names itself).
    """
    if solver == "auto":
        solver = "proximal" if options.get("l1") else choose_solver(model)  # only it handles L1
    return _solver_class(solver, solver)(model, **options)


def fit(
    model: LinearModel,
    x: torch.Tensor,
    y: torch.Tensor,
    weight: torch.Tensor | None = None,
    offset: torch.Tensor | None = None,
    solver: str = "auto",
    batch_size: int | None = None,
    max_iter: int | None = None,
    dtype: torch.dtype | None = None,
    polish: bool | None = None,
    max_passes: int | None = None,
    hessian_precision: str = "highest",
    n_jobs: int | None = None,
    **options,
) -> FitResult:
    """Fit ``model`` in place by passes over in-memory batches, without a Trainer.

    Args:
        model: a ``GeneralizedLinearModel`` (its parameters are the start).
        x: features (n_samples, n_features); y: targets (n_samples,). Tensors or
            array-likes (NumPy, pandas, scipy.sparse: see ``model.as_data``);
            a DataFrame's column names become ``model.feature_names``.
        weight: optional sample weights (n_samples,); offset: optional (n_samples,).
        solver: a name in :data:`SOLVERS` or :data:`DIRECT_SOLVERS`, or ``"auto"``.
        batch_size: rows per batch (``None``: one batch). The iterates do not
            depend on it beyond rounding.
        max_iter: maximum accepted steps (solver default when ``None``).
        dtype: computation dtype; Newton-type solvers default to float64. Where it is
            wider than the model's parameters (a float32 model under Newton's default,
            or the float64 polish), the optimum is rounded to them: ``E`` there is
            evaluated once more (``extra.rounding_gap``), and a fit whose rounded
            optimum is more than ``tol max(1, |E|)`` above the optimum says
            ``converged=False`` with a :class:`~torchglm.NumericalWarning` (fit a
            float64 model to keep it).
        polish: after a fit in a lower precision (``dtype=torch.float32``),
            continue in float64 from its result until the float64 stopping rule
            holds (usually one verifying pass). Newton and IRLS reuse the last
            float32 Hessian there, so a polish pass costs one float64 loss and
            gradient. Default: on for lower precision.
        max_passes: cap on passes (default generous: ``50 * max_iter``).
        hessian_precision: ``"tf32"`` or ``"bf16"``: the lower-precision stage's
            Hessian products in TF32 (CUDA) or bfloat16 (see
            :class:`~torchglm.solvers.stepper.StepFitter`); the float64 polish then
            sums its own exact Hessian (instead of reusing the stage's) and decides
            convergence with it. Needs a stage before the polish (``dtype=float32``,
            or ``auto`` on a problem large enough to work in float32; under
            ``auto`` it is ignored where there is none).
        **options: more fitter options (``tol``, ``gtol``, ``lr``, ...).

    Returns:
        The :class:`FitResult`: ``history`` per accepted step (``loss``,
        ``grad_norm``, ``newton_decrement``, ``step_size``), ``extra`` with the
        final ``grad`` and ``hessian`` (Newton/IRLS), ``separation`` if detected;
        ``result.summary()`` prints the convergence table.

    Raises:
        InputError: on invalid data or options.

    Example:
        >>> x = torch.randn(200, 4); y = (x[:, 0] + torch.randn(200) > 0).float()
        >>> model = LogisticRegression(4, l2=1e-3)
        >>> result = fit(model, x, y, solver="newton")
        >>> result.converged
        True
    """
    with torch_threads(n_jobs):
        return _fit_stages(
            model, x, y, weight, offset, solver, batch_size, max_iter, dtype, polish, max_passes,
            hessian_precision, options,
        )  # fmt: skip


def _fit_stages(
    model,
    x,
    y,
    weight,
    offset,
    solver,
    batch_size,
    max_iter,
    dtype,
    polish,
    max_passes,
    hessian_precision,
    options,
) -> FitResult:
    """:func:`fit`'s body, on the thread count it set."""
    names = feature_names_of(x)
    x, y, weight, offset = model.as_data(x, y, weight, offset)
    x, y, extremes = model.check_data(x, y, weight, offset, return_extremes=True)
    if x.layout == torch.sparse_coo:
        # Once, here: CSR row slices are views, and a pass's products run on CSR
        # (sparse_rows.SparseRows); a COO design was gathered and converted every pass.
        x = x.to_sparse_csr()
    name = choose_solver(model, x.shape[0], _stored_entries(x)) if solver == "auto" else solver
    name = "proximal" if solver == "auto" and options.get("l1") else name  # only it handles L1
    if solver == "auto" and name == "qr" and x.layout != torch.strided:
        name = "newton"  # a sparse design stays sparse: Newton's X^T X is sparse-friendly
    cls = _solver_class(name, solver)
    _check_options(name, cls, options)
    if solver == "auto" and name == "lbfgs" and x.layout != torch.strided:
        options = {**_sparse_lbfgs_options(model, x), **options}
    if solver == "auto" and dtype is None:
        dtype = _auto_dtype(model, name, x, extremes)
        if name == "lbfgs" and dtype is not None and x.layout == torch.strided and model.n_outputs == 1:
            options = {**DENSE_FLOAT32_LBFGS_OPTIONS, **options}
    work = cls.compute_dtype(model, dtype)
    if polish is None:
        polish = work.itemsize < 8
    stages = [work, torch.float64] if polish and work != torch.float64 else [work]
    if hessian_precision != "highest" and len(stages) == 1 and solver != "auto":
        raise fail(
            "hessian_precision",
            "'highest' for a fit in one stage (a lower precision needs a stage the float64 polish "
            "verifies: dtype=torch.float32 with polish on)",
            repr(hessian_precision),
        )
    tol = options.get("tol", _default_tol())
    result = None
    for dt in stages:
        # The solver declares what its stages of lower precision and its polish take.
        declared = cls.stage_options(dt, dt == stages[-1], result, tol, hessian_precision)
        fitter = cls(model, max_iter=max_iter, dtype=dt, **{**options, **declared})
        xs = cast_values(x, dt)
        ys = y.to(dt) if y.is_floating_point() else y
        ws = None if weight is None else weight.to(dt)
        os_ = None if offset is None else offset.to(dt)
        batches = TensorBatches(xs, ys, ws, os_, batch_size)
        limit = max_passes or 50 * fitter.max_iter + 10
        # The passes in inference mode: each tensor operation skips autograd's dispatch
        # and version bookkeeping, a tenth of a small fit's time (breast_cancer's 455 x 30
        # passes). What leaves the fit is ordinary: the model's parameters are written in
        # place, and the result's tensors are copied out (:func:`_ordinary_tensors`).
        # Nothing reads the model during the passes here: the accepted point is written
        # once, when they end (a small fit wrote it at each of its ~10 steps, 5
        # operations each), or where they end by an exception or interrupt.
        fitter.write_each_step = False
        with torch.inference_mode():
            try:
                stage = run_passes(fitter, batches, limit)
                if not fitter.done:
                    fitter.stop(f"max_passes={limit} reached")
            finally:
                fitter.write_accepted()
        _ordinary_tensors(stage)
        result = stage if result is None else _chain(result, stage)
        if result.extra.separation is not None:
            break
    if dt.itemsize > model.param_dtype.itemsize:  # the last stage run (separation ends early)
        _check_rounding(model, result, dt, (xs, ys, ws, os_), tol)
    model.mark_fitted()
    model.feature_names = names
    result.extra.solver_choice = "auto" if solver == "auto" else "user"
    return result


def _auto_dtype(model: LinearModel, name: str, x: torch.Tensor, extremes=None) -> torch.dtype | None:
    """float32 (then the float64 polish) where ``auto``'s passes are costly enough to
    gain from it: Newton's Hessian passes from :data:`AUTO_FLOAT32_MIN_FLOPS`, a dense
    design's L-BFGS passes from :data:`AUTO_FLOAT32_LBFGS_MIN_FLOPS` (one output's where
    its values' sums of squares fit float32: its Jacobi start sums them), L-BFGS on a
    sparse design above :data:`AUTO_SMALL_MAX_ENTRIES` stored entries times outputs;
    else ``None``.

    A sparse pass's products gather the ``K`` coefficients of each stored entry's
    column and read its index and value whatever ``K``: float32 halves the gathered
    bytes and the values'. bench/sparse.py, one thread: on the 25,000 x 10,000 bag of
    words with K = 20, ``X W^T`` took 14 against 29 ms and ``X^T R`` 14 against 30 ms,
    and the fit 44 passes and 127 Hessian-vector products, all but 1 and 8 in float32,
    where float64 L-BFGS took 138 and 36; with two classes 17 passes and 25 products
    (5 in float64) against 24 and 14 in float64, 0.48 against 0.52 CPU seconds; on
    100,000 rows of the hashed bag of words (float32 counts, no cast) 2.5 against 3.8.
    ``extremes``: ``x``'s smallest and largest value where the data gate read them
    (:meth:`~torchglm.passes.LinearModel.check_data`), for :func:`_squares_fit`."""
    d = model.n_features + 1
    if name == "newton":
        flops = x.shape[0] * d * hessian_cost(model)
        return torch.float32 if flops >= AUTO_FLOAT32_MIN_FLOPS else None
    if name == "lbfgs" and x.layout != torch.strided:
        # Past the small problems (fitted by Newton-type solvers where penalized), on
        # values whose sums of squares fit float32.
        large = _stored_entries(x) * model.n_outputs > AUTO_SMALL_MAX_ENTRIES
        return torch.float32 if large and _squares_fit(x, torch.float32, extremes) else None
    if name == "lbfgs":
        # (values whose sums of squares fit float32: the Jacobi start's diagonal)
        flops = 4 * x.shape[0] * d * model.n_outputs
        large = flops >= AUTO_FLOAT32_LBFGS_MIN_FLOPS
        fits = model.n_outputs > 1 or _squares_fit(x, torch.float32, extremes)
        return torch.float32 if large and fits else None
    return None


def _squares_fit(x: torch.Tensor, dtype: torch.dtype, extremes: tuple[float, float] | None = None) -> bool:
    """Whether sums of squares of ``x``'s values stay finite in ``dtype``:
    ``max |x| <= sqrt(finfo.max / n)``, :func:`~torchglm._validation.check_magnitude`'s
    bound, from the ``extremes`` the data gate read (else one read of the stored
    values: 7 ms for 50,000 x 500 in float64, one thread). Beyond it a float32 stage's
    diagonal and products overflow (a column times 1e20: numerical warnings from a
    stage whose point the float64 polish then discards)."""
    if extremes is None:
        values = stored_values(x)
        if values.numel() == 0:
            return True
        extremes = tuple(float(v) for v in torch.aminmax(values))
    lo, hi = extremes
    return max(-lo, hi) <= square_sum_bound(dtype, x.shape[0])


def _stored_entries(x: torch.Tensor) -> int:
    """The entries of ``x`` a pass reads: ``n d`` dense, the stored values of a sparse one."""
    return int(x._nnz()) if x.layout != torch.strided else x.shape[0] * x.shape[1]


def _check_rounding(model: LinearModel, result: FitResult, dtype: torch.dtype, data, tol: float) -> None:
    """The parameters hold the fit's optimum rounded to their narrower dtype: evaluate
    ``E`` there in the fit's ``dtype``. On columns equal up to float32 rounding the
    float64 optimum has coefficients of +-1e6, and rounded to float32 it was 4e-5
    above itself; such a fit is not converged (nothing silently down-cast)."""
    if result.extra.loss is None:
        return
    probe = copy.deepcopy(model).to(dtype)
    with torch.no_grad():
        rounded = float(probe.objective(*data))
    best = float(result.extra.loss)
    gap = rounded - best
    result.extra.rounding_gap = gap
    if result.converged and not gap <= tol * max(1.0, abs(best)):
        result.converged = False
        result.message += (
            f"; but the optimum rounded to the model's {str(model.param_dtype).removeprefix('torch.')} "
            f"parameters is {gap:.3g} above it (tol*max(1,|E|) = {tol * max(1.0, abs(best)):.3g}): "
            f"fit a model of dtype {dtype} to keep it"
        )
        warn(f"{result.solver}: {result.message}", NumericalWarning)


def _ordinary(value):
    """``value`` with every inference tensor in it (in dicts and lists too) copied into
    an ordinary tensor, which autograd and in-place operations accept."""
    if isinstance(value, torch.Tensor):
        return value.clone() if value.is_inference() else value
    if isinstance(value, dict):
        return {k: _ordinary(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_ordinary(v) for v in value)
    return value


def _ordinary_tensors(result: FitResult) -> None:
    """The tensors a stage run in inference mode reports (gradient, Hessian, the
    separation direction, ...), as ordinary tensors, in place. (Its history holds
    numbers only: every solver records floats.)"""
    extra = result.extra
    for f in dataclasses.fields(extra):
        value = getattr(extra, f.name)
        if isinstance(value, (torch.Tensor, dict, list, tuple)):
            setattr(extra, f.name, _ordinary(value))


def _chain(first: FitResult, second: FitResult) -> FitResult:
    """Append a polishing stage to the first stage's record."""
    offset = first.n_iter
    for h in second.history:
        h["iteration"] += offset
    second.history = first.history + second.history
    second.n_iter += offset
    second.extra.stages = [first.extra.dtype, second.extra.dtype]
    if second.extra.hessian is None and first.extra.hessian is not None:
        # Newton's polish steps with the first stage's Hessian (float32-accurate).
        second.extra.hessian = first.extra.hessian.to(torch.float64)
    second.extra.passes = (first.extra.passes or 0) + (second.extra.passes or 0)
    if first.extra.cg_iterations or second.extra.cg_iterations:
        # Every stage's Hessian-vector products (each reads the data as a pass does).
        second.extra.cg_iterations = (first.extra.cg_iterations or []) + (second.extra.cg_iterations or [])
    return second
