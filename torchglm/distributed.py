"""Helpers for running the pass-based fitters on several processes.

torchglm does not ship a distributed engine: processes are started by
``torchrun`` or a Lightning strategy, which initialize ``torch.distributed``.
Each process reads only its shard of the rows; every pass's sums are then
all-reduced (:func:`torchglm.passes.all_reduce_sum`), so all processes take
the same step. This module gives each process its row range and checks, before
the first all-reduce, that the shards agree on feature count and dtype, so that a
mismatched shard is an error on every process instead of a hang or garbage.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ._validation import fail

__all__ = ["rank_and_world", "shard_range", "check_shards"]

_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` without ``torch.distributed``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_range(n_rows: int, rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Contiguous ``[start, stop)`` rows of ``n_rows`` owned by ``rank`` (balanced to one row)."""
    if rank is None or world_size is None:
        rank, world_size = rank_and_world()
    if not 0 <= rank < world_size:
        raise fail("rank", f"an integer in [0, {world_size})", rank)
    base, extra = divmod(n_rows, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def check_shards(n_features: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
    """Check that every process holds data with the same feature count and dtype.

    All processes exchange ``(n_features, dtype)`` with one ``all_gather``; when any
    differs, every process raises the same :class:`~torchglm.InputError`.
    No-op on a single process.
    """
    rank, world = rank_and_world()
    if world == 1:
        return
    code = _DTYPES.index(dtype) if dtype in _DTYPES else -1
    mine = torch.tensor([n_features, code], dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    table = torch.stack(gathered).cpu()
    if bool((table != table[0]).any()):
        shards = ", ".join(
            f"rank {r}: {int(f)} features, {_DTYPES[int(c)] if c >= 0 else 'non-float'}"
            for r, (f, c) in enumerate(table.tolist())
        )
        raise fail("data shards", "the same feature count and dtype on every process", shards)
