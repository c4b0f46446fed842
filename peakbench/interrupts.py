"""SIGINT and SIGTERM as a KeyboardInterrupt that knows which signal it was, so a run ends the same
way on either, keeps what it measured and exits with 128 + the signal."""
from __future__ import annotations

import contextlib
import signal
import threading

_last: int | None = None


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or SIGINT) while peakbench runs. A KeyboardInterrupt, so it ends the run as Ctrl-C
    does and no `except Exception` in the harness takes it for a failed test."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt():
    """Raise Interrupted on SIGINT and SIGTERM for the duration; a signal the parent set to be
    ignored stays ignored."""
    global _last
    _last = None
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        global _last
        _last = signum
        raise Interrupted(signum)

    previous = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:
            previous[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def signal_of(e: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for. Native code that takes the interrupt (Ray's
    waits) raises a plain KeyboardInterrupt of its own: then the last signal our handler saw."""
    return getattr(e, "signum", None) or _last or signal.SIGINT
