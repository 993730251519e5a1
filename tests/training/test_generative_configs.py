"""The generative configs under train.py: one closed-form pass, then the same
metrics as the discriminative models; the fitted model equals a direct fit on
the training split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torchglm.data import datasets as builtin
from torchglm.data.movie_reviews import load_movie_reviews, movie_review_counts
from torchglm.training.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [
    "gda",
    "gda_quadratic",
    "naive_bayes_gaussian",
    "naive_bayes_multinomial",
    "naive_bayes_bernoulli",
    "naive_bayes_poisson",
]


pytestmark = pytest.mark.usefixtures("quiet_one_thread")


def _run(name, tmp_path, *extra):
    run_dir = tmp_path / name
    status = main(
        [
            "--config",
            str(ROOT / "configs" / f"{name}.yaml"),
            "--run_dir",
            str(run_dir),
            "--trainer.enable_progress_bar",
            "false",
            *extra,
        ]
    )
    assert status == 0
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.parametrize("name", CONFIGS[:1] + [pytest.param(c, marks=pytest.mark.slow) for c in CONFIGS[1:]])
def test_config_fits_in_one_closed_form_pass(name, tmp_path):
    metrics = _run(name, tmp_path)
    assert metrics["fit"]["solver"] == "closed_form" and metrics["fit"]["converged"]
    assert metrics["fit"]["n_iter"] == 1
    for split in ("train", "val", "test"):
        assert 0.8 < metrics[split]["accuracy"] <= 1.0
        assert metrics[split]["nll"] > 0


def test_gda_config_equals_a_direct_fit(tmp_path):
    """The trainer's model is the closed-form MLE on the (standardized) training split."""
    from torchglm.training import GLMDataModule
    from torchglm.models import LinearDiscriminantAnalysis

    metrics = _run("gda", tmp_path)
    dm = GLMDataModule("wine", val_fraction=0.2, test_fraction=0.2, split_seed=0, batch_size=64)
    dm.setup("fit")
    x, y = dm.split("train")
    model = LinearDiscriminantAnalysis(13, 3)
    model.fit(x, y)
    xt, yt = dm.split("test")
    p = model.predict_proba(xt)
    accuracy = float((p.argmax(1) == yt).double().mean())
    nll = float(torch.nn.functional.nll_loss(p.log(), yt))
    # torchmetrics reports float32 values.
    assert metrics["test"]["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert metrics["test"]["nll"] == pytest.approx(nll, rel=1e-6)


def test_movie_reviews_corpus_is_the_shipped_file():
    texts, y = load_movie_reviews()
    assert len(texts) == 4866 and int(y.sum()) == 2455  # 2455 fresh, 2411 rotten
    texts3, y3 = load_movie_reviews(include_plots=True)
    assert len(texts3) == 5022 and int((y3 == 2).sum()) == 156
    ds = movie_review_counts(min_count=50)
    assert ds.x.shape[0] == 4866 and ds.x.shape[1] == len(ds.feature_names)
    assert (ds.x >= 0).all() and (ds.x == ds.x.round()).all()


@pytest.mark.slow
def test_spam_config_runs_with_the_shipped_corpus(tmp_path, monkeypatch):
    monkeypatch.setitem(builtin.DATASETS, "movie_reviews", movie_review_counts)
    metrics = _run("spam_naive_bayes", tmp_path)
    assert metrics["fit"]["solver"] == "closed_form"
    assert 0.65 < metrics["test"]["accuracy"] < 0.85
