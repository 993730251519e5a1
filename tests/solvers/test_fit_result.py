"""FitResult.extra is typed (FitExtra) and still reads like the dict it replaces."""

import dataclasses

import pytest
import torch

from torchglm import LogisticRegression
from torchglm.models import GeneralizedLinearModel
from torchglm.passes import FitExtra, FitResult
from torchglm.solvers import DIRECT_SOLVERS, SOLVERS, fit


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


def _inference_tensors(value, where="result") -> list[str]:
    """Where in ``value`` (dicts, lists, dataclasses) an inference tensor sits."""
    if isinstance(value, torch.Tensor):
        return [where] if value.is_inference() else []
    if dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in _inference_tensors(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [w for i, v in enumerate(value) for w in _inference_tensors(v, f"{where}[{i}]")]
    return []


@pytest.mark.parametrize("solver", sorted(SOLVERS) + sorted(DIRECT_SOLVERS) + ["auto"])
@pytest.mark.parametrize("case", ["penalized", "separated", "float32"])
def test_passes_run_in_inference_mode_and_leave_ordinary_tensors(monkeypatch, solver, case):
    """:func:`torchglm.solvers.fit` runs its passes in inference mode (each small-fit
    operation skips autograd's bookkeeping), and what it returns is ordinary: the
    result's gradient, Hessian and separation record, and the model's parameters,
    which autograd then differentiates and in-place updates accept."""
    import warnings

    from run_util import record_each_stage

    modes = record_each_stage(monkeypatch, torch.is_inference_mode_enabled)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 3, generator=g, dtype=torch.float64)
    y = (x[:, 0] + 0.5 * torch.randn(120, generator=g, dtype=torch.float64) > 0).double()
    l2, dtype = 1e-2, None
    if case == "separated":
        y, l2 = (x[:, 0] > 0).double(), 0.0
    if case == "float32":
        if solver in SOLVERS and SOLVERS[solver].linear_rate:
            pytest.skip("a linear-rate solver crawls to float32's resolution")
        dtype = torch.float32
    if solver in DIRECT_SOLVERS:
        model = GeneralizedLinearModel(3, "gaussian", l2=l2, dtype=torch.float64)
        y = x[:, 0] + 0.1 * torch.randn(120, generator=g, dtype=torch.float64)
    else:
        model = LogisticRegression(3, l2=l2, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(model, x, y, solver=solver, dtype=dtype)
    assert modes and all(modes)
    assert _inference_tensors(result) == []
    assert not any(p.is_inference() for p in model.parameters())
    model.objective(x, y).backward()  # autograd through the fitted parameters
    assert all(p.grad is not None for p in model.parameters())
    for t in (result.extra.grad, result.extra.hessian):
        if t is not None:
            t.mul_(1.0)  # in place, outside inference mode
