"""Every ```python block in README.md and docs/*.md runs.

The blocks of one file run in order in one namespace (a later block may use an
earlier one's names), in a temporary working directory (blocks write files such as
``summary.json``), with a non-interactive matplotlib backend. Blocks define the data
they need. The only blocks not run are listed in ``NOT_RUN`` with the reason; the
test fails if such a block disappears or changes, so the list cannot go stale.
"""

import hashlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

#: (file, block index) -> (sha1 prefix of the block, why it is not run)
NOT_RUN = {
    ("docs/training.md", 0): (
        "e21beef1",
        (
            "a sketch of the Lightning workflow: 60 epochs of a Trainer, then `raw_x` and a "
            "checkpoint `path` from that run (train-related text, owned with train.py)"
        ),
    ),
    ("docs/training.md", 1): (
        "b9d5ae22",
        "registers the reader's own loader `my_loader` (train-related text, owned with train.py)",
    ),
}


def _blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text())


def _digest(code: str) -> str:
    return hashlib.sha1(code.encode()).hexdigest()[:8]


def test_there_are_blocks_to_run():
    assert sum(len(_blocks(p)) for p in FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    rel = path.relative_to(ROOT).as_posix()
    namespace = {"__name__": "__docs__"}
    for i, code in enumerate(_blocks(path)):
        skip = NOT_RUN.get((rel, i))
        if skip is not None:
            assert _digest(code) == skip[0], f"{rel} block {i} changed: review NOT_RUN ({skip[1]})"
            continue
        exec(compile(code, f"{rel}[block {i}]", "exec"), namespace)  # noqa: S102 - running the docs is the test


def test_not_run_list_points_at_existing_blocks():
    for rel, i in NOT_RUN:
        assert i < len(_blocks(ROOT / rel)), f"{rel} has no block {i}"
