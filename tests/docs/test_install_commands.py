"""The README's install and test commands are the ones the scripts and CI run, and
the scripts install torch as the README says: 2.13.0, the CPU build from PyTorch's
CPU index (a plain ``pip install torch==2.13.0`` from PyPI resolves the CUDA build
on Linux; the README claimed the pin avoided it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _bash_blocks(path: Path) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", path.read_text(), re.DOTALL | re.MULTILINE)


def _commands(block: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_the_readme_commands_are_the_scripts_and_ci_runs_the_readme_test_command():
    first = _commands(_bash_blocks(ROOT / "README.md")[0])
    assert first == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "bash scripts/quickstart.sh",
        "bash scripts/test.sh",
    ]
    # docs/training.md's set-up block: the same commands
    assert _commands(_bash_blocks(ROOT / "docs" / "training.md")[0]) == first
    ci = [c for c in _commands((ROOT / ".ci" / "run").read_text()) if not c.startswith(("set ", "cd "))]
    assert ci == ["bash scripts/test.sh"]
    for script in ("quickstart.sh", "test.sh"):
        assert (ROOT / "scripts" / script).is_file()


def test_the_scripts_install_the_cpu_build_of_the_pinned_torch_as_the_readme_says():
    for script in ("quickstart.sh", "test.sh"):
        lines = [c for c in _commands((ROOT / "scripts" / script).read_text()) if "pip install" in c]
        torch_line = next(c for c in lines if "torch" in c)
        assert '"torch==2.13.0"' in torch_line
        assert f'--index-url "${{TORCH_INDEX_URL:-{CPU_INDEX}}}"' in torch_line
        # torch comes first, so installing torchglm finds it satisfied
        assert lines.index(torch_line) == 0
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"pip install torch==2.13.0 --index-url {CPU_INDEX}" in readme
    assert "pip never resolves" not in readme
