"""Batches as index slices of tensors.

In-memory tabular data is served as contiguous slices (or one gather per batch
when shuffled), never per-sample ``__getitem__`` + collate: the latter costs an
order of magnitude more per epoch (see ``bench/``). Every pass of a solver is a
sum over the batches this iterable yields.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import torch

from .._validation import check_positive, check_same_length

__all__ = ["Batch", "TensorBatches"]


class Batch(NamedTuple):
    """One batch: features, targets, optional sample weights and offsets."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None = None
    offset: torch.Tensor | None = None


def _csr_rows(t: torch.Tensor, idx) -> torch.Tensor:
    """Rows of a CSR matrix: a contiguous span by offset arithmetic (no copy of other
    rows), an index tensor through a COO gather; the result stays CSR."""
    if isinstance(idx, torch.Tensor):
        return torch.index_select(t.to_sparse_coo(), 0, idx).to_sparse_csr()
    i, j = idx
    crow = t.crow_indices()
    lo, hi = crow[i], crow[j]
    return torch.sparse_csr_tensor(crow[i:j + 1] - lo, t.col_indices()[lo:hi], t.values()[lo:hi],
                                   size=(j - i, t.shape[1]))


class TensorBatches:
    """Re-iterable batches over in-memory tensors.

    Args:
        x: features (n, d), dense or sparse (COO or CSR: bag-of-words counts are
            sliced without densifying).
        y: targets (n,).
        weight: optional sample weights (n,).
        offset: optional offsets (n,).
        batch_size: rows per batch; ``None`` gives one batch of all rows.
        shuffle: draw a new permutation every pass (with ``generator``).
        generator: a ``torch.Generator`` for reproducible shuffling.
    """

    def __init__(self, x, y, weight=None, offset=None, batch_size: int | None = None,
                 shuffle: bool = False, generator: torch.Generator | None = None):
        tensors = [t for t in (x, y, weight, offset) if t is not None]
        check_same_length(["X", "y", "weight", "offset"][: len(tensors)], *tensors)
        if batch_size is not None:
            check_positive("batch_size", batch_size)
        self.x, self.y, self.weight, self.offset = x, y, weight, offset
        self.n = int(x.shape[0])
        self.batch_size = self.n if batch_size is None else int(batch_size)
        self.shuffle = shuffle
        self.generator = generator

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def _take(self, t, idx):
        if t is None:
            return None
        if t.layout == torch.sparse_csr:
            return _csr_rows(t, idx)
        if t.layout == torch.sparse_coo:
            rows = idx if isinstance(idx, torch.Tensor) else torch.arange(*idx, device=t.device)
            return torch.index_select(t, 0, rows)
        return t[idx] if isinstance(idx, torch.Tensor) else t[idx[0]:idx[1]]

    def __iter__(self) -> Iterator[Batch]:
        bs = self.batch_size
        if self.shuffle:
            perm = torch.randperm(self.n, generator=self.generator).to(self.x.device)
            spans = [perm[i:i + bs] for i in range(0, self.n, bs)]
        else:
            spans = [(i, min(i + bs, self.n)) for i in range(0, self.n, bs)]
        for idx in spans:
            yield Batch(*(self._take(t, idx) for t in (self.x, self.y, self.weight, self.offset)))
