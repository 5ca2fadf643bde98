"""Readings of the running stack every few seconds: memory and descriptors of each role (from
/proc), connections, rows per table, Redis memory and the backlogs (from the servers).

A reading that cannot be taken (the database or Redis is restarting) is skipped, not faked.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import sqlalchemy as sa

from tests.soak.report import Sample
from tests.soak.stack import Stack
from tests.support.stack.process import rss_bytes

logger = logging.getLogger(__name__)

INTERVAL = 5.0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Sampler:
    def __init__(self, stack: Stack, roles: list[str], started: float) -> None:
        self.stack = stack
        self.roles = roles
        self.started = started
        self.samples: list[Sample] = []
        self.stopping = threading.Event()
        assert stack.postgres is not None
        url = stack.postgres.url.replace(stack.postgres.address, "127.0.0.1")
        self.engine = sa.create_engine(url, pool_pre_ping=True, pool_size=1, max_overflow=0)
        self.thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.engine.dispose()

    def _run(self) -> None:
        while not self.stopping.wait(INTERVAL):
            try:
                self.samples.append(self.read())
            except Exception as exc:  # a server restarting: no reading this time
                logger.info("sample skipped: %s", exc)

    def read(self) -> Sample:
        at = time.monotonic() - self.started
        rss: dict[str, int] = {}
        fds: dict[str, int] = {}
        for role in self.roles:
            pids = self.stack.pids(role)
            rss[role] = sum(rss_bytes(p) for p in pids)
            fds[role] = sum(open_fds(p) for p in pids)
        with self.engine.connect() as conn:
            tables = [
                name
                for (name,) in conn.execute(
                    sa.text(
                        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                        "AND tablename <> 'alembic_version'"
                    )
                )
            ]
            rows = {
                # the names come from pg_tables, not from input
                t: int(conn.execute(sa.text(f'SELECT count(*) FROM "{t}"')).scalar_one())  # noqa: S608
                for t in tables
            }
            db_connections = int(
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = 'broker'")
                ).scalar_one()
            )
            outbox = int(
                conn.execute(
                    sa.text("SELECT count(*) FROM outbox WHERE state IN ('pending', 'dispatched')")
                ).scalar_one()
            )
            queue = int(
                conn.execute(
                    sa.text("SELECT count(*) FROM bookmark_queue WHERE delivery_attempts = 0")
                ).scalar_one()
            )
        info = self._redis_info()
        return Sample(
            at=at,
            rss=rss,
            fds=fds,
            rows=rows,
            db_connections=db_connections,
            redis_connections=int(info.get("connected_clients", 0)),
            redis_memory=int(info.get("used_memory", 0)),
            outbox_depth=outbox,
            bookmark_queue_depth=queue,
        )

    def _redis_info(self) -> dict[str, Any]:
        assert self.stack.redis is not None
        client = self.stack.redis.client_or_none()
        if client is None:
            raise RuntimeError("redis is down")
        try:
            return dict(client.info())
        finally:
            client.close()
