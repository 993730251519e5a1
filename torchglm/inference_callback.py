"""The GLM summary callback under its former name (``class_path:
torchglm.inference_callback.InferenceSummary`` in configs): it lives in
:mod:`torchglm.training.inference_callback`, with the rest of the Lightning layer."""

from .training.inference_callback import InferenceSummary

__all__ = ["InferenceSummary"]
