"""The global random state around a Pyro run."""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

__all__ = ["global_rng_restored"]


@contextmanager
def global_rng_restored() -> Iterator[None]:
    """Restore torch's, NumPy's and ``random``'s global states on exit:
    ``pyro.set_rng_seed`` reseeds all three, and a sampler must not change the
    caller's random streams."""
    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
