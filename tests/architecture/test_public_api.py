"""The public API: every name a module lists in ``__all__`` exists, for
``torchglm`` and each of its submodules, and the names the README and docs use are
reachable where they say (a refactor that moves a name must keep the old path)."""

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import torchglm

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(m.name for m in pkgutil.walk_packages(torchglm.__path__, "torchglm."))


def test_every_name_in_torchglm_all_imports():
    missing = [name for name in torchglm.__all__ if not hasattr(torchglm, name)]
    assert not missing
    ns = {}
    exec("from torchglm import *", ns)
    assert set(torchglm.__all__) <= set(ns)


@pytest.mark.parametrize("module", MODULES)
def test_every_submodule_imports_and_exports_what_it_lists(module):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        pytest.skip(f"{module} has no __all__ (private helpers)")
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ lists missing names {missing}"


def _documented_paths():
    """``torchglm.a.b.Name`` references in README.md and docs/*.md."""
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for ref in re.findall(r"`(torchglm(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", path.read_text()):
            found.add(ref)
    return sorted(found)


@pytest.mark.parametrize("ref", _documented_paths())
def test_every_documented_dotted_path_resolves(ref):
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            assert hasattr(obj, attr), f"{ref}: {'.'.join(parts[:i])} has no {attr}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{ref}: no importable prefix")
