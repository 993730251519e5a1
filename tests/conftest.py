import pytest
import torch


@pytest.fixture(autouse=True)
def _float64_by_default():
    """Tests compute in float64 (tight tolerances); a test wanting float32 says so."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)
