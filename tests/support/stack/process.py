"""One started process of a test stack: its own process group, bounded waits, stopped by its id.

Every role a test starts (a listener, a worker, a beat, a relay, a server of its own) is a
``Process``: it leads a new session, so stopping it reaches its children (gunicorn's workers,
Celery's pool) even when the leader went first; its output goes to a log file, which is kept and
whose tail goes into every error about it. Nothing is ever stopped by name, only by the pid and
process group this module started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.services import PROJECT_ROOT

#: how long a role may take to start listening, or to stop after SIGTERM
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
#: the variables of the test runner that a child must not inherit (its own come from the stack)
PRIVATE_PREFIXES = ("BROKER_", "GUNICORN_", "PROMETHEUS_", "CELERY_")


def process_env(broker_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child: the runner's (PATH, HOME) without its broker settings, the
    stack's settings, and this checkout on the import path."""
    inherited = {
        k: v
        for k, v in os.environ.items()  # noqa: TID251 - the children's PATH, HOME
        if not k.startswith(PRIVATE_PREFIXES)
    }
    return {**inherited, **broker_env, "PYTHONPATH": str(PROJECT_ROOT)}


class Process:
    """``argv`` as a subprocess in its own session, writing to ``log``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log: Path,
        *,
        cwd: Path = PROJECT_ROOT,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log = log
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """``signum`` to the whole group (pool children too), while the leader runs."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signum)

    def terminate(self) -> None:
        """SIGTERM to the leader only: Celery's warm shutdown and gunicorn's graceful stop,
        which stop their own children in order (a group-wide SIGTERM would cut that short)."""
        if self.proc is not None and self.running:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the whole group at once (a crash, not a shutdown)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = STOP_TIMEOUT, *, group: bool = False) -> None:
        """SIGTERM, SIGKILL to the group after ``timeout``; then the group in any case, so no
        child outlives its leader. ``group`` sends the SIGTERM to the whole group at once:
        quicker, for the end of a test. Safe to call twice."""
        if self.proc is None:
            return
        if self.running:
            if group:
                self.signal(signal.SIGTERM)
            else:
                self.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        self.kill()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def failure(self, what: str) -> RuntimeError:
        """An error saying ``what`` went wrong, with the end of the log (kept in ``log``)."""
        return RuntimeError(f"{self.name} {what} (log: {self.log}):\n{self.tail()}")

    def wait_listening(
        self, port: int, *, host: str = "127.0.0.1", timeout: float = START_TIMEOUT
    ) -> None:
        """Until something accepts connections on ``host:port``; fails when the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise self.failure(f"exited with {self.proc and self.proc.returncode}")
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise self.failure(f"did not listen on {host}:{port} in {timeout:.0f}s")

    def wait_for_log(self, marker: str, *, since: int = 0, timeout: float = START_TIMEOUT) -> None:
        """Until ``marker`` appears in the log after offset ``since``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.log_text()[since:]:
                return
            if not self.running:
                raise self.failure("exited early")
            time.sleep(0.1)
        raise self.failure(f"did not log {marker!r} in {timeout:.0f}s")


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc; Linux)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            # the fields after the command name: state ppid ...
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in parents.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def alive(pids: Sequence[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie counts as gone)."""
    running = []
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                running.append(pid)
    return running


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
