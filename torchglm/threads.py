"""How many threads a fit uses: torch's intra-op threads, capped at the CPUs the rest
of the machine leaves idle.

torch starts with one intra-op thread per core. On a machine where another process
keeps cores busy, every parallel region of a fit waits at its barrier for the thread
whose core is taken, and a fit slowed down 30-fold (a Bayesian logistic run: 461 s
with the default threads beside a busy process, 15 s with one thread). So a fit that
is not told its thread count (``n_jobs=None`` of the scikit-learn estimators,
``--threads`` of ``train.py`` left out) takes ``min(torch.get_num_threads(), idle)``,
``idle`` being this process's CPUs less the other threads runnable at that moment
(Linux's ``/proc/loadavg``; elsewhere torch's setting is kept). Setting the count
(``n_jobs=k``, ``--threads k``) overrides the cap. The core API (``model.fit``,
:func:`torchglm.solvers.fit`) takes the same ``n_jobs`` with the same default; a
``GLMTask`` driven by a user's own ``Trainer`` runs on torch's setting as it is.
"""

from __future__ import annotations

import numbers
import os
from contextlib import contextmanager

import torch

from ._validation import fail

__all__ = ["default_threads", "fit_threads", "idle_cpus", "torch_threads"]


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def idle_cpus() -> int | None:
    """This process's CPUs less the threads of the machine runnable now other than the
    caller (the fourth field of Linux's ``/proc/loadavg``), at least 1; ``None`` where
    that count is not available. A process pinned to some of the host's CPUs (a
    container) counts only their share of the others, ``cpus / cpu_count`` of them:
    ``/proc/loadavg`` is the whole host's."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])  # the caller's thread included
    except (OSError, ValueError, IndexError):
        return None
    cpus = _cpus()
    share = min(1.0, cpus / (os.cpu_count() or cpus))
    return max(1, round(cpus - (running - 1) * share))


def default_threads() -> int:
    """torch's intra-op threads, capped at :func:`idle_cpus` (not read at one thread,
    which no cap lowers: a GridSearchCV worker's fits, a tiny fit's 30 us)."""
    threads = torch.get_num_threads()
    if threads <= 1:
        return threads
    idle = idle_cpus()
    return threads if idle is None else max(1, min(threads, idle))


def fit_threads(n_jobs) -> int:
    """The thread count for ``n_jobs``: ``None``, :func:`default_threads`; a positive
    int, itself; a negative one counts back from the CPUs as joblib does (``-1``: all).

    Raises:
        InputError: for 0, a bool or a non-integer.
    """
    if n_jobs is None:
        return default_threads()
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0:
        raise fail("n_jobs", "None, a positive integer or a negative one (-1: every CPU)", repr(n_jobs))
    return int(n_jobs) if n_jobs > 0 else max(1, _cpus() + 1 + int(n_jobs))


@contextmanager
def torch_threads(n_jobs):
    """torch's intra-op threads set to :func:`fit_threads` ``(n_jobs)`` for the duration
    of a fit, and restored after."""
    n = fit_threads(n_jobs)
    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n != before:
            torch.set_num_threads(before)
