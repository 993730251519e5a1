"""Solvers: every fit is a sequence of passes over batches (the pass contract of
:mod:`torchglm.passes`).

``fit(model, x, y, solver=...)`` for notebooks; ``make_fitter(model, solver)`` for
the Trainer; ``hessian_and_gradient(model, batches)`` for inference and the
Laplace posterior. Solvers: ``newton``, ``irls``, ``newton-cg``, ``lbfgs``,
``gd``, ``coordinate``, the direct ``qr`` (least squares: the Gaussian with the
identity link) and ``auto`` (see ``docs/solvers.md``).
"""

from .api import choose_solver, fit, make_fitter
from .layout import flat_parameters, parameter_names, set_flat_parameters
from .pass_sums import hessian_and_gradient
from .gradient import CoordinateDescentFitter, GradientDescentFitter, LBFGSFitter
from .newton import IRLSFitter, NewtonCGFitter, NewtonFitter
from .registry import DIRECT_SOLVERS, SOLVERS
from .stepper import StepFitter

__all__ = [
    "SOLVERS",
    "DIRECT_SOLVERS",
    "choose_solver",
    "fit",
    "make_fitter",
    "flat_parameters",
    "hessian_and_gradient",
    "parameter_names",
    "set_flat_parameters",
    "StepFitter",
    "NewtonFitter",
    "IRLSFitter",
    "NewtonCGFitter",
    "GradientDescentFitter",
    "CoordinateDescentFitter",
    "LBFGSFitter",
]
