"""Every argument that names a file to read (a checkpoint, predict's input, a data file,
an out-of-core array) refuses what is not a regular file with one line that says
what it is: a missing path, a directory, or a device such as ``/dev/zero`` (whose
reading would never end)."""

from pathlib import Path

import pytest

from torchglm._validation import InputError, existing_file
from torchglm.data.files import read_table
from torchglm.data.out_of_core import NpyBatches
from torchglm.training.checkpoints import load_checkpoint
from torchglm.training.cli import main
from run_util import one_error

DEVICE = Path("/dev/zero")
pytestmark = pytest.mark.skipif(not DEVICE.exists(), reason="needs /dev/zero")


@pytest.mark.parametrize(
    "path, got",
    [(DEVICE, "(a device, FIFO or socket)"), (Path("/"), "(a directory)"), (Path("/no/such"), "(not found)")],
)
def test_existing_file_says_what_the_path_is(path, got):
    with pytest.raises(InputError) as err:
        existing_file("x", path)
    assert str(err.value).startswith("x: expected ") and str(err.value).endswith(f"file, got '{path}' {got}")


def test_every_reader_refuses_a_device():
    for read in (load_checkpoint, read_table, lambda p: NpyBatches(p, p)):
        with pytest.raises(InputError, match="a device, FIFO or socket"):
            read(DEVICE)


def test_predict_ckpt_path_dev_zero_is_one_line(tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text("x0\n1.0\n")
    code = main(
        ["predict", "--ckpt_path", str(DEVICE), "--input", str(rows), "--output", str(tmp_path / "p.csv")]
    )
    one_error(capsys, code, "ckpt_path: expected a regular checkpoint file, got '/dev/zero'")
    assert not (tmp_path / "p.csv").exists()
