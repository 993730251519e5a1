"""Lightning layer: the thin task, metrics and the ``train.py`` CLI.

Importing this package is cheap; its classes import Lightning on first access
(``torchglm.training.GLMTask``), so ``torchglm --help`` answers at once.
"""

__all__ = ["BayesianEvaluation", "GLMDataModule", "GLMMetrics", "GLMTask"]

_HOMES = {
    "BayesianEvaluation": ".bayes_callback",
    "GLMDataModule": ".data_module",
    "GLMMetrics": ".metrics",
    "GLMTask": ".task",
}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module 'torchglm.training' has no attribute {name!r}")
