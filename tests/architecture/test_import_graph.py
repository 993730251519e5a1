"""The package's import graph has no cycles: every ``import`` and
``from ... import`` of a torchglm module, at module level or inside a function (a
lazy import hides a cycle from the interpreter, not from the design), read from
the source with :mod:`ast`."""

import ast
from pathlib import Path

import torchglm

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


def test_datasets_public_paths_kept():
    from torchglm.data import Dataset
    from torchglm.data.datasets import DATASETS, Dataset as Registered
    from torchglm.data.movie_reviews import movie_review_counts
    from torchglm.datasets import MOVIE_REVIEW_CLASSES, load_movie_reviews, movie_review_counts as shim

    assert Registered is Dataset and shim is movie_review_counts
    assert MOVIE_REVIEW_CLASSES == ("rotten", "fresh")
    assert callable(load_movie_reviews) and "movie_reviews" in DATASETS and "glm_poisson" in DATASETS


def _under(mod: str, package: str) -> bool:
    return mod == package or mod.startswith(package + ".")


def test_models_import_neither_solvers_nor_training_at_import_time():
    """The pass contract is on the ground floor (torchglm.passes); models reach the
    solvers only inside ``GLM.fit``/``make_fitter``, and never the training layer."""
    top = import_graph(top_level=True)
    every = import_graph()
    for mod in top:
        if _under(mod, "torchglm.models"):
            assert not any(
                _under(d, "torchglm.solvers") or _under(d, "torchglm.training") for d in top[mod]
            ), mod
            assert not any(_under(d, "torchglm.training") for d in every[mod]), mod


def test_lightning_is_imported_only_under_training():
    graph = import_graph(external=True)
    lightning = {"pytorch_lightning", "lightning"}
    users = {mod for mod, deps in graph.items() if any(d.split(".")[0] in lightning for d in deps)}
    assert {m for m in users if not _under(m, "torchglm.training")} == set()
    assert {"torchglm.training.data_module", "torchglm.training.bayes_callback"} <= users


def test_the_bayesian_api_does_not_import_lightning():
    """``import torchglm.bayes`` (and ``import torchglm``) leave Lightning unloaded; the
    callback's former path still names the moved class."""
    import subprocess
    import sys

    code = (
        "import sys, torchglm, torchglm.bayes; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytorch_lightning', 'lightning')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from torchglm.bayes.callback import BayesianEvaluation as former
    from torchglm.training.bayes_callback import BayesianEvaluation

    assert former is BayesianEvaluation


#: The layers, bottom up (README.md, "Architecture"): a module imports only from its
#: own layer and the layers below it. Prefixes name packages or modules; the longest
#: matching prefix places a module.
LAYERS = [
    ("validation", ["torchglm._validation"]),
    ("math", ["torchglm.links", "torchglm.families", "torchglm.penalty"]),
    ("passes", ["torchglm.passes", "torchglm.distributed"]),
    ("data", ["torchglm.data", "torchglm.datasets", "torchglm.text"]),
    ("models", ["torchglm.models", "torchglm.basis"]),
    ("solvers", ["torchglm.solvers"]),
    ("inference", ["torchglm.inference", "torchglm.bayes"]),
    ("plotting", ["torchglm.plotting"]),
    ("sklearn", ["torchglm.sklearn"]),
    ("training", ["torchglm.training"]),
    (
        "entry points",
        ["torchglm", "torchglm.figures", "torchglm.inference_callback", "torchglm.plot_callbacks"],
    ),
]

#: Imports that point up the layers, each for a stated reason.
UPWARD = {
    # ``GLM.fit``/``make_fitter`` reach the solvers inside the method body (never at import
    # time: test_models_import_neither_solvers_nor_training_at_import_time).
    ("torchglm.models.glm", "torchglm.solvers"),
    # Former names kept for configs and saved runs: re-exports of moved Lightning classes.
    ("torchglm.data", "torchglm.training.data_module"),  # lazy, in __getattr__
    ("torchglm.data.module", "torchglm.training.data_module"),
    ("torchglm.bayes.callback", "torchglm.training.bayes_callback"),
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
