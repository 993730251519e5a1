"""Helpers of the tests that run ``train.py``: its one ``error:`` line and the files a
run directory holds (the rule: a failure leaves the directory as it was)."""

import hashlib
from pathlib import Path


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` (dot files included) with a hash of its bytes."""
    if not path.exists():
        return {}
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def one_error(capsys, code: int, contains: str = "") -> str:
    """The command exited 2 with one ``error: ...`` line on stderr (containing ``contains``)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and contains in err[0], err
    return err[0]
