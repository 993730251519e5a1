"""A block of SGD steps recorded once and replayed: CUDA graphs for the Lightning task.

On device-resident data, a block of ``k`` mini-batch steps is the same sequence of
kernels every time: gather the rows of ``k`` index vectors, forward, backward,
optimizer update. Eagerly, each step costs a few dozen kernel launches plus the
Python and autograd work that issues them, which on a GPU is far more than the
arithmetic of a GLM's step (measured: 0.52 M samples/s through ``train.py`` at
batch 1024, d = 256, against 16.8 M/s for the same step replayed as a CUDA graph).
Captured as one graph (``torch.cuda.CUDAGraph``; PyTorch's "CUDA Graphs" notes,
whole-network capture), a block is one launch.

What changes from block to block lives in static buffers that the graph reads:
the ``k`` index vectors (copied in before each replay) and the running sum of the
epoch's losses (copied in and out). What a block yields is read from static
buffers after it: the ``k`` step losses. Python runs only while recording, so the
recorded body must not depend on values (no host reads), and everything baked into
the kernels (the learning rate, momentum, ... as Python numbers) is the graph's
key: when it changes (a per-epoch scheduler), the block is recorded again.

:class:`BlockGraph` holds the buffers, the key and the graph; the SGD step blocks
(:class:`~torchglm.training.sgd_blocks.StepBlocks`) supply the body and
decides when a block is eligible. The graph itself comes from a backend,
``torch.cuda.CUDAGraph`` by default; ``tests/graph_replay.py`` records the aten
operations on the CPU and replays them in the same way, so the bookkeeping is
tested without a GPU.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Hashable, Iterator, Protocol, Sequence

import torch

__all__ = ["BlockGraph", "CudaGraph", "GraphBackend", "capturable_optimizer", "optimizer_key", "side_stream"]


class GraphBackend(Protocol):
    """What :class:`BlockGraph` needs of a graph: record once, replay many times."""

    def capture(self) -> AbstractContextManager: ...

    def replay(self) -> None: ...


class CudaGraph:
    """``torch.cuda.CUDAGraph`` as a :class:`GraphBackend`: ``capture()`` is
    ``torch.cuda.graph(g)`` (its own capture stream and private memory pool)."""

    def __init__(self) -> None:
        self.graph = torch.cuda.CUDAGraph()

    def capture(self) -> AbstractContextManager:
        return torch.cuda.graph(self.graph)

    def replay(self) -> None:
        self.graph.replay()


def capturable_optimizer(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` can be recorded in a graph: plain ``SGD`` (its
    state, the momentum buffers, lives on the device once created), or an optimizer
    built with ``capturable=True`` (Adam and friends then keep their step count on
    the device; torch refuses to record them otherwise). Closure-driven line
    searches (``LBFGS``) read values back and cannot."""
    if type(optimizer) is torch.optim.SGD:
        return True
    return bool(optimizer.defaults.get("capturable"))


def optimizer_key(optimizer: torch.optim.Optimizer) -> tuple:
    """The optimizer's hyperparameters that a recorded step bakes in as numbers
    (learning rate, momentum, betas, ...): a block is recorded again when they change."""
    return tuple(
        tuple((k, v) for k, v in sorted(group.items()) if k != "params" and not isinstance(v, torch.Tensor))
        for group in optimizer.param_groups
    )


class BlockGraph:
    """The static buffers, key and graph of one block of ``steps`` optimizer steps.

    Args:
        steps: optimizer steps per block (``k``).
        batch_size: rows per mini-batch (every batch of a recorded block has it).
        device: where the data, the model and the buffers live.
        dtype: the dtype of the losses.
        backend: ``() -> GraphBackend``; default :class:`CudaGraph`.

    Attributes:
        index: ``(k, batch_size)`` int64, the rows of each step (copied in per block).
        losses: ``(k,)`` the step losses of the last replayed block.
        total: ``()`` the running loss sum (copied in and out around a replay).
        recordings: how many times a block was recorded (a changed key records again).
    """

    def __init__(
        self,
        steps: int,
        batch_size: int,
        device: torch.device,
        dtype: torch.dtype,
        backend: Callable[[], GraphBackend] | None = None,
    ):
        self.steps, self.batch_size = steps, batch_size
        self.backend = backend or CudaGraph
        self.index = torch.zeros(steps, batch_size, dtype=torch.long, device=device)
        self.losses = torch.zeros(steps, dtype=dtype, device=device)
        self.total = torch.zeros((), dtype=dtype, device=device)
        self.graph: GraphBackend | None = None
        self.key: Hashable | None = None
        self.recordings = 0

    def fits(self, spans: Sequence[Any]) -> bool:
        """Whether a block with these row indices can replay the graph: ``k`` index
        vectors of ``batch_size`` rows on the buffers' device (an epoch's last block,
        with fewer or shorter batches, and unshuffled ``(start, stop)`` spans run eagerly)."""
        return len(spans) == self.steps and all(
            isinstance(s, torch.Tensor)
            and s.shape == (self.batch_size,)
            and s.device == self.index.device
            and s.dtype == torch.long
            for s in spans
        )

    def run(
        self,
        spans: Sequence[torch.Tensor],
        total: torch.Tensor,
        key: Hashable,
        body: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None],
    ) -> torch.Tensor:
        """Take one block's steps: copy the indices and the running sum in, record
        ``body(index, losses, total)`` first (or again, when ``key`` changed), replay,
        copy the sum out. Returns :attr:`losses` (valid until the next block)."""
        torch.stack(list(spans), out=self.index)
        self.total.copy_(total)
        if self.graph is None or key != self.key:
            self.graph = None  # release the previous recording's memory first
            graph = self.backend()
            with graph.capture():
                body(self.index, self.losses, self.total)
            self.graph, self.key = graph, key
            self.recordings += 1
        self.graph.replay()
        total.copy_(self.total)
        return self.losses


@contextmanager
def side_stream(device: torch.device) -> Iterator[None]:
    """Run the enclosed work on a new CUDA stream that starts after the current
    stream's work and that the current stream then waits for (the warm-up before a
    recording, as PyTorch's CUDA-graph notes ask); nothing on other devices."""
    if device.type != "cuda":
        yield
        return
    current = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        yield
    current.wait_stream(stream)
