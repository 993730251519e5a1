"""The train/val/test split of a data module's rows, and each process's shard of a split.

One seeded permutation of the ``n`` rows is cut into three consecutive parts
(train first), so the same ``(val_fraction, test_fraction, seed)`` give the same
rows whatever file holds them; a distributed fit then gives each process the
contiguous range :func:`torchglm.distributed.shard_range` of every part.
"""

from __future__ import annotations

import torch

from .._validation import fail
from ..distributed import shard_range

__all__ = ["Split", "shard"]


def shard(n: int, rank: int, world_size: int) -> torch.Tensor:
    """Row indices of ``rank``'s shard of ``n`` rows: the contiguous range of
    :func:`torchglm.distributed.shard_range` (the one sharding rule, also the
    out-of-core readers'), disjoint shards whose union is every row, so a sum over
    batches all-reduced across ranks is the full sum."""
    start, stop = shard_range(n, rank, world_size)
    return torch.arange(start, stop)


class Split:
    """The fractions of rows held out for validation and testing, and the seed of the
    permutation that picks them.

    Args:
        val_fraction: fraction of rows held out for validation (0 < f < 1).
        test_fraction: fraction of rows held out for testing (0 < f < 1).
        seed: seed of the permutation.

    Raises:
        InputError: a fraction outside (0, 1), or fractions leaving no training rows.

    Example:
        >>> parts = Split(0.2, 0.2, seed=0).parts(10)
        >>> [len(parts[k]) for k in ("train", "val", "test")]
        [6, 2, 2]
    """

    def __init__(self, val_fraction: float, test_fraction: float, seed: int):
        for name, f in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 < f < 1:
                raise fail(name, "a fraction strictly between 0 and 1", f)
        if val_fraction + test_fraction >= 1:
            raise fail(
                "val_fraction + test_fraction",
                "less than 1 (rows must remain for training)",
                val_fraction + test_fraction,
            )
        self.val_fraction, self.test_fraction, self.seed = val_fraction, test_fraction, seed

    def sizes(self, n: int) -> tuple[int, int, int]:
        """Rows of ``(train, val, test)`` out of ``n``.

        Raises:
            InputError: a split with no row.
        """
        n_val, n_test = round(self.val_fraction * n), round(self.test_fraction * n)
        n_train = n - n_val - n_test
        if min(n_val, n_test, n_train) < 1:
            raise fail("data", "at least one row in each of train/val/test", f"{n} rows in total")
        return n_train, n_val, n_test

    def parts(self, n: int) -> dict[str, torch.Tensor]:
        """Row indices (int64, in permutation order) of the train/val/test splits of ``n`` rows.

        Raises:
            InputError: a split with no row.
        """
        n_train, n_val, _ = self.sizes(n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
        return {
            "train": perm[:n_train],
            "val": perm[n_train : n_train + n_val],
            "test": perm[n_train + n_val :],
        }
