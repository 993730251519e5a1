"""The solver registries, filled where each fitter class is defined.

``@register_solver`` above an iterative fitter class adds it to :data:`SOLVERS`;
``@register_direct_solver`` above a direct one (a closed-form solve for some
families only) adds it to :data:`DIRECT_SOLVERS`. :func:`torchglm.solvers.fit` and
:func:`~torchglm.solvers.make_fitter` look names up here, and the tests parametrize
over them, so a new solver is one class in one module.
"""

from __future__ import annotations

from ..passes import Fitter

__all__ = ["SOLVERS", "DIRECT_SOLVERS", "register_solver", "register_direct_solver"]

#: Iterative solvers (every family), by name (``"auto"`` resolves through
#: :func:`torchglm.solvers.choose_solver`).
SOLVERS: dict[str, type[Fitter]] = {}
#: Direct solvers for some families only: ``qr`` (least squares, the Gaussian with the
#: identity link).
DIRECT_SOLVERS: dict[str, type[Fitter]] = {}


def _add(registry: dict[str, type[Fitter]], cls: type[Fitter]) -> type[Fitter]:
    name = getattr(cls, "name", "")
    if not name or name in SOLVERS or name in DIRECT_SOLVERS or name == "auto":
        raise ValueError(f"solver class {cls.__qualname__}: name {name!r} is empty or taken")
    registry[name] = cls
    return cls


def register_solver(cls: type[Fitter]) -> type[Fitter]:
    """Class decorator: add an iterative fitter class to :data:`SOLVERS` under its ``name``."""
    return _add(SOLVERS, cls)


def register_direct_solver(cls: type[Fitter]) -> type[Fitter]:
    """Class decorator: add a direct fitter class to :data:`DIRECT_SOLVERS` under its ``name``."""
    return _add(DIRECT_SOLVERS, cls)
