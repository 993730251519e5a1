"""FitResult.extra is typed (FitExtra) and still reads like the dict it replaces."""

import dataclasses

import torch

from torchglm import LogisticRegression
from torchglm.passes import FitExtra, FitResult


def test_known_entries_are_fields_and_the_rest_goes_to_other():
    r = FitResult("newton", extra={"n_samples": 3.0})
    assert isinstance(r.extra, FitExtra) and r.extra["n_samples"] == 3.0
    r.extra.update(loss=1.5, hessian=None, passes=2)
    r.extra.setdefault("cg_iterations", []).append(4)
    assert r.extra.loss == 1.5 and r.extra["passes"] == 2 and r.extra.cg_iterations == [4]
    assert "hessian" not in r.extra and r.extra.get("hessian") is None and "separation" not in r.extra
    assert r.extra.get("absent", 7) == 7 and sorted(r.extra) == [
        "cg_iterations",
        "loss",
        "n_samples",
        "passes",
    ]


def test_checkpoint_round_trip_through_plain_dicts():
    r = FitResult("newton", converged=True, extra={"n_samples": 3.0})
    r.extra["hessian"] = torch.eye(2)
    state = dataclasses.asdict(r)
    assert type(state["extra"]) is dict and state["extra"]["other"] == {"n_samples": 3.0}
    back = FitResult(**state)
    assert back.extra["n_samples"] == 3.0 and torch.equal(back.extra.hessian, torch.eye(2))
    legacy = FitResult(**{**state, "extra": {"loss": 0.5, "n_samples": 1.0}})  # an older checkpoint
    assert legacy.extra.loss == 0.5 and legacy.extra["n_samples"] == 1.0


def test_a_fit_reports_typed_entries():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100, 3, generator=g, dtype=torch.float64)
    y = (x[:, 0] + torch.randn(100, generator=g, dtype=torch.float64) > 0).long()
    r = LogisticRegression(3, dtype=torch.float64).fit(x, y, solver="newton")
    assert isinstance(r.extra, FitExtra)
    assert r.extra.hessian.shape == (4, 4) and r.extra.passes > 0 and r.extra.solver_choice == "user"
    assert r.extra.loss == r.extra["loss"]


def test_the_library_reads_fit_extra_by_attribute():
    """Inside torchglm a FitExtra is read and written by its typed fields
    (``extra.hessian``), never by string key: a misspelt key would be a silent ``None``
    (``extra.get("hesian")``) where a misspelt attribute is an AttributeError. The dict
    interface stays for user code and old checkpoints (the tests above)."""
    import pathlib
    import re

    import torchglm

    by_key = re.compile(r"""\.extra(\[["']|\.get\(|\.setdefault\()|["']\w+["'] in [\w.]*\bextra\b""")
    root = pathlib.Path(torchglm.__file__).parent
    found = [
        f"{path.relative_to(root)}:{i}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "passes.py"  # FitExtra itself, whose docstring shows the dict interface
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if by_key.search(line)
    ]
    assert not found, "\n".join(found)
