"""Batches as index slices of tensors.

In-memory tabular data is served as contiguous slices (or one gather per batch
when shuffled), never per-sample ``__getitem__`` + collate: the latter costs an
order of magnitude more per epoch (see ``bench/``). Every pass of a solver is a
sum over the batches this iterable yields.

:meth:`TensorBatches.blocks` serves the same batches grouped into
:class:`BatchBlock` s of ``k`` consecutive batches, so that one Lightning step can
take ``k`` optimizer steps (``GLMTask(steps_per_block=k)``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple, Sequence

import torch

from .._validation import check_positive, check_same_length

__all__ = ["Batch", "BatchBlock", "BatchBlocks", "TensorBatches"]


class Batch(NamedTuple):
    """One batch: features, targets, optional sample weights and offsets."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None = None
    offset: torch.Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """This batch on ``device`` (absent fields stay ``None``)."""
        return Batch(*(None if t is None else t.to(device, non_blocking=non_blocking) for t in self))


class BatchBlock:
    """Consecutive mini-batches of one epoch, served as one item: the Lightning
    task takes one optimizer step per batch in it.

    Iterating yields the batches, each gathered (and moved to ``device``) when the
    iteration reaches it, as one batch per item would be: a batch gathered just
    before its step is still in cache (gathering a whole block of 32 first made
    an epoch of ``bench/sgd_epoch.py`` 10% slower).

    Args:
        batch: ``idx -> Batch``, the rows ``idx`` of the source.
        spans: the row indices (or ``(start, stop)`` spans) of each batch.
        device: where the batches go; ``None``: where the source is.
        non_blocking: move them with ``non_blocking`` (see :meth:`torch.Tensor.to`).
    """

    __slots__ = ("_batch", "_spans", "_device", "_non_blocking")

    def __init__(
        self,
        batch: Callable[[Any], Batch],
        spans: Sequence[Any],
        device: torch.device | None = None,
        non_blocking: bool = False,
    ):
        self._batch, self._spans, self._device, self._non_blocking = batch, spans, device, non_blocking

    def __len__(self) -> int:
        return len(self._spans)

    @property
    def spans(self) -> Sequence[Any]:
        """The row indices (or ``(start, stop)`` spans) of each batch."""
        return self._spans

    @property
    def gather(self) -> Callable[[Any], Batch]:
        """``idx -> Batch``: the rows ``idx`` of the source (where the source is)."""
        return self._batch

    def __iter__(self) -> Iterator[Batch]:
        for idx in self._spans:
            batch = self._batch(idx)
            yield batch if self._device is None else batch.to(self._device, non_blocking=self._non_blocking)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> BatchBlock:
        """The same block, its batches moved to ``device`` as they are iterated."""
        return BatchBlock(self._batch, self._spans, torch.device(device), non_blocking)


def _csr_rows(t: torch.Tensor, idx) -> torch.Tensor:
    """Rows of a CSR matrix: a contiguous span by offset arithmetic (no copy of other
    rows), an index tensor through a COO gather; the result stays CSR."""
    if isinstance(idx, torch.Tensor):
        return torch.index_select(t.to_sparse_coo(), 0, idx).to_sparse_csr()
    i, j = idx
    crow = t.crow_indices()
    lo, hi = crow[i], crow[j]
    return torch.sparse_csr_tensor(
        crow[i : j + 1] - lo, t.col_indices()[lo:hi], t.values()[lo:hi], size=(j - i, t.shape[1])
    )


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

    def __init__(
        self,
        x,
        y,
        weight=None,
        offset=None,
        batch_size: int | None = None,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
    ):
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
        # index_select, not t[idx]: the same rows, copied by a row-gather kernel
        # instead of advanced indexing (1024 x 50 float32 rows: 4x faster)
        return torch.index_select(t, 0, idx) if isinstance(idx, torch.Tensor) else t[idx[0] : idx[1]]

    def _spans(self) -> list:
        """The rows of each batch of one pass: a new permutation's slices when
        shuffling (one draw from ``generator``), else contiguous ``(start, stop)``."""
        bs = self.batch_size
        if self.shuffle:
            perm = torch.randperm(self.n, generator=self.generator).to(self.x.device)
            return [perm[i : i + bs] for i in range(0, self.n, bs)]
        return [(i, min(i + bs, self.n)) for i in range(0, self.n, bs)]

    def _batch(self, idx) -> Batch:
        return Batch(*(self._take(t, idx) for t in (self.x, self.y, self.weight, self.offset)))

    def __iter__(self) -> Iterator[Batch]:
        if 0 < self.n <= self.batch_size and not self.shuffle and self.x.layout == torch.strided:
            # One batch of every row: the tensors themselves, not views of all their rows
            # (the same data; a tiny fit's passes each sliced four of them).
            yield Batch(self.x, self.y, self.weight, self.offset)
            return
        for idx in self._spans():
            yield self._batch(idx)

    def blocks(self, steps_per_block: int) -> "BatchBlocks":
        """These batches, ``steps_per_block`` at a time (:class:`BatchBlocks`)."""
        return BatchBlocks(self, steps_per_block)


class BatchBlocks:
    """Re-iterable blocks of ``steps_per_block`` consecutive batches of ``batches``
    (the last block holds the rest).

    Iterating draws the epoch's permutation exactly as iterating ``batches`` does
    (same generator, same draw), and each batch is the same gather: block ``j``
    holds batches ``j k, ..., j k + k - 1`` of that pass, bit for bit. A batch is
    its own tensor, not a view into one gathered block: a view starts at an offset
    that is not a multiple of the allocator's 64-byte alignment for most shapes,
    and the BLAS kernels then round differently (weights a few ulps apart after
    a few steps).

    Args:
        batches: the batches to group.
        steps_per_block: batches per block, ``>= 1``.
    """

    def __init__(self, batches: TensorBatches, steps_per_block: int):
        check_positive("steps_per_block", steps_per_block)
        self.batches, self.steps_per_block = batches, int(steps_per_block)

    def __len__(self) -> int:
        return -(-len(self.batches) // self.steps_per_block)

    def __iter__(self) -> Iterator[BatchBlock]:
        spans, k = self.batches._spans(), self.steps_per_block
        for i in range(0, len(spans), k):
            yield BatchBlock(self.batches._batch, spans[i : i + k])
