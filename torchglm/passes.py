"""The pass contract shared by every solver, model and fit driver: a fit is a
sequence of passes over batches.

A :class:`Fitter` sees the data only through ``accumulate(batch)`` calls between
``start_pass()`` and ``end_pass()``. Each pass sums per-batch quantities (loss,
gradient, Hessian, sufficient statistics); ``end_pass`` all-reduces the sums when
``torch.distributed`` is initialized, then takes its step. The same fitter thus
serves in-memory tensors, data larger than memory, a Lightning ``Trainer``
(one epoch = one pass) and many processes.

It lives on the ground floor (models, solvers, inference, bayes and training all
use it). So do the two things the solvers and the models share: the linear
predictor (:func:`linear_predictor`) and the duck type of the model a solver fits
(:class:`LinearModel`), so that the solvers import no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # annotations only: the contract sits below data/ and the math in the layers
    from .data.batches import Batch
    from .families import Family

__all__ = [
    "FitExtra",
    "FitResult",
    "Fitter",
    "LinearModel",
    "all_reduce_sum",
    "linear_predictor",
    "run_passes",
]


def _plain_dense(x, weight: torch.Tensor) -> bool:
    """A strided tensor of ``weight``'s dtype, outside autocast: ``addmm`` then gives
    exactly ``x W^T + b`` in that dtype."""
    return (
        isinstance(x, torch.Tensor)
        and x.layout == torch.strided
        and x.dtype == weight.dtype
        and not torch.is_autocast_enabled(x.device.type)
    )


def linear_predictor(
    x,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    offset: torch.Tensor | None = None,
    multi_output: bool = False,
) -> torch.Tensor:
    """``eta = x W^T + b + offset`` (McCullagh & Nelder §2.2; the lecture notes on
    probabilistic classification, "Generalized linear models"): the one place the
    linear predictor is written, for the models' ``forward`` and the solvers' passes.

    Args:
        x: features (n, d): a dense or sparse tensor, or anything with ``x @ W^T``
            (a solver's cached sparse rows).
        weight: ``W`` (K, d), or a stack (S, K, d) (e.g. posterior draws).
        bias: ``b`` (K,) or (S, K); ``None`` without intercept.
        offset: a known term (n,) added to every output's eta.
        multi_output: keep the output axis (softmax); otherwise it is squeezed.

    Returns:
        (n,) or (n, K) for one ``W``; (S, n) or (S, n, K) for a stack.

    Example:
        >>> linear_predictor(torch.ones(2, 3), torch.ones(1, 3), torch.ones(1))
        tensor([4., 4.])
    """
    if weight.dim() == 2:
        if bias is not None and _plain_dense(x, weight) and bias.dtype == weight.dtype:
            eta = torch.addmm(bias, x, weight.T)  # one fused product and sum: no second n x K copy
        else:
            eta = x @ weight.T
            if bias is not None:
                # in eta's dtype: under autocast the product is bfloat16/float16 and stays so,
                # as F.linear's would (a float32 bias would promote it); otherwise a no-op
                eta = eta + bias.to(eta.dtype)
    else:
        eta = torch.einsum("nd,...kd->...nk", x, weight)
        if bias is not None:
            eta = eta + bias.unsqueeze(-2)
    if not multi_output:
        eta = eta.squeeze(-1)
    if offset is not None:
        eta = eta + (offset.unsqueeze(-1) if multi_output else offset)
    return eta


class LinearModel(Protocol):
    """The model a solver fits, as the solvers see it (a duck type: the solvers import
    no model; :class:`~torchglm.models.GeneralizedLinearModel` is one).

    ``eta = x W^T + b (+ offset)`` with ``W`` (``n_outputs``, ``n_features``) and ``b``
    (``n_bias`` entries, 0 without intercept), a family (mean, NLL and link) and an L2
    penalty ``(l2 / 2) ||W||^2``. The flat parameters are ``[W.reshape(-1), b]``.
    """

    family: Family
    l2: float
    feature_names: list[str] | None

    @property
    def n_features(self) -> int: ...
    @property
    def n_outputs(self) -> int: ...
    @property
    def n_bias(self) -> int: ...
    @property
    def has_intercept(self) -> bool: ...
    @property
    def param_dtype(self) -> torch.dtype: ...
    @property
    def param_device(self) -> torch.device: ...

    def flat_parameters(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``[W.reshape(-1), b]`` as one detached vector (a copy), in ``dtype``."""

    def set_flat_parameters(self, theta: torch.Tensor) -> None:
        """Write a flat vector into the parameters (in their dtype)."""

    def parameter_names(self) -> list[str]:
        """Names of the flat parameters (``weight[k,j]``, then ``bias[k]``)."""

    def as_data(self, x, y=None, weight=None, offset=None) -> tuple:
        """Array-likes as tensors of the model's dtype and device."""

    def check_data(
        self, x, y, weight=None, offset=None, fitting: bool = True, return_extremes: bool = False
    ) -> tuple:
        """The one data gate: ``(x, y)`` validated for this model; with ``return_extremes``
        ``(x, y, extremes)``, ``x``'s smallest and largest value (``None``: none stored)."""

    def objective(self, x, y, weight=None, offset=None) -> torch.Tensor:
        """``E``: weighted mean NLL plus the penalty."""

    def mark_fitted(self) -> None:
        """Record that the parameters hold a fit."""


@dataclass
class FitExtra:
    """The solver-specific part of a :class:`FitResult`: the known entries as typed
    fields (``None``: not reported by this fit), any other entry in ``other``.

    It also reads and writes like the dict it replaces (``extra["hessian"]``,
    ``extra.get("separation")``, ``"start" in extra``, ``update``, ``setdefault``),
    and :func:`dataclasses.asdict` turns it into plain dicts (checkpoints).

    Attributes:
        loss: the final objective ``E`` (weighted mean NLL + penalty).
        grad: its gradient at the returned parameters.
        hessian: its Hessian there (Newton-type solvers), ``None`` when not formed.
        passes: passes over the data.
        dtype: the working dtype of the (last) stage, e.g. ``"torch.float64"``.
        stages: the dtypes of a float32 fit and its float64 polish.
        separation: the separation record (direction, coefficients, kind).
        start: how the start was chosen when not the given parameters.
        first_order_stop: why a first-order phase handed over to Newton-type steps.
        finish_steps: the Newton-type steps after it.
        solver_choice: ``"auto"`` or ``"user"``.
        numerical_warnings: the numerical notes of the fit (name -> count or text).
        cg_iterations: conjugate-gradient iterations per Newton-CG step (with the
            Hessian-vector products of its certificate, where one was asked for).
        cg_certificate: how the last Newton-CG step's decrement was bounded
            (``decrement_bound = step_part + residual_bound``, the ``bound`` used, the
            smaller-residual CG solves it ``tightened``); ``None`` where none was.
        lbfgs_memory: the L-BFGS pairs ``(s, y)`` and Jacobi scaling a float32 stage
            hands to its float64 polish with its finish (the polish's CG preconditioner;
            :class:`~torchglm.solvers.gradient.LBFGSFitter`); ``None`` otherwise.
        rounding_gap: ``E`` at the parameters as stored (the fit's optimum rounded to
            the model's narrower dtype, e.g. a float32 model fitted in float64) minus
            ``E`` at that optimum, evaluated in the fit's dtype.
        other: every other entry (e.g. ``n_samples`` of a closed-form fit).
    """

    loss: float | None = None
    grad: torch.Tensor | None = None
    hessian: torch.Tensor | None = None
    passes: int | None = None
    dtype: str | None = None
    stages: list | None = None
    separation: dict | None = None
    start: str | None = None
    first_order_stop: str | None = None
    finish_steps: int | None = None
    solver_choice: str | None = None
    numerical_warnings: dict | None = None
    cg_iterations: list | None = None
    cg_certificate: dict | None = None
    rounding_gap: float | None = None
    lbfgs_memory: dict | None = None
    other: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, entries: dict[str, Any]) -> "FitExtra":
        """From the old dict form, or :func:`dataclasses.asdict`'s (with ``other``)."""
        extra = cls()
        entries = dict(entries)
        other = entries.pop("other", None)
        if isinstance(other, dict):
            entries = {**other, **entries}
        elif other is not None:
            entries["other"] = other
        extra.update(entries)
        return extra

    # -- the dict interface it replaces ------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key in _KNOWN:
            return getattr(self, key)
        return self.other[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _KNOWN:
            setattr(self, key, value)
        else:
            self.other[key] = value

    def __contains__(self, key: object) -> bool:
        return getattr(self, key) is not None if key in _KNOWN else key in self.other

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def keys(self) -> list[str]:
        return [k for k in _KNOWN if getattr(self, k) is not None] + list(self.other)

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self[k]) for k in self.keys()]

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


