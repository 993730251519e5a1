"""The figure callback under its former name (``class_path:
torchglm.plot_callbacks.FigureLogger`` in configs): it lives in
:mod:`torchglm.training.plot_callbacks`, with the rest of the Lightning layer."""

from .training.plot_callbacks import FigureLogger

__all__ = ["FigureLogger"]
