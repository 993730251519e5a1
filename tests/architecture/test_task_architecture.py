"""The shape of the Lightning task (``torchglm/training/``): the solver name picks a
driver in one place, and every private Lightning attribute is used in one file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from torchglm import LogisticRegression
from torchglm.training.pass_driver import PassDriver
from torchglm.training.sgd_driver import SGDDriver
from torchglm.training.task import GLMTask, driver_for

TORCHGLM = Path(__file__).resolve().parents[2] / "torchglm"
TRAINING = TORCHGLM / "training"
PRIVATE_HOME = "_lightning_private.py"


def _trees(folder: Path):
    return [(f, ast.parse(f.read_text())) for f in sorted(folder.rglob("*.py"))]


def _own_names() -> set[str]:
    """Names torchglm defines: functions, classes, variables and ``self.<name>`` attributes."""
    own = set()
    for _, tree in _trees(TORCHGLM):
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                own.add(n.id)
            elif (
                isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name)
                and n.value.id in ("self", "cls")
            ):
                own.add(n.attr)
    return own


def _attribute_names(tree: ast.AST):
    """``(line, name)`` of every attribute the code reads or writes: ``x.name``, and
    names given as strings to ``getattr``/``setattr``/``hasattr``/``delattr`` or
    compared with ``name`` (the ``__setattr__`` idiom)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            yield n.lineno, n.attr
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            if n.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(n.args) >= 2:
                if isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
                    yield n.lineno, n.args[1].value
        elif isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and n.left.id == "name":
            for c in n.comparators:
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    yield n.lineno, c.value


def test_private_lightning_attributes_are_used_in_one_file():
    """A ``_name`` attribute that torchglm does not define itself is another library's
    private attribute: Lightning's. Only ``_lightning_private.py`` may touch one, so a
    Lightning upgrade has one file to check."""
    own = _own_names()
    found = [
        f"{path.name}:{line} {name}"
        for path, tree in _trees(TRAINING)
        if path.name != PRIVATE_HOME
        for line, name in _attribute_names(tree)
        if name.startswith("_") and not name.startswith("__") and name not in own
    ]
    assert not found


def test_the_solver_name_is_compared_to_a_name_nowhere_in_training():
    """``solver == "sgd"``-style branches: the driver registry (``DRIVERS``) is the one
    place a solver name decides how a fit runs."""
    found = []
    for path, tree in _trees(TRAINING):
        for n in ast.walk(tree):
            if not isinstance(n, ast.Compare):
                continue
            operands = [n.left, *n.comparators]
            names_solver = any(
                (isinstance(o, ast.Attribute) and o.attr == "solver")
                or (isinstance(o, ast.Name) and o.id == "solver")
                for o in operands
            )
            literal = any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands)
            if names_solver and literal:
                found.append(f"{path.name}:{n.lineno}")
    assert not found


@pytest.mark.parametrize(
    "solver, driver",
    [("sgd", SGDDriver), ("newton", PassDriver), ("lbfgs", PassDriver), ("closed_form", PassDriver)],
)
def test_the_task_takes_the_driver_of_its_solver(solver, driver):
    assert driver_for(solver) is driver
    task = GLMTask(LogisticRegression, solver=solver)
    assert type(task.driver) is driver and task.driver.task is task
    assert task.fitter is None  # made by build() (pass-based), never for sgd
