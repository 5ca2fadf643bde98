"""A private Redis server for chaos tests and the soak: restarted at will, disturbing no other
test (no persistence, as the developers' guide starts it: a restart empties it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from tests.support.services import free_port
from tests.support.waits import wait_until


class PrivateRedis:
    """A Redis server of our own on a free port, started with the developers' guide's flags
    (no persistence), so restarting it disturbs no other test."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        subprocess.run(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                "--logfile",
                str(self.folder / "redis.log"),
                "--pidfile",
                str(self.folder / "redis.pid"),
            ],
            check=True,
            timeout=10,
        )
        wait_until(self._pid, timeout=10, what="redis to start")

    def _pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.folder / "redis.pid").read_text().strip())
        return None

    def stop(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_until(gone, timeout=10, what="redis to stop")
        with contextlib.suppress(OSError):
            (self.folder / "redis.pid").unlink()
