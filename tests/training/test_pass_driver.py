"""The pass driver (``torchglm/training/pass_driver.py``) makes one fitter per fit: the
one that checks the solver and its options before anything is written begins the fit
(``Fitter.restart_from``) from the weights and device Lightning gives the model later."""

import json
from pathlib import Path

import pytest

from torchglm.solvers import SOLVERS
from torchglm.training.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")

pytestmark = pytest.mark.usefixtures("quiet_one_thread")


@pytest.mark.parametrize("solver", ["newton", "lbfgs"])
def test_one_fitter_per_fit_and_per_resumed_fit(tmp_path, monkeypatch, solver):
    """On e9b3fa9 a ``train.py`` fit made two (``build`` and ``configure_optimizers``),
    and so did a resumed one."""
    cls = SOLVERS[solver]
    made = []
    init = cls.__init__

    def counted(self, *args, **kwargs):
        made.append(type(self))
        init(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counted)
    run = tmp_path / "run"
    args = ["--config", TINY, "--run_dir", str(run), "--model.solver", solver]
    args += ["--model.model.init_args.l2", "0.01", "--early_stopping.patience", "100"]
    assert main([*args, "--trainer.max_epochs", "2"]) == 0
    assert made == [cls]
    first = json.loads((run / "metrics.json").read_text())["fit"]

    made.clear()
    assert main([*args, "--trainer.max_epochs", "4", "--resume", str(run / "checkpoints" / "last.ckpt")]) == 0
    assert made == [cls]
    resumed = json.loads((run / "metrics.json").read_text())["fit"]
    assert resumed["n_iter"] > first["n_iter"]  # the resumed run fitted on
