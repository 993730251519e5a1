"""Solvers: every fit is a sequence of passes over batches (see :mod:`.base`)."""

from .base import FitResult, Fitter, all_reduce_sum, run_passes
from .derivatives import flat_parameters, hessian_and_gradient, parameter_names, set_flat_parameters

__all__ = [
    "FitResult",
    "Fitter",
    "all_reduce_sum",
    "run_passes",
    "flat_parameters",
    "hessian_and_gradient",
    "parameter_names",
    "set_flat_parameters",
]
