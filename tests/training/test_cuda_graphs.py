"""``GLMTask(cuda_graphs=True)``: the SGD steps of a full block recorded once and
replayed (torchglm.training.graphs). Without a GPU the graph is the CPU recorder of
``graph_replay.py`` (aten calls recorded with their tensors, replayed without
Python); every test holds the replayed fit against the same fit uncaptured, bit for
bit. With CUDA, the last test does the same with real CUDA graphs."""

import warnings
from functools import partial

import pytest
import pytorch_lightning as pl
import torch
from graph_replay import RecordedGraph
from pytorch_lightning.loggers import CSVLogger
from run_util import TINY, fit_state, quiet_trainer, run_train_py

from torchglm import InputError, LogisticRegression, PerformanceWarning, SoftmaxRegression
from torchglm.training import GLMDataModule, GLMTask
from torchglm.training import placement as placement_mod
from torchglm.training.graphs import BlockGraph

pytestmark = pytest.mark.usefixtures("quiet_one_thread")

# breast_cancer: 341 training rows in batches of 16: 22 mini-batches per epoch, in
# blocks of 4: five full blocks (the first uncaptured, the others replayed) and a
# last block of two batches, the last one short (uncaptured).
BATCH, K = 16, 4


@pytest.fixture
def cpu_graphs(monkeypatch):
    """Record blocks with the CPU recorder (and keep every recorder for the test)."""
    made = []

    class Recorder(RecordedGraph):
        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(GLMTask, "graph_backend", Recorder)
    return made


def _fit(
    tmp_path,
    cuda_graphs,
    *,
    epochs=3,
    optimizer=None,
    lr_scheduler=None,
    interval="epoch",
    model=None,
    accelerator="cpu",
    shuffle=True,
    k=K,
    dtype="float64",
    callbacks=(),
):
    dm = GLMDataModule("breast_cancer", batch_size=BATCH, dtype=dtype, shuffle=shuffle)
    task = GLMTask(
        model or partial(LogisticRegression, l2=1e-3),
        optimizer=optimizer or partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        lr_scheduler=lr_scheduler,
        lr_scheduler_interval=interval,
        steps_per_block=k,
        train_metrics=False,
        cuda_graphs=cuda_graphs,
    )
    trainer = quiet_trainer(
        max_epochs=epochs,
        accelerator=accelerator,
        devices=1,
        logger=CSVLogger(tmp_path, name="", version=f"graphs{int(cuda_graphs)}"),
        log_every_n_steps=3,
        callbacks=list(callbacks),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(task, datamodule=dm)
    return task, trainer, [w for w in caught if issubclass(w.category, PerformanceWarning)]


def _logged_steps(tmp_path, version):
    import csv

    with open(tmp_path / version / "metrics.csv") as f:
        return [(r["step"], r["train/loss_step"]) for r in csv.DictReader(f) if r.get("train/loss_step")]


def _assert_same_fit(a, b):
    sa, sb = fit_state(*a[:2]), fit_state(*b[:2])
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize(
    "optimizer",
    [
        partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        partial(torch.optim.SGD, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        partial(torch.optim.SGD, lr=0.1),
    ],
    ids=["momentum", "nesterov-decay", "plain"],
)
def test_replayed_blocks_take_the_uncaptured_steps_bit_for_bit(tmp_path, cpu_graphs, optimizer):
    plain = _fit(tmp_path, False, optimizer=optimizer)
    graphs = _fit(tmp_path, True, optimizer=optimizer)
    _assert_same_fit(plain, graphs)
    assert _logged_steps(tmp_path, "graphs0") == _logged_steps(tmp_path, "graphs1")
    graph = graphs[0].driver.blocks.graph
    # recorded once (the numbers of the step never changed), replayed for every full
    # block but the first of the fit: 3 epochs x 5 full blocks - 1
    assert graph.recordings == 1 and len(cpu_graphs) == 1
    assert cpu_graphs[0].replays == 3 * 5 - 1
    assert not graphs[2]  # no PerformanceWarning


def test_a_softmax_in_float32_replays_bit_for_bit(tmp_path, cpu_graphs):
    model = partial(SoftmaxRegression, n_classes=2, l2=1e-3)
    plain = _fit(tmp_path, False, model=model, dtype="float32")
    graphs = _fit(tmp_path, True, model=model, dtype="float32")
    _assert_same_fit(plain, graphs)
    assert cpu_graphs[0].replays == 14


def test_a_new_learning_rate_records_the_block_again(tmp_path, cpu_graphs):
    sched = partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)
    plain = _fit(tmp_path, False, lr_scheduler=sched)
    graphs = _fit(tmp_path, True, lr_scheduler=sched)
    _assert_same_fit(plain, graphs)
    # the learning rate halves after every epoch: one recording per epoch
    assert graphs[0].driver.blocks.graph.recordings == 3
    assert [g.replays for g in cpu_graphs] == [4, 5, 5]


def test_the_recorded_block_reads_nothing_back_and_changes_nothing_while_recorded():
    """The recorder is strict where CUDA capture is: a host read fails, and recording
    leaves every tensor as it was (capture runs no kernel)."""
    w = torch.ones(3)
    graph = BlockGraph(2, 3, torch.device("cpu"), torch.float64, backend=RecordedGraph)
    spans = [torch.tensor([0, 1, 2]), torch.tensor([2, 1, 0])]
    x = torch.arange(3.0)

    def body(index, losses, total):
        for i in range(2):
            v = x.index_select(0, index[i]).mul(w).sum()
            losses[i].copy_(v)
            total.add_(v)
            w.add_(1.0)

    total = torch.zeros((), dtype=torch.float64)
    losses = graph.run(spans, total, "k", body)  # records (w unchanged), then replays once
    assert torch.equal(w, torch.full((3,), 3.0)) and float(total) == 3.0 + 6.0
    assert losses.tolist() == [3.0, 6.0]
    graph.run(spans, total, "k", body)
    assert torch.equal(w, torch.full((3,), 5.0)) and float(total) == 9.0 + 9.0 + 12.0

    def reads_back(index, losses, total):
        if float(x.index_select(0, index[0]).sum()) > 0:  # a host read: refused
            total.add_(1.0)

    with pytest.raises(RuntimeError, match="reads a value back to the host"):
        BlockGraph(2, 3, torch.device("cpu"), torch.float64, backend=RecordedGraph).run(
            spans, total, "k", reads_back
        )


class _StepHook(pl.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        pass


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, "need a CUDA device"),
        ({"optimizer": partial(torch.optim.LBFGS, lr=0.1)}, "LBFGS.step cannot be recorded"),
        ({"optimizer": partial(torch.optim.Adam, lr=0.01)}, "Adam.step cannot be recorded"),
        (
            {"lr_scheduler": partial(torch.optim.lr_scheduler.StepLR, step_size=5), "interval": "step"},
            "per-step learning-rate scheduler",
        ),
        ({"k": 1}, "one mini-batch per Lightning step"),
        ({"shuffle": False}, "not shuffled"),
        ({"callbacks": [_StepHook()]}, "step hook"),
    ],
    ids=["cpu", "lbfgs", "adam", "step-scheduler", "k1", "unshuffled", "hook"],
)
def test_a_fit_that_cannot_be_recorded_says_why_and_runs_uncaptured(tmp_path, monkeypatch, kwargs, reason):
    if reason != "need a CUDA device":
        monkeypatch.setattr(GLMTask, "graph_backend", RecordedGraph)
    plain = _fit(tmp_path, False, epochs=2, **kwargs)
    graphs = _fit(tmp_path, True, epochs=2, **kwargs)
    assert graphs[0].driver.blocks.graph is None
    assert len(graphs[2]) == 1 and reason in str(graphs[2][0].message)
    _assert_same_fit(plain, graphs)


