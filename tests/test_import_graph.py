"""The package's import graph has no cycles (issue 12): every ``import`` and
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


def import_graph() -> dict[str, set[str]]:
    """Module -> the torchglm modules it imports (a name imported from a package
    counts as its submodule when one of that name exists)."""
    mods = _modules()
    graph = {}
    for mod, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
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
        graph[mod] = {d for d in deps if d in mods and d != mod}
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
