"""Where a fit gathers a data module's batches (:class:`Placement`): on a CUDA device
that holds every split, moved there once per fit, or where the tensors are."""

from __future__ import annotations

from typing import Callable, Iterable

import torch

__all__ = ["Placement", "RESIDENT_FRACTION"]

#: The splits stay on a CUDA device for a fit when together they take at most this
#: fraction of its free memory (:meth:`Placement.keep_on`).
RESIDENT_FRACTION = 0.5


class Placement:
    """The device the batches are gathered on, and the split tensors moved there.

    Attributes:
        device: the device the batches are gathered on (``None``: where the tensors
            are, the CPU), set by :meth:`keep_on` for a fit and cleared by :meth:`clear`.
    """

    def __init__(self):
        self.device: torch.device | None = None
        self._moved: dict[str, tuple[torch.Tensor | None, ...]] = {}

    def keep_on(self, device: torch.device | str, tensors: Iterable[torch.Tensor], streamed: bool) -> bool:
        """Gather the batches on ``device`` for a fit: every split is moved there once,
        when it is first batched, instead of each batch at every step. Done on a CUDA
        device when ``tensors`` (every split's) together take at most
        :data:`RESIDENT_FRACTION` of its free memory; on a CPU they are there already.

        Returns:
            Whether the batches are gathered on ``device`` (``False``: they stay on
            the CPU and Lightning moves each batch).
        """
        device = torch.device(device)
        self.clear()
        if streamed:
            return device.type == "cpu"  # each batch is read, then moved
        if device.type == "cpu":
            return True
        if device.type != "cuda":
            return False
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        free, _ = torch.cuda.mem_get_info(device)
        if nbytes > RESIDENT_FRACTION * free:
            return False
        self.device = device
        return True

    def clear(self) -> None:
        """Release the device copies: batches are gathered where the tensors are."""
        self.device, self._moved = None, {}

    def tensors(
        self, name: str, make: Callable[[], tuple[torch.Tensor | None, ...]]
    ) -> tuple[torch.Tensor | None, ...]:
        """``make()``'s tensors of split ``name``, on :attr:`device` when set (moved once)."""
        if name in self._moved:
            return self._moved[name]
        tensors = make()
        if self.device is not None:
            tensors = tuple(None if t is None else t.to(self.device) for t in tensors)
            self._moved[name] = tensors
        return tensors
