"""The devices the device-parametrized tests run on: the CPU, and CUDA where present
(skipped otherwise)."""

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]
