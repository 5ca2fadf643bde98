"""The time bound of a benchmark run: every wait checks it, and an alarm backs it up.

The roles themselves are a ``tests.support.stack`` stack (process groups, memory from /proc).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from broker.errors import BrokerError


class Deadline:
    """The run's time bound: every wait checks it, so a stuck phase ends the run, not the host."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.remaining() <= 0:
            raise BrokerError(f"benchmark timed out after {self.seconds:.0f}s while {what}")


@contextlib.contextmanager
def alarm(deadline: Deadline) -> Iterator[None]:
    """A backstop for the deadline: SIGALRM raises in the main thread if a wait forgot to check.

    An alarm set before (pytest-timeout's, say) is put back afterwards with its remaining time.
    Off the main thread, where signals cannot be handled, the deadline checks alone bound the run.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _expired(_signum: int, _frame: Any) -> None:
        raise BrokerError(f"benchmark timed out after {deadline.seconds:.0f}s")

    previous = signal.signal(signal.SIGALRM, _expired)
    earlier = signal.alarm(max(1, int(deadline.remaining()) + 30))
    started = time.monotonic()
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if earlier:
            signal.alarm(max(1, earlier - int(time.monotonic() - started)))
