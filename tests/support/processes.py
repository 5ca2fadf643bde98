"""Real worker processes for the tests: ``celery -A tasks worker`` in its own session, stopped
by its process-group id."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.support.services import PROJECT_ROOT


def process_env(broker_env: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}  # noqa: TID251
    env.update(broker_env)
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


class Worker:
    """``celery -A tasks worker`` (with embedded beat) as a subprocess in its own session, so it
    and its pool children are stopped together by the worker's process-group id."""

    def __init__(
        self,
        env: Mapping[str, str],
        log: Path,
        *,
        beat: bool = True,
        concurrency: int = 2,
        name: str = "w1",
    ) -> None:
        self.env = process_env(env)
        self.log = log
        self.beat = beat
        self.concurrency = concurrency
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tasks",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(self.concurrency),
            "--hostname",
            f"{self.name}@127.0.0.1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if self.beat:
            argv.append("--beat")
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            argv,
            cwd=PROJECT_ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def terminate(self) -> None:
        """SIGTERM to the main process only: Celery's warm shutdown, which drains its pool."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once (a crash, not a shutdown)."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        # Pool children left behind by a killed parent share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@contextlib.contextmanager
def running_worker(env: Mapping[str, str], log: Path, **options: Any) -> Iterator[Worker]:
    worker = Worker(env, log, **options).start()
    try:
        yield worker
    finally:
        worker.stop()
