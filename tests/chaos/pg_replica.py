"""A private primary and its streaming standby, for the failover test: the standby is a
``pg_basebackup`` of the primary on another port, replication synchronous (every commit is on
the standby's disk before the client hears of it), and ``promote`` makes it the primary.

Both clusters are the chaos tests' ``PrivatePostgres`` (temporary folders, free ports on
127.0.0.1, run as the ``postgres`` account when the test runs as root), with production's
``fsync`` and ``synchronous_commit``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.stack.postgres import (
    DATABASE,
    DURABLE_OPTIONS,
    SUPERUSER,
    PrivatePostgres,
    require_binaries,
)

#: how long the standby may take to stream and to report itself synchronous
STREAM_TIMEOUT = 60.0


class ReplicatedPostgres(PrivatePostgres):
    """A durable cluster that can run SQL through psql and take part in replication."""

    def __init__(self, binaries: Path) -> None:
        super().__init__(binaries, durable=True)
        self.options = (*DURABLE_OPTIONS, "-c wal_level=replica", "-c max_wal_senders=5")

    def sql(self, query: str, database: str = "postgres") -> str:
        """Run ``query`` with psql; its output, unaligned and without headers."""
        result = self._run(
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-c",
            query,
        )
        return result.stdout.strip()

    def clone_of(self, primary: ReplicatedPostgres) -> None:
        """Make this cluster a streaming standby of ``primary`` and start it."""
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            SUPERUSER,
            "-D",
            str(self.data),
            "-R",  # standby.signal and primary_conninfo
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )
        self.start()

    def promote(self) -> None:
        """``pg_ctl promote``: the standby ends recovery and takes writes (waits until it does)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def in_recovery(self) -> bool:
        return self.sql("SELECT pg_is_in_recovery()") == "t"


def wait_for(check: object, what: str, timeout: float = STREAM_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


@contextlib.contextmanager
def replicated_postgres() -> Iterator[tuple[ReplicatedPostgres, ReplicatedPostgres]]:
    """A primary with the test's database and a synchronous streaming standby, both running;
    both destroyed on exit, whatever happened."""
    binaries = require_binaries()
    primary = ReplicatedPostgres(binaries)
    standby = ReplicatedPostgres(binaries)
    try:
        primary.create()
        standby.clone_of(primary)
        streaming = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        wait_for(lambda: primary.sql(streaming) == "1", "the standby to stream")
        # Synchronous from now on (before, CREATE DATABASE would have waited for a standby that
        # did not exist yet). Set on the primary only: the standby, once promoted, has no standby
        # of its own to wait for.
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.sql("SELECT pg_reload_conf()")
        wait_for(
            lambda: primary.sql("SELECT sync_state FROM pg_stat_replication") == "sync",
            "the standby to be synchronous",
        )
        assert standby.in_recovery()
        assert primary.sql("SELECT 1", database=DATABASE) == "1"
        yield primary, standby
    finally:
        standby.destroy()
        primary.destroy()
