"""Data: batches, files and built-in datasets (no Lightning).

Lightning's data module lives in the training layer
(:class:`torchglm.training.GLMDataModule`).
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
]
