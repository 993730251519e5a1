"""Out-of-core batch sources and process sharding."""

import numpy as np
import pandas as pd
import pytest
import torch

from torchglm import InputError
from torchglm.data.out_of_core import CSVBatches, NpyBatches, ParquetBatches
from torchglm.distributed import check_shards, shard_range

from dist_util import run_distributed


@pytest.mark.parametrize("n", [0, 1, 7, 100])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_shard_ranges_partition_rows(n, world):
    ranges = [shard_range(n, r, world) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [b - a for a, b in ranges]
    assert max(sizes) - min(sizes) <= 1


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1003, 4))
    y = (rng.random(1003) < 0.4).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(4)]).assign(label=y)
    df.to_csv(tmp_path / "d.csv", index=False)
    df.to_parquet(tmp_path / "d.parquet")
    return tmp_path, x, y


def _sources(path, **kw):
    return {
        "npy": NpyBatches(path / "x.npy", path / "y.npy", batch_size=100, **kw),
        "csv": CSVBatches(path / "d.csv", "label", batch_size=100, **kw),
        "parquet": ParquetBatches(path / "d.parquet", "label", batch_size=100, **kw),
    }


@pytest.mark.parametrize("kind", ["npy", "csv", "parquet"])
def test_chunked_sources_equal_in_memory(table, kind):
    path, x, y = table
    src = _sources(path)[kind]
    for _ in range(2):  # re-iterable: every pass re-reads the file
        batches = list(src)
        assert max(len(b.x) for b in batches) <= 100
        assert torch.equal(torch.cat([b.x for b in batches]), torch.from_numpy(x))
        assert torch.equal(torch.cat([b.y for b in batches]), torch.from_numpy(y))


def _read_shard(rank, world, path, kind):
    src = _sources(path)[kind]
    return torch.cat([b.x for b in src]), torch.cat([b.y for b in src])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["npy", "parquet"])
def test_each_process_reads_only_its_shard(table, kind):
    path, x, y = table
    out = run_distributed(_read_shard, 2, (path, kind))
    assert all(o["ok"] for o in out), out
    parts = [o["result"] for o in out]
    assert len(parts[0][0]) in (501, 502) and len(parts[0][0]) + len(parts[1][0]) == 1003
    assert torch.equal(torch.cat([p[0] for p in parts]), torch.from_numpy(x))


def _mismatched(rank, world):
    check_shards(4 if rank == 0 else 5, torch.float64)


def _mismatched_dtype(rank, world):
    check_shards(4, torch.float64 if rank == 0 else torch.float32)


@pytest.mark.slow
@pytest.mark.parametrize("fn", [_mismatched, _mismatched_dtype])
def test_mismatched_shard_is_an_error_on_every_process(fn):
    out = run_distributed(fn, 2)
    assert [o["ok"] for o in out] == [False, False]
    assert all("data shards: expected the same feature count and dtype" in o["error"] for o in out)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(InputError, match="x_path: expected an existing file"):
        NpyBatches(tmp_path / "nope.npy", tmp_path / "y.npy")
    np.save(tmp_path / "x.npy", np.zeros(5))
    np.save(tmp_path / "y.npy", np.zeros(5))
    with pytest.raises(InputError, match="x_path: expected a 2-D array"):
        NpyBatches(tmp_path / "x.npy", tmp_path / "y.npy")


def test_not_an_npy_file(tmp_path):
    (tmp_path / "x.npy").write_text("a,b\n1,2\n")
    np.save(tmp_path / "y.npy", np.zeros(1))
    with pytest.raises(InputError, match="x_path: expected a .npy file"):
        NpyBatches(tmp_path / "x.npy", tmp_path / "y.npy")


def test_csv_batches_read_by_the_one_csv_reader(tmp_path):
    """CSVBatches follows train.py's reader: a byte-order mark, blank lines (not rows:
    the shards partition the data rows), and a bad cell named by line and column."""
    from torchglm.data.files import read_table

    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfa,b,y\n1,2,0\n\n3,4,1\n5,6,0\n\n\n")
    src = CSVBatches(path, "y", batch_size=2, shard=False)
    table = read_table(path, target="y")
    assert src.n_rows == 3
    assert torch.equal(torch.cat([b.x for b in src]), torch.from_numpy(table.x))
    assert torch.equal(torch.cat([b.y for b in src]), torch.from_numpy(table.y).long())
    path.write_text("a,b,y\n1,2,0\n3,oops,1\n")
    with pytest.raises(
        InputError, match=r"^path '.*bom.csv' line 3 column 'b': expected numeric values, got 'oops'$"
    ):
        CSVBatches(path, "y", batch_size=2, shard=False)


def test_streamed_rows_read_spans_into_reused_buffers(tmp_path):
    """Every span of a pass is read into the same buffers (no span-sized allocation
    per read), the rows picked and standardized as ``(x - mean) / scale`` in float64;
    a file shorter than its header says is one InputError."""
    from torchglm.data.out_of_core import _SPAN, StreamedRows, _NpyFile, _Spans

    rng = np.random.default_rng(0)
    xy = rng.normal(size=(2 * _SPAN + 7, 4))
    path = tmp_path / "xy.npy"
    np.save(path, xy)
    rows = np.flatnonzero(rng.random(len(xy)) < 0.4).astype(np.int32)
    mean, scale = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([2.0, 0.5, 3.0])
    split = StreamedRows(path, rows, [0, 2, 3], mean, scale, torch.float32)
    expected = ((torch.from_numpy(xy[rows][:, [0, 2, 3]]) - mean) / scale).to(torch.float32)
    spans = _Spans(split.file, 3)
    buffers = (spans.raw.ctypes.data, spans.picked.ctypes.data, spans.work.data_ptr())
    with open(path, "rb") as f:
        got = torch.cat(
            [split.read(f, i, min(i + 1000, len(rows)), spans) for i in range(0, len(rows), 1000)]
        )
    assert torch.equal(got, expected)
    assert (spans.raw.ctypes.data, spans.picked.ctypes.data, spans.work.data_ptr()) == buffers
    assert torch.equal(torch.cat(list(split.blocks(333))), expected)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 8)
    with open(path, "rb") as f, pytest.raises(InputError, match="cut short"):
        _NpyFile(path, "source").rows_into(f, len(xy) - 3, len(xy), spans.raw)