_KNOWN = tuple(f.name for f in fields(FitExtra) if f.name != "other")


@dataclass
class FitResult:
    """What a fit reports.

    Attributes:
        solver: solver name.
        converged: whether the stopping rule was met (never hidden: a fit that
            stops at ``max_iter`` reports ``False`` and warns).
        n_iter: number of steps (or passes, for closed-form fits) taken.
        history: one dict per iteration (``loss``, ``grad_norm``, ...).
        message: why the fit stopped.
        extra: solver-specific results (e.g. the final Hessian): a :class:`FitExtra`
            (a dict given here, as from a checkpoint, is converted).
    """

    solver: str
    converged: bool = False
    n_iter: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    message: str = ""
    extra: FitExtra = field(default_factory=FitExtra)

    def __post_init__(self):
        if not isinstance(self.extra, FitExtra):
            self.extra = FitExtra.from_dict(self.extra or {})

    def summary(self) -> str:
        """A convergence table: one row per history entry, then the verdict."""
        keys = ["iteration", "loss", "grad_norm", "newton_decrement", "step_size"]
        keys = [k for k in keys if any(k in h for h in self.history)]
        lines = ["  ".join(f"{k:>16}" for k in keys)]
        for h in self.history:
            lines.append(
                "  ".join(
                    f"{h[k]:>16d}" if isinstance(h.get(k), int) else f"{h.get(k, float('nan')):>16.9g}"
                    for k in keys
                )
            )
        verdict = "converged" if self.converged else "NOT converged"
        lines.append(f"{self.solver}: {verdict} after {self.n_iter} iterations: {self.message}")
        return "\n".join(lines)


