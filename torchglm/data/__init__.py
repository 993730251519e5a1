"""Data: batches, files and built-in datasets (no Lightning).

:class:`GLMDataModule` (Lightning's data module, in :mod:`torchglm.training`) is
re-exported lazily, so ``import torchglm`` does not pay for importing Lightning.
"""

from .batches import Batch, TensorBatches
from .dataset import Dataset
from .datasets import DATASETS, load_dataset
from .files import Table, read_table

__all__ = [
    "Batch",
    "TensorBatches",
    "DATASETS",
    "Dataset",
    "load_dataset",
    "Table",
    "read_table",
    "GLMDataModule",
]


def __getattr__(name):
    if name == "GLMDataModule":
        from ..training.data_module import GLMDataModule

        return GLMDataModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
