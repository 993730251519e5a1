"""Lightning layer: the thin task, metrics and the ``train.py`` CLI.

Importing this package imports Lightning; ``import torchglm`` does not.
"""

from ..data.module import GLMDataModule
from .metrics import GLMMetrics
from .task import GLMTask

__all__ = ["GLMDataModule", "GLMMetrics", "GLMTask"]
