"""The pass contract, under its former public name: it lives in :mod:`torchglm.passes`
(the ground floor, so that models need not import the solvers for it)."""

from ..passes import FitExtra, FitResult, Fitter, all_reduce_sum, run_passes

__all__ = ["FitExtra", "FitResult", "Fitter", "all_reduce_sum", "run_passes"]
