"""FigureLogger under a Lightning Trainer: PNGs in the run dir, images in TensorBoard,
and usable from a train.py config."""

from functools import partial
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from torchglm import InputError, LogisticRegression
from torchglm.basis import GaussianRBF
from torchglm.training import GLMDataModule
from torchglm.models import LinearDiscriminantAnalysis
from torchglm.training.plot_callbacks import FigureLogger
from torchglm.training.cli import main as train_main
from torchglm.training.task import GLMTask

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "figures"


def _has_content(path) -> bool:
    img = mpimg.imread(path)
    return img.ndim == 3 and np.unique(img[..., :3].reshape(-1, 3), axis=0).shape[0] > 10


def _trainer(tmp_path, callback, max_epochs):
    return pl.Trainer(
        max_epochs=max_epochs,
        logger=TensorBoardLogger(str(tmp_path), name="", version=""),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )


def _image_tags(run_dir) -> set[str]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return set(acc.Tags()["images"])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_generative_model_gets_densities_regions_and_calibration(tmp_path):
    dm = GLMDataModule("gaussians2", batch_size=None, dataset_options={"n_samples": 200})
    task = GLMTask(partial(LinearDiscriminantAnalysis, n_classes=2), solver="closed_form")
    callback = FigureLogger(resolution=40)
    trainer = _trainer(tmp_path, callback, max_epochs=1)
    trainer.fit(task, datamodule=dm)
    trainer.test(task, datamodule=dm, verbose=False)
    names = {Path(p).name for p in callback.saved}
    expected = {
        f"{stage}_{name}.png"
        for stage in ("fit", "test")
        for name in ("decision_regions", "class_densities", "reliability")
    }
    assert names == expected
    for p in callback.saved:
        assert Path(p).parent == tmp_path / "figures" and _has_content(p)
    assert _image_tags(tmp_path) == {n.removesuffix(".png").replace("_", "/", 1) for n in expected}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_basis_model_under_sgd_gets_regions_and_loss_curve(tmp_path):
    dm = GLMDataModule("moons", batch_size=64, dataset_options={"n_samples": 200})
    task = GLMTask(
        partial(LogisticRegression, l2=1e-3),
        solver="sgd",
        optimizer=partial(torch.optim.Adam, lr=0.1),
        basis=GaussianRBF(8, seed=0),
    )
    callback = FigureLogger(stages=["fit"], resolution=40)
    _trainer(tmp_path, callback, max_epochs=3).fit(task, datamodule=dm)
    names = sorted(Path(p).name for p in callback.saved)
    assert names == ["fit_convergence.png", "fit_decision_regions.png", "fit_reliability.png"]
    assert all(_has_content(p) for p in callback.saved)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_plain_dataloaders_are_refused_before_fitting(tmp_path):
    dm = GLMDataModule("moons", batch_size=None, dataset_options={"n_samples": 100})
    dm.setup("fit")
    task = GLMTask(partial(LogisticRegression, l2=1e-3), solver="newton")
    task.build(dm)
    with pytest.raises(InputError, match="trainer.datamodule"):
        _trainer(tmp_path, FigureLogger(), max_epochs=1).fit(task, train_dataloaders=dm.train_batches())
    assert not (tmp_path / "figures").exists()


def test_bad_arguments_name_themselves():
    with pytest.raises(InputError, match="stages"):
        FigureLogger(stages=["predict"])
    with pytest.raises(InputError, match="resolution"):
        FigureLogger(resolution=0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_figure_config_runs_under_train_py(tmp_path, capsys):
    run_dir = tmp_path / "run"
    status = train_main(
        [
            "--config",
            str(CONFIGS / "qda_three_classes.yaml"),
            "--run_dir",
            str(run_dir),
            "--trainer.enable_progress_bar",
            "false",
            "--data.dataset_options.n_samples",
            "300",
        ]
    )
    assert status == 0, capsys.readouterr().err
    pngs = sorted(p.name for p in (run_dir / "figures").glob("*.png"))
    assert "fit_decision_regions.png" in pngs and "test_reliability.png" in pngs
    assert all(_has_content(run_dir / "figures" / p) for p in pngs)
