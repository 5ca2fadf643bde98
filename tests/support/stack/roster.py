"""A stack of roles: the processes one test (or a soak, a benchmark) starts, by name.

A ``Stack`` starts the roles it is asked for (``roles.py`` gives each one's command) with one
environment (``config.py``: embedded or services, free ports on 127.0.0.1), waits for the
listeners, and stops everything it started, by pid and process group, whatever happened. Each
role writes ``<logs>/<name>.log``; the logs stay where they are, and a failure to start, or
``check_alive``, quotes their tails.
"""

from __future__ import annotations

import contextlib
import logging
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from broker.settings import Settings
from tests.support.stack import roles
from tests.support.stack.config import Ports, settings_of
from tests.support.stack.process import START_TIMEOUT, Process, children_of, process_env

logger = logging.getLogger(__name__)

#: the listeners among the roles, which a stack waits for before answering
LISTENERS = ("public", "internal", "console")


class Stack:
    """The roles of one test under ``root`` with the BROKER_* settings ``env``."""

    def __init__(self, root: Path, env: Mapping[str, str], *, ports: Ports | None = None) -> None:
        self.root = root
        self.logs = root / "logs"
        self.ports = ports or Ports()
        self.env = process_env(env)
        self.processes: dict[str, Process] = {}

    @property
    def var(self) -> Path:
        return Path(self.env["BROKER_VAR_DIR"])

    @property
    def settings(self) -> Settings:
        return settings_of(self.env)

    def start(
        self,
        name: str,
        argv: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> Process:
        """Start role ``name`` (``argv``, or the deploy files' command of that role), in its own
        process group, logging to ``logs/<name>.log``; ``wrap`` runs it elsewhere (a network
        namespace)."""
        command = list(argv) if argv is not None else roles.role(name, self.var)
        if wrap is not None:
            command = wrap(command)
        process = Process(name, command, env or self.env, self.logs / f"{name}.log").start()
        self.processes[name] = process
        logger.info("started %s (pid %d)", name, process.pid)
        return process

    def start_all(self, names: Iterable[str], *, timeout: float = START_TIMEOUT) -> Stack:
        """Start ``names`` and wait until each listener among them listens; on a failure, stop
        what was started and raise with the logs' tails."""
        try:
            for name in names:
                self.start(name)
            self.wait_listening(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    def wait_listening(self, *, timeout: float = START_TIMEOUT) -> None:
        for name in LISTENERS:
            if name in self.processes:
                self.processes[name].wait_listening(self.ports.of(name), timeout=timeout)

    def wait_ready(self, *, timeout: float = START_TIMEOUT) -> None:
        """Until the internal listener's /readyz answers 200 (database and transport reachable)."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.ports.internal}/readyz"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stack was not ready in {timeout:.0f}s:\n{self.tails()}")
            time.sleep(0.5)

    def __getitem__(self, name: str) -> Process:
        return self.processes[name]

    def __contains__(self, name: str) -> bool:
        return name in self.processes

    def stop(self, name: str, timeout: float = 20.0, *, group: bool = False) -> None:
        process = self.processes.pop(name, None)
        if process is not None:
            process.stop(timeout, group=group)

    def kill(self, name: str) -> None:
        """SIGKILL the role's whole process group (a crash, not a shutdown)."""
        process = self.processes.pop(name, None)
        if process is not None:
            process.kill()

    def pids(self, name: str) -> list[int]:
        """The role's leader and every descendant, while it runs."""
        process = self.processes.get(name)
        if process is None or not process.running:
            return []
        return [process.pid, *children_of(process.pid)]

    def check_alive(self) -> None:
        """Raise when a started role has exited (its log's tail says why)."""
        for process in self.processes.values():
            if not process.running:
                raise process.failure(
                    f"exited with code {process.proc and process.proc.returncode}"
                )

    def leaders(self) -> dict[str, int]:
        """Each running role's leader pid, for ``check_unchanged`` after a fault."""
        return {name: process.pid for name, process in self.processes.items() if process.running}

    def check_unchanged(self, leaders: Mapping[str, int]) -> None:
        """AssertionError unless each role of ``leaders`` runs still, as the same process: it
        recovered by itself, nobody restarted it."""
        for name, pid in leaders.items():
            process = self.processes.get(name)
            assert process is not None, f"{name} was stopped"
            assert process.running, f"{name} died:\n{process.tail()}"
            assert process.pid == pid, f"{name} was restarted"

    def tails(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- {name} ({process.log})\n{process.tail(lines)}"
            for name, process in self.processes.items()
        )

    def close(self, timeout: float = 15.0, *, group: bool = False) -> None:
        """Stop every role this stack started (in reverse order); safe to call twice."""
        for name in reversed(list(self.processes)):
            self.stop(name, timeout, group=group)


def worker_process(
    env: Mapping[str, str],
    log: Path,
    *,
    beat: bool = True,
    concurrency: int = 2,
    name: str = "w1",
) -> Process:
    """A lone ``celery -A tasks worker`` (with embedded beat unless told) on the BROKER_*
    settings ``env``, not started yet: the runtime tests' single worker."""
    argv = roles.worker(name, concurrency=concurrency, beat=beat)
    return Process(name, argv, process_env(env), log)


@contextlib.contextmanager
def running_worker(env: Mapping[str, str], log: Path, **options: object) -> Iterator[Process]:
    """``worker_process`` started, and stopped on the way out whatever happened."""
    process = worker_process(env, log, **options).start()  # type: ignore[arg-type]
    try:
        yield process
    finally:
        process.stop()


class OnStack:
    """What a client of a stack (a class with the stack as ``roles``) reads of its listeners."""

    roles: Stack

    @property
    def public_port(self) -> int:
        return self.roles.ports.public

    @property
    def internal_port(self) -> int:
        return self.roles.ports.internal