class Fitter:
    """Base class of pass-based fitters. Subclasses override the three pass hooks and
    :meth:`begin`.

    A fitter is made once per fit: ``__init__`` checks and keeps the options, then
    :meth:`restart_from` the model. Everything a fitter reads from the model (the
    start point, the dtype it follows, the device its state lives on) is read in
    :meth:`begin`, the one place, so that :meth:`restart_from` can begin the fit again
    from the model as it is later (moved, cast or given other weights) without making
    a second fitter.
    """

    #: set by end_pass when the fit is over (converged, failed or out of iterations).
    done: bool = False
    result: FitResult
    #: the solver's own computation dtype (``None``: the model's); Newton-type and
    #: direct solvers set float64.
    default_dtype: torch.dtype | None = None
    #: Whether the method's own steps converge only linearly (gradient and coordinate
    #: descent: the error shrinks per step by up to ``1 - 1/cond``, Nocedal & Wright
    #: §3.3): on an ill-conditioned problem such a fit may spend its ``max_iter`` and
    #: end ``converged=False`` with a ``ConvergenceWarning``.
    linear_rate: bool = False
    #: For a linear-rate method, a ``max_iter`` that lets a well-conditioned fit of a
    #: few hundred rows converge and ends a crawling one in seconds (the tests that run
    #: every solver use it); ``None``: the default ``max_iter`` does.
    budget_max_iter: int | None = None
    #: Whether each accepted step's point is written into the model at once (a Trainer's
    #: validation and checkpoints read the model between passes). A driver that reads
    #: it only once the passes end (:func:`~torchglm.solvers.fit`) sets ``False`` and
    #: calls :meth:`write_accepted` when they end, however they end.
    write_each_step: bool = True

    def write_accepted(self) -> None:
        """Write the last accepted point into the model where a fit left it unwritten
        (``write_each_step`` off, the passes ended by an exception or interrupt before
        the fit's own end wrote its point); nothing here: a fitter that writes no point
        per step has none to catch up."""

    @classmethod
    def compute_dtype(cls, model, dtype: torch.dtype | None = None) -> torch.dtype:
        """The dtype a fit computes in, decided here only: the requested ``dtype``,
        else the solver's :attr:`default_dtype`, else the model's parameter dtype
        (:func:`~torchglm.solvers.fit` may request float32 for a large ``auto`` Newton
        fit and then polishes in float64)."""
        return dtype or cls.default_dtype or model.param_dtype

    @classmethod
    def stage_options(
        cls, dtype: torch.dtype, last: bool, previous: FitResult | None, tol: float, hessian_precision: str
    ) -> dict[str, Any]:
        """The options of one stage of a fit in stages of rising precision
        (:func:`~torchglm.solvers.fit`'s float32 stage and its float64 polish), beyond
        the caller's, which they override.

        Args:
            dtype: the stage's working dtype.
            last: whether it is the last stage (the one that decides convergence).
            previous: the result of the stage before (``None`` for the first).
            tol: the caller's tolerance.
            hessian_precision: the precision asked for the lower stages' Hessian products.

        Returns:
            ``{}`` here: a fitter that knows no stages runs every stage alike.
        """
        return {}

    def restart_from(self, model: LinearModel) -> None:
        """Begin the fit afresh from ``model`` as it is now, with the options this fitter
        was made with (checked once, then): its parameters are the start, and the fit's
        state takes their device and, unless an option or the solver fixes one, their
        dtype (:meth:`compute_dtype`). The record of the fit so far (:attr:`result`,
        ``done``) and the solver's memory (e.g. L-BFGS pairs) are dropped; a resumed fit
        then loads its own (``result``, ``load_state_dict``).

        A driver that makes the fitter early, to check the solver and its options
        before anything is written, calls this when the fit starts: Lightning restores
        a resumed run's weights and moves the model to its device and precision in
        between.

        Args:
            model: the model to fit (the one the fitter was made for, as it is now).

        Raises:
            NotImplementedError: a fitter without :meth:`begin`.
        """
        self.model = model
        self.done = False
        self.begin()

    def begin(self) -> None:
        """Set the fit's state from ``self.model`` (start point, dtype, device, an empty
        :attr:`result`): the one place a fitter reads them (:meth:`restart_from`, which
        ``__init__`` calls after checking the options)."""
        raise NotImplementedError(f"{type(self).__name__} cannot begin a fit again: it defines no begin()")

    def start_pass(self) -> None:
        raise NotImplementedError

    def accumulate(self, batch: Batch) -> None:
        raise NotImplementedError

    def end_pass(self) -> bool:
        """Finish the pass (all-reduce, step, convergence check); return ``done``."""
        raise NotImplementedError


def all_reduce_sum(*tensors: torch.Tensor) -> None:
    """Sum tensors in place across processes when ``torch.distributed`` is initialized.

    Every process must call this with tensors of the same shapes and dtype.
    """
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        for t in tensors:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)


def run_passes(fitter: Fitter, batches: Iterable[Batch], max_passes: int) -> FitResult:
    """Drive a fitter over re-iterable ``batches`` until it is done or ``max_passes``."""
    for _ in range(max_passes):
        fitter.start_pass()
        for batch in batches:
            fitter.accumulate(batch)
        if fitter.end_pass():
            break
    return fitter.result
