"""A private Redis server for a test stack: restarted at will, disturbing no other test (no
persistence, as the developers' guide starts it: a restart empties it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from tests.support.services import free_port
from tests.support.waits import wait_until


def server_argv(listen: Sequence[str], port: int) -> list[str]:
    """``redis-server`` in the foreground as the developers' guide starts it: no persistence."""
    return ["redis-server", "--bind", *listen, "--port", str(port), "--save", "",
            "--appendonly", "no", "--protected-mode", "no"]  # fmt: skip


class PrivateRedis:
    """A Redis server of our own on a free port, started with the developers' guide's flags
    (no persistence), so restarting it disturbs no other test. ``listen`` are the addresses it
    binds (the first is the one its URL names: the soak adds a test bridge's)."""

    def __init__(self, folder: Path, *, listen: Sequence[str] = ("127.0.0.1",)) -> None:
        self.port = free_port()
        self.folder = folder
        self.listen = tuple(listen)
        self.address = self.listen[0]
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}/0"

    def start(self) -> None:
        subprocess.run(
            [
                *server_argv(self.listen, self.port),
                "--daemonize",
                "yes",
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
        wait_until(self.answers, timeout=10, what="redis to start")

    def client_or_none(self) -> Any:
        """A client of the server (on loopback when it listens there) when it answers, else None
        (the caller closes it)."""
        host = "127.0.0.1" if "127.0.0.1" in self.listen else self.address
        client = redis.Redis(host=host, port=self.port, socket_timeout=2)
        try:
            client.ping()
        except redis.RedisError:
            client.close()
            return None
        return client

    def answers(self) -> bool:
        client = self.client_or_none()
        if client is not None:
            client.close()
        return client is not None

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
