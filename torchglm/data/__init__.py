"""Data: batches, files, built-in datasets and the Lightning data module."""

from .batches import Batch, TensorBatches

__all__ = ["Batch", "TensorBatches"]
