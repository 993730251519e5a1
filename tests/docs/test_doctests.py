"""Docstring examples run as doctests: every ``>>>`` line under ``torchglm/`` is executed.

Every module of the package is imported and each docstring with examples is one test,
named by its object (``test_docstring_examples[torchglm.basis.Polynomial]``). A
docstring's examples run in order, in their own namespace: the module's globals (what
:mod:`doctest` gives by default) over :data:`SHARED`, which holds ``torch``, ``np``
(NumPy), ``torchglm`` and the package's public names (``LogisticRegression``,
``GeneralizedLinearModel``, ... as ``from torchglm import *`` gives them). Examples
define the data they use (``>>> x = torch.randn(100, 2); y = ...``), so they read the
same in ``help()`` as here.

They run under torch's own defaults (float32, not this suite's float64: what a reader
gets), with the torch and NumPy generators seeded and one intra-op thread, in a
temporary working directory, so a run is deterministic and takes a few seconds. Output
is compared with ``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``; floats are shown rounded or
as comparisons. The few examples that need a training run or a file on disk say
``# doctest: +SKIP``; their docstrings are listed in :data:`SKIPS` with the reason, and a
SKIP anywhere else fails. Run them alone with ``python -m pytest -q tests/docs/test_doctests.py``
(one docstring: ``-k read_table``).
"""

import doctest
import importlib
import io
import pkgutil
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import torchglm

PACKAGE = Path(torchglm.__file__).resolve().parent
ROOT = PACKAGE.parent
PROMPT = re.compile(r"^\s*>>>", re.MULTILINE)
#: Output comparison (``...`` elides, runs of whitespace match); a failure reports its first
#: failing example only (the later ones of a docstring usually fail because of it).
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.REPORT_ONLY_FIRST_FAILURE

#: The names every example may use without importing them.
SHARED = {
    "torch": torch,
    "np": np,
    "torchglm": torchglm,
    **{name: getattr(torchglm, name) for name in torchglm.__all__},
}

#: The docstrings whose examples include ``# doctest: +SKIP``, and why those cannot run here.
SKIPS = {
    "torchglm.data.files.read_table": "reads the reader's own CSV file from disk",
    "torchglm.training.task.GLMTask": "a 20-epoch Lightning Trainer fit (writes lightning_logs/)",
}


def _modules():
    names = ["torchglm"] + [m.name for m in pkgutil.walk_packages([str(PACKAGE)], prefix="torchglm.")]
    return [importlib.import_module(name) for name in sorted(names)]


def _docstring_tests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for module in _modules():
        for test in finder.find(module, module.__name__, globs={}):
            if test.examples:
                tests.append((module, test))
    return sorted(tests, key=lambda mt: (mt[1].filename or "", mt[1].lineno or 0, mt[1].name))


TESTS = _docstring_tests()


@pytest.fixture
def reader_defaults(tmp_path, monkeypatch):
    """torch's own defaults (float32), seeded generators, one thread, a scratch cwd; the
    suite's dtype, threads and generator states are restored afterwards."""
    monkeypatch.chdir(tmp_path)
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)
    torch.set_rng_state(torch_state)
    np.random.set_state(np_state)


@pytest.mark.usefixtures("reader_defaults")
@pytest.mark.parametrize("module, test", TESTS, ids=[t.name for _, t in TESTS])
def test_docstring_examples(module, test):
    test.globs = {**SHARED, **vars(module)}
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = io.StringIO()
    try:
        result = runner.run(test, out=out.write, clear_globs=True)
    finally:
        test.globs = {}
    assert result.failed == 0, f"{test.name} ({test.filename}:{test.lineno}):\n{out.getvalue()}"


def test_every_example_is_collected():
    """Each file's ``>>>`` lines are all in some collected docstring: a docstring the
    finder misses (an object defined elsewhere, a module that fails to import) fails here
    instead of silently never running."""
    found: dict[str, int] = {}
    for _, test in TESTS:
        path = Path(test.filename).resolve().relative_to(ROOT).as_posix()
        found[path] = found.get(path, 0) + len(test.examples)
    written = {
        path.relative_to(ROOT).as_posix(): len(PROMPT.findall(path.read_text()))
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    written = {path: n for path, n in written.items() if n}
    assert found == written
    assert sum(written.values()) >= 80


def test_skips_are_listed():
    skipping = {test.name for _, test in TESTS if any(e.options.get(doctest.SKIP) for e in test.examples)}
    assert skipping == set(SKIPS)
