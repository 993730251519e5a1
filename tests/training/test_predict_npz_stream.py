"""``predict`` reads an NPZ input block by block from its zip members (compressed or
not), as it reads a CSV or a ``.npy``: the blocks equal the whole file read at once,
for every layout a model's columns can come in (an ``X`` matched by its ``x0, x1, ...``
names or by position, one array per column, an offset column), and no layout reads
the file whole except those refused or Fortran-ordered."""

import numpy as np
import pytest

from torchglm.data.out_of_core import npz_row_blocks
from torchglm.training.predict import iter_inputs, read_inputs

N = 1003


def _whole(path, features, offset=None):
    return read_inputs(path, features, offset)


def _streamed(path, features, offset=None, chunk_rows=100):
    blocks = list(iter_inputs(path, features, offset, chunk_rows=chunk_rows))
    assert [len(b[0]) for b in blocks] == [100] * 10 + [3]
    x = np.concatenate([b[0] for b in blocks])
    return x, None if offset is None else np.concatenate([b[1] for b in blocks])


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, 3)), rng.normal(size=N)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize(
    "layout, features, offset",
    [
        ("X", ["x0", "x1", "x2"], None),
        ("X", ["x2", "x0", "x1"], None),  # matched by name: the model's order
        ("X", ["a", "b", "c"], None),  # matched by position
        ("X", ["x0", "x1", "x2"], "exposure"),
        ("columns", ["b", "a", "c"], None),
        ("columns", ["a", "c", "b"], "exposure"),
    ],
)
def test_blocks_equal_the_whole_file(tmp_path, monkeypatch, data, save, layout, features, offset):
    x, o = data
    path = tmp_path / "rows.npz"
    arrays = {"X": x} if layout == "X" else dict(zip("abc", x.T))
    if offset:
        arrays[offset] = o
    save(path, **arrays, y=np.zeros(N))
    want_x, want_o = _whole(path, features, offset)
    # a streamed layout never loads the file whole
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load read the NPZ whole"))
    got_x, got_o = _streamed(path, features, offset)
    np.testing.assert_array_equal(got_x, want_x)
    if offset:
        np.testing.assert_array_equal(got_o, want_o)
        np.testing.assert_array_equal(got_o, o)
    assert got_x.dtype == np.float64


def test_fortran_order_is_read_whole_with_the_same_rows(tmp_path, data):
    x, _ = data
    path = tmp_path / "rows.npz"
    np.savez(path, X=np.asfortranarray(x))
    assert npz_row_blocks(path, {"X": (3,)}, 100) is None
    np.testing.assert_array_equal(_streamed(path, ["x0", "x1", "x2"])[0], x)


@pytest.mark.parametrize(
    "members",
    [{"X": (4,)}, {"missing": ()}, {"X": (3,), "short": ()}, {"names": ()}],
)
def test_other_layouts_are_left_to_the_whole_file_reader(tmp_path, data, members):
    x, _ = data
    path = tmp_path / "rows.npz"
    np.savez(path, X=x, short=np.zeros(N - 1), names=np.array(["a"] * N))
    assert npz_row_blocks(path, members, 100) is None
