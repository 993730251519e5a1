"""The thread count of a fit (:mod:`torchglm.threads`)."""

import pytest
import torch

import torchglm.threads as threads
from torchglm import InputError


def test_idle_cpus_reads_the_runnable_threads(monkeypatch, tmp_path):
    monkeypatch.setattr(threads, "_cpus", lambda: 4)
    real_open = open

    def fake(text):
        def opener(path, *args, **kwargs):
            if path == "/proc/loadavg":
                f = tmp_path / "loadavg"
                f.write_text(text)
                return real_open(f, *args, **kwargs)
            return real_open(path, *args, **kwargs)

        return opener

    for text, idle in (("0.1 0.1 0.1 1/300 5", 4), ("2.0 2.0 2.0 3/300 5", 2), ("9 9 9 12/300 5", 1)):
        monkeypatch.setattr("builtins.open", fake(text))
        assert threads.idle_cpus() == idle
    monkeypatch.setattr("builtins.open", fake("garbled"))
    assert threads.idle_cpus() is None
    # pinned to 2 of a host's 8 CPUs: 7 other runnable threads leave about 2 * 7 / 8 of ours busy
    monkeypatch.setattr(threads, "_cpus", lambda: 2)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    for text, idle in (("1 1 1 4/300 5", 1), ("7 7 7 8/300 5", 1), ("1 1 1 2/300 5", 2)):
        monkeypatch.setattr("builtins.open", fake(text))
        assert threads.idle_cpus() == idle


def test_fit_threads_caps_the_default_only(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(threads, "idle_cpus", lambda: 1)
        assert threads.fit_threads(None) == 1 and threads.fit_threads(2) == 2
        monkeypatch.setattr(threads, "idle_cpus", lambda: 8)
        assert threads.fit_threads(None) == 2  # never above torch's own setting
        monkeypatch.setattr(threads, "idle_cpus", lambda: None)
        assert threads.fit_threads(None) == 2
        monkeypatch.setattr(threads, "_cpus", lambda: 4)
        assert threads.fit_threads(-1) == 4 and threads.fit_threads(-2) == 3
        for bad in (0, True, 1.5):
            with pytest.raises(InputError, match="n_jobs"):
                threads.fit_threads(bad)
        monkeypatch.setattr(threads, "idle_cpus", lambda: 1)
        with threads.torch_threads(None):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_one_thread_reads_no_load(monkeypatch):
    """At one torch thread no cap can lower the default: ``/proc/loadavg`` is not read
    (a GridSearchCV worker's fits, one thread each, paid 30 us a fit for it)."""

    def unread():
        raise AssertionError("idle_cpus read at one thread")

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        monkeypatch.setattr(threads, "idle_cpus", unread)
        assert threads.default_threads() == 1 and threads.fit_threads(None) == 1
    finally:
        torch.set_num_threads(before)


def test_core_fit_caps_its_default_threads_at_the_idle_cpus(monkeypatch):
    """``model.fit`` (the core API) runs on ``min(torch's threads, idle CPUs)`` unless
    given ``n_jobs``, and restores torch's setting after."""
    from run_util import record_each_stage
    from torchglm import LogisticRegression

    seen = record_each_stage(monkeypatch, torch.get_num_threads)
    monkeypatch.setattr(threads, "idle_cpus", lambda: 1)
    x = torch.randn(200, 3, dtype=torch.float64)
    y = (x[:, 0] + torch.randn(200, dtype=torch.float64) > 0).double()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert LogisticRegression(3, l2=1e-3).fit(x, y, solver="newton").converged
        assert seen == [1] and torch.get_num_threads() == 2
        assert LogisticRegression(3, l2=1e-3).fit(x, y, solver="newton", n_jobs=2).converged
        assert seen == [1, 2]
        with pytest.raises(InputError, match="n_jobs"):
            LogisticRegression(3).fit(x, y, n_jobs=0)
    finally:
        torch.set_num_threads(before)
