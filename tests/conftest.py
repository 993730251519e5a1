import warnings

import pytest
import torch


@pytest.fixture(autouse=True)
def _float64_by_default():
    """Tests compute in float64 (tight tolerances); a test wanting float32 says so."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture
def one_thread():
    """One intra-op thread: on a shared, loaded 2-core CPU an OpenMP barrier per tiny op
    costs milliseconds (``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def quiet_one_thread():
    """One intra-op thread and no Lightning chatter, for tests that run a Trainer: on a
    shared 2-core CPU an OpenMP barrier per tiny op costs milliseconds."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="pytorch_lightning")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*")
        yield
    torch.set_num_threads(n)


@pytest.fixture
def quiet_sparse_beta():
    """torch's sparse CSR support warns that it is in beta on every first use; tests of
    sparse designs silence it (``pytestmark = pytest.mark.usefixtures("quiet_sparse_beta")``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        yield
