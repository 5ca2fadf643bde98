"""Processes of a benchmark run: the time bound, process groups, memory from /proc, free ports.

Every role the harness starts leads its own process group, so stopping it reaches its children
(gunicorn workers, the Celery pool) even when the leader is gone first. Memory is read from
``/proc`` (Linux): a worker's RSS is its main process plus every descendant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker.errors import BrokerError

logger = logging.getLogger(__name__)

STOP_GRACE = 20.0


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


@dataclasses.dataclass
class Child:
    """A started process: its role, the process (leader of its own group) and its log."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def stop_child(child: Child, grace: float = STOP_GRACE) -> None:
    """SIGTERM the leader, wait ``grace`` seconds, then SIGKILL whatever is left of its group.

    Only the leader gets SIGTERM: gunicorn's master and Celery's main process stop their own
    workers in order, which a group-wide SIGTERM would cut short.
    """
    pid = child.process.pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        child.process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        logger.warning(
            "%s (pid %d) did not stop in %.0fs; killing its group", child.name, pid, grace
        )
    # The leader may be gone while pool children or gunicorn workers of its group linger.
    signal_group(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.process.wait(timeout=5)


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc; Linux)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the fields after the command name: state ppid ...
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in parents.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def tree_rss_bytes(pid: int) -> int:
    """RSS of ``pid`` plus all its descendants (a Celery worker's main process and pool)."""
    return sum(rss_bytes(p) for p in (pid, *children_of(pid)))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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
