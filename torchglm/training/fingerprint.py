"""What identifies the data of a fit (:func:`data_fingerprint`), stored in its
checkpoints so that ``--resume`` refuses other data."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

import torch

__all__ = ["data_fingerprint"]


def data_fingerprint(
    splits: Mapping[str, tuple[Any, torch.Tensor]],
    extras: Mapping[str, tuple[torch.Tensor | None, ...]],
    streamed_digest: str | None = None,
) -> dict[str, Any]:
    """The rows per split, the number of features and a BLAKE2b digest of every split's
    tensors as the model sees them (split, standardized, labels as integers; features,
    targets, weights and offsets). The same data read again give the same bytes,
    whatever file they come from. A file streamed from disk is identified by the digest
    of its bytes (``streamed_digest``, read at setup) and the split sizes instead.
    Plain ``str``/``int`` values (checkpoints load with ``weights_only=True``).
    """
    rows = {k: int(y.shape[0]) for k, (_, y) in splits.items()}
    n_features = int(splits["train"][0].shape[1])
    if streamed_digest is not None:
        return {"rows": rows, "n_features": n_features, "digest": streamed_digest}
    digest = hashlib.blake2b(digest_size=16)
    for name, (x, y) in splits.items():
        for t in (x, y, *extras[name]):
            if t is not None:
                t = t.detach().cpu().contiguous()
                digest.update(f"{name} {t.dtype} {tuple(t.shape)};".encode())
                digest.update(t.numpy())  # the buffer itself, no copy
    return {"rows": rows, "n_features": n_features, "digest": digest.hexdigest()}
