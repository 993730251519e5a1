"""The package's import graph has no cycles: every ``import`` and
``from ... import`` of a torchglm module, at module level or inside a function (a
lazy import hides a cycle from the interpreter, not from the design), read from
the source with :mod:`ast`."""

import ast
from pathlib import Path

import torchglm
from run_util import python_stdout

ROOT = Path(torchglm.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports for annotations only."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _import_nodes(tree: ast.Module, top_level: bool, annotations: bool = True):
    """Every import statement, or (``top_level``) those run at import time: outside
    function bodies (module level, class bodies, ``if``/``try`` blocks). Without
    ``annotations``, those under ``if TYPE_CHECKING:`` are left out (never run)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not annotations and _type_checking(node):
            stack.extend(node.orelse)
        elif not (top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
            stack.extend(ast.iter_child_nodes(node))


def import_graph(
    top_level: bool = False, external: bool = False, annotations: bool = True
) -> dict[str, set[str]]:
    """Module -> the torchglm modules it imports (a name imported from a package
    counts as its submodule when one of that name exists); ``external`` keeps the
    other packages' names too (``pytorch_lightning``, ``lightning.pytorch``);
    ``annotations=False`` leaves out ``if TYPE_CHECKING:`` imports."""
    mods = _modules()
    graph = {}
    for mod, path in mods.items():
        deps = set()
        for node in _import_nodes(ast.parse(path.read_text()), top_level, annotations):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = mod.split(".")
                    if path.name != "__init__.py":
                        parts.pop()
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:
                    deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[mod] = {d for d in deps if (external or d in mods) and d != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_walker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = import_graph()
    assert "torchglm.data.simulate" in graph["torchglm.data.datasets"]
    assert cycles(graph) == []


def _public_names():
    """``(module, name, object)`` for every class and function a torchglm module lists
    in ``__all__`` (importing every module: Lightning, matplotlib and Pyro included)."""
    import importlib
    import inspect
    import pkgutil

    for info in pkgutil.walk_packages(torchglm.__path__, "torchglm."):
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                yield info.name, name, obj


def test_one_public_path_per_name():
    """A public name is listed by the module that defines it, or by a package above
    that module (``torchglm.models.LogisticRegression`` from ``models/glm.py``); never by
    a module beside it or in another package (an alias: ``torchglm.solvers.base`` once
    re-exported the pass contract of ``torchglm.passes``). The package root
    ``torchglm`` lists the main classes of every layer and is the one exception."""
    aliases = [
        f"{mod}.{name} (defined in {obj.__module__})"
        for mod, name, obj in _public_names()
        if obj.__module__.startswith("torchglm.")
        and not (obj.__module__ == mod or obj.__module__.startswith(mod + "."))
    ]
    assert aliases == []


def test_retired_paths_are_gone():
    """The former paths of CHANGELOG.md's "Renamed / removed paths" import nothing."""
    import importlib

    import pytest

    for old in (
        "torchglm.solvers.base",
        "torchglm.data.module",
        "torchglm.bayes.callback",
        "torchglm.datasets",
        "torchglm.inference_callback",
        "torchglm.plot_callbacks",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    import torchglm.data

    assert not hasattr(torchglm.data, "GLMDataModule")


def _under(mod: str, package: str) -> bool:
    return mod == package or mod.startswith(package + ".")


def test_solvers_import_no_model_and_models_no_training():
    """The solvers are the floor below the models: they fit the duck type
    ``torchglm.passes.LinearModel`` and import no model (not even lazily), so the
    models import the solvers at module level; neither imports the training layer."""
    every = import_graph()
    for mod in every:
        if _under(mod, "torchglm.solvers"):
            assert not any(_under(d, "torchglm.models") for d in every[mod]), mod
        if _under(mod, "torchglm.solvers") or _under(mod, "torchglm.models"):
            assert not any(_under(d, "torchglm.training") for d in every[mod]), mod
    assert "torchglm.solvers" in every["torchglm.models.glm"]


def test_lightning_is_imported_only_under_training():
    graph = import_graph(external=True)
    lightning = {"pytorch_lightning", "lightning"}
    users = {mod for mod, deps in graph.items() if any(d.split(".")[0] in lightning for d in deps)}
    assert {m for m in users if not _under(m, "torchglm.training")} == set()
    assert {"torchglm.training.data_module", "torchglm.training.bayes_callback"} <= users


def test_the_bayesian_api_does_not_import_lightning():
    """``import torchglm.bayes`` (and ``import torchglm``) leave Lightning unloaded."""
    code = (
        "import sys, torchglm, torchglm.bayes; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytorch_lightning', 'lightning')))"
    )
    assert python_stdout(code) == "[]"


def test_import_torchglm_and_a_core_fit_leave_sklearn_unloaded():
    """scikit-learn loads only with what needs it (``torchglm.sklearn``): about half of
    ``import torchglm``'s time, which every worker of a ``GridSearchCV`` paid."""
    code = (
        "import sys, torch, torchglm\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x = torch.randn(50, 2, generator=g, dtype=torch.float64)\n"
        "torchglm.LogisticRegression(2, l2=0.1).fit(x, (x[:, 0] > 0).double())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))"
    )
    assert python_stdout(code) == "[]"


#: The layers, bottom up (README.md, "Architecture"): a module imports only from its
#: own layer and the layers below it. Prefixes name packages or modules; the longest
#: matching prefix places a module.
LAYERS = [
    ("validation", ["torchglm._validation"]),
    ("math", ["torchglm.links", "torchglm.families", "torchglm.penalty"]),
    ("passes", ["torchglm.passes", "torchglm.distributed", "torchglm.threads"]),
    ("data", ["torchglm.data", "torchglm.text"]),
    ("solvers", ["torchglm.solvers"]),
    ("models", ["torchglm.models", "torchglm.basis"]),
    ("inference", ["torchglm.inference", "torchglm.bayes"]),
    ("plotting", ["torchglm.plotting"]),
    ("sklearn", ["torchglm.sklearn"]),
    ("training", ["torchglm.training"]),
    ("entry points", ["torchglm", "torchglm.figures"]),
]

#: Imports that point up the layers, each for a stated reason.
UPWARD = {
    # ``torchglm figures`` dispatches from the CLI to the figures entry point.
    ("torchglm.training.entry", "torchglm.figures"),
}


def _layer(mod: str) -> int:
    best = max(
        ((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes if _under(mod, p)),
        default=None,
    )
    assert best is not None, f"{mod} is in no layer: add it to LAYERS and to README's Architecture"
    return best[1]


def test_layers_import_only_downward():
    graph = import_graph(annotations=False)
    upward = {(mod, dep) for mod, deps in graph.items() for dep in deps if _layer(dep) > _layer(mod)}
    assert upward <= UPWARD, sorted(upward - UPWARD)


def test_import_torchglm_and_a_core_fit_leave_scipy_stats_unloaded():
    """``scipy.stats`` loads on the first p-value or interval (:mod:`torchglm.inference`),
    not at ``import torchglm``, of whose time it was 40% (every ``GridSearchCV`` worker
    paid it); the first interval then works as before."""
    code = (
        "import sys, torch, torchglm\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x = torch.randn(80, 2, generator=g, dtype=torch.float64)\n"
        "y = (x[:, 0] + torch.randn(80, generator=g, dtype=torch.float64) > 0).double()\n"
        "m = torchglm.LogisticRegression(2)\n"
        "m.fit(x, y)\n"
        "before = 'scipy.stats' in sys.modules\n"
        "ci = torchglm.glm_results(m, x, y).confint()\n"
        "print(before, 'scipy.stats' in sys.modules, tuple(ci.shape))"
    )
    assert python_stdout(code) == "False True (3, 2)"
