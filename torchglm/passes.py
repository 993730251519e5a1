"""The pass contract shared by every solver, model and fit driver: a fit is a
sequence of passes over batches.

A :class:`Fitter` sees the data only through ``accumulate(batch)`` calls between
``start_pass()`` and ``end_pass()``. Each pass sums per-batch quantities (loss,
gradient, Hessian, sufficient statistics); ``end_pass`` all-reduces the sums when
``torch.distributed`` is initialized, then takes its step. The same fitter thus
serves in-memory tensors, data larger than memory, a Lightning ``Trainer``
(one epoch = one pass) and many processes.

It lives on the ground floor (models, solvers, inference, bayes and training all
use it); :mod:`torchglm.solvers.base` re-exports it under its former name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # annotations only: the contract sits below data/ in the layers
    from .data.batches import Batch

__all__ = ["FitResult", "Fitter", "all_reduce_sum", "run_passes"]


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
        extra: solver-specific results (e.g. the final Hessian).
    """

    solver: str
    converged: bool = False
    n_iter: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """A convergence table: one row per history entry, then the verdict."""
        keys = ["iteration", "loss", "grad_norm", "newton_decrement", "step_size"]
        keys = [k for k in keys if any(k in h for h in self.history)]
        lines = ["  ".join(f"{k:>16}" for k in keys)]
        for h in self.history:
            lines.append("  ".join(
                f"{h[k]:>16d}" if isinstance(h.get(k), int) else f"{h.get(k, float('nan')):>16.9g}"
                for k in keys))
        verdict = "converged" if self.converged else "NOT converged"
        lines.append(f"{self.solver}: {verdict} after {self.n_iter} iterations: {self.message}")
        return "\n".join(lines)


class Fitter:
    """Base class of pass-based fitters. Subclasses override the three hooks."""

    #: set by end_pass when the fit is over (converged, failed or out of iterations).
    done: bool = False
    result: FitResult

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
