"""Solvers: every fit is a sequence of passes over batches (see :mod:`.base`)."""

from .base import FitResult, Fitter, all_reduce_sum, run_passes

__all__ = ["FitResult", "Fitter", "all_reduce_sum", "run_passes"]
