"""The Lightning data module under its former name: it lives in
:mod:`torchglm.training.data_module`, so that Lightning is imported only by the
training layer (this module re-exports it for ``torchglm.data.module.GLMDataModule``
in configs and code)."""

from ..training.data_module import GLMDataModule, shard

__all__ = ["GLMDataModule", "shard"]
