"""A CPU stand-in for ``torch.cuda.CUDAGraph``: record the aten operations once,
replay them on the same tensors.

A CUDA graph records kernels with their memory addresses during capture (without
running them) and replays exactly those kernels; Python does not run again. This
recorder keeps that contract on the CPU, so the task's recorded SGD blocks
(:mod:`torchglm.training.graphs`) are tested without a GPU:

* recording runs the body under a ``TorchDispatchMode`` that keeps every aten call
  with its argument and output tensors (the "addresses"), and refuses the calls
  that read a value back to the host (CUDA capture fails on them);
* recording must not change anything (capture runs no kernel): every storage an
  operation writes that existed before the recording is saved before its first
  write and restored when the recording ends;
* ``replay()`` calls the recorded operations again, in order, on the recorded
  tensors, writing each fresh result into the recorded output (the graph's private
  memory), in place operations in place. Whatever the body's Python did (branches,
  counters, new tensors) is not redone.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Calls that copy a device value to the host (a synchronization; capture fails).
HOST_READS = {
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
}


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an aten call writes (its schema's ``(a!)`` arguments)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        out += [v for v in values if isinstance(v, torch.Tensor)]
    return out


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: "RecordedGraph"):
        super().__init__()
        self.graph = graph
        self.saved: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}
        self.fresh: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in HOST_READS:
            raise RuntimeError(f"{name} reads a value back to the host inside a recorded block")
        for t in _written(func, args, kwargs):
            k = _key(t)
            if k not in self.saved and k not in self.fresh:
                storage = t.untyped_storage()
                self.saved[k] = (storage, storage.clone())
        inputs = {_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and _key(t) not in inputs:
                self.fresh.add(_key(t))
        self.graph.ops.append((func, args, kwargs, out))
        return out

    def restore(self) -> None:
        for storage, copy in self.saved.values():
            storage.copy_(copy)


class RecordedGraph:
    """The :class:`~torchglm.training.graphs.GraphBackend` of the CPU tests.

    Attributes:
        ops: the recorded ``(func, args, kwargs, out)`` calls.
        replays: how many times the graph was replayed.
    """

    def __init__(self) -> None:
        self.ops: list = []
        self.replays = 0

    @contextmanager
    def capture(self):
        recorder = _Recorder(self)
        try:
            with recorder:
                yield
        finally:
            recorder.restore()

    @torch.no_grad()
    def replay(self) -> None:
        for func, args, kwargs, out in self.ops:
            new = func(*args, **kwargs)
            for old, value in zip(tree_flatten(out)[0], tree_flatten(new)[0]):
                if isinstance(old, torch.Tensor) and _key(old) != _key(value):
                    old.copy_(value)
        self.replays += 1
