"""SIGTERM and Ctrl-C (SIGINT) end a ``torchglm train`` run at once, as :class:`Interrupted`.

``train.py`` turns both signals into an exception wherever the run is (the import of
Lightning, parsing, fitting, the report), so :mod:`.cli` can keep or restore the run
directory and print the command that resumes, and exit with 128 + the signal's
number (143, 130). Standard library only: :mod:`.entry` installs it before the
slow imports.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["Interrupted", "interruptible"]


class Interrupted(BaseException):
    """SIGTERM or SIGINT (Ctrl-C) arrived during a run.

    Raised by the signal handler :func:`interruptible` installs, wherever the run is (a
    ``BaseException``, as ``KeyboardInterrupt``, so no ``except Exception`` swallows
    it); Lightning's own SIGTERM handler only sets a flag its loops read between
    batches, and ends them with ``SystemExit()``, i.e. status 0.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def status(self) -> int:
        """The exit status of a process ended by the signal, as the shell reports it: 128 + its number."""
        return 128 + self.signum


def _raise_interrupted(signum: int, frame) -> None:
    raise Interrupted(signum)


@contextmanager
def interruptible():
    """SIGTERM and SIGINT raise :class:`Interrupted` inside the block. Lightning's
    signal connector keeps this handler (it calls it after its own during fit,
    validate and test, and puts it back afterwards)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