def test_the_data_stay_on_a_cuda_device_only_when_they_fit(monkeypatch):
    dm = GLMDataModule("breast_cancer", batch_size=BATCH)
    dm.setup("fit")
    nbytes = sum(t.numel() * t.element_size() for s in dm._splits.values() for t in s)
    # a CPU fit gathers where the data are: nothing moves
    assert dm.keep_on("cpu") and dm.resident_device is None
    for free, kept in ((2 * nbytes, True), (2 * nbytes - 1, False)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, free=free: (free, 10 * free))
        assert dm.keep_on("cuda:0") is kept
        assert dm.resident_device == (torch.device("cuda:0") if kept else None)
        dm.teardown("fit")
        assert dm.resident_device is None
    assert placement_mod.RESIDENT_FRACTION == 0.5
    assert not dm.keep_on("meta")  # other accelerators: Lightning moves each batch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "optimizer",
    [partial(torch.optim.SGD, lr=0.1, momentum=0.9), partial(torch.optim.Adam, lr=0.01, capturable=True)],
    ids=["sgd", "adam-capturable"],
)
def test_cuda_graphs_take_the_uncaptured_steps_on_a_gpu(tmp_path, optimizer):
    plain = _fit(tmp_path, False, accelerator="gpu", optimizer=optimizer)
    graphs = _fit(tmp_path, True, accelerator="gpu", optimizer=optimizer)
    assert not graphs[2], [str(w.message) for w in graphs[2]]
    assert graphs[0].driver.blocks.graph.recordings == 1
    _assert_same_fit(plain, graphs)


def test_train_py_runs_a_cuda_graphs_config_uncaptured_on_a_cpu_with_one_line(tmp_path):

    proc = run_train_py(
        "--config", TINY, "--model.cuda_graphs", "true", "--run_dir", str(tmp_path / "run"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "cuda_graphs" in line]
    assert said == [
        "PerformanceWarning: cuda_graphs: the SGD blocks run uncaptured: they need a CUDA device (this fit runs on cpu)"
    ]
    assert (tmp_path / "run" / "model.ckpt").exists()


def test_cuda_graphs_takes_a_bool():
    with pytest.raises(InputError, match="cuda_graphs: expected true or false, got 'yes'"):
        GLMTask(LogisticRegression, cuda_graphs="yes")
