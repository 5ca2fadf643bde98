"""Liveness and readiness answers shared by every listener and metrics port
(docs/design.md, section 8)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings

logger = logging.getLogger(__name__)

#: seconds each readiness check may take
READY_TIMEOUT = 2.0
#: what each probed part is called in the answer
DATABASE, TRANSPORT = "database", "transport"


@dataclasses.dataclass(frozen=True)
class Readiness:
    """The state of each part a role needs: ``"ok"`` or ``"down"``."""

    checks: dict[str, str]

    @property
    def down(self) -> list[str]:
        return sorted(name for name, state in self.checks.items() if state != "ok")

    @property
    def status(self) -> int:
        return 503 if self.down else 200

    def body(self) -> dict[str, Any]:
        if not self.down:
            return {"status": "ok", "checks": dict(self.checks)}
        return {
            "status": "unavailable",
            "down": self.down,
            "checks": dict(self.checks),
            "error": f"Not ready: {', '.join(self.down)} unreachable",
        }


def liveness() -> dict[str, str]:
    """The cheap answer: the process runs and serves (no I/O)."""
    return {"status": "ok"}


#: PostgreSQL's answer to "may this connection write?": not while the server is a standby
_WRITABLE = text("SELECT NOT pg_is_in_recovery()")


def check_database(session_factory: sessionmaker[Session]) -> str:
    """``ok`` when the database answers and takes writes: a PostgreSQL standby (in recovery, as
    one is until its promotion) answers but takes none, so it counts as down."""
    try:
        with session_factory() as session:
            if session.get_bind().dialect.name == "postgresql":
                if not session.execute(_WRITABLE).scalar():
                    logger.warning("readiness: the database is a read-only standby")
                    return "down"
            else:
                session.execute(text("SELECT 1"))
    except Exception as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        return "down"
    return "ok"


def check_transport(settings: Settings) -> str:
    from kombu.connection import Connection

    from broker.adapters.transport.celery_config import (
        broker_url,
        transport_class,
        transport_options,
    )

    try:
        with Connection(  # type: ignore[no-untyped-call]
            broker_url(settings),
            transport=transport_class(settings),
            connect_timeout=READY_TIMEOUT,
            transport_options=transport_options(settings),
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=READY_TIMEOUT)
    except Exception as exc:
        logger.warning("readiness: transport unreachable: %s", exc)
        return "down"
    return "ok"


def readiness(settings: Settings, session_factory: sessionmaker[Session]) -> Readiness:
    """Check the database and the transport now, side by side, each within ``READY_TIMEOUT``
    (a database host that drops packets would hold a connect for minutes: it is "down")."""
    database = _bounded(DATABASE, check_database, session_factory)
    transport = _bounded(TRANSPORT, check_transport, settings)
    return Readiness({DATABASE: database(), TRANSPORT: transport()})


def _bounded(name: str, check: Callable[[Any], str], argument: Any) -> Callable[[], str]:
    """Start ``check(argument)`` in a daemon thread; the answer waits for it until the deadline."""
    answer: list[str] = []
    thread = threading.Thread(
        target=lambda: answer.append(check(argument)), name=f"ready-{name}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + READY_TIMEOUT + 0.5

    def result() -> str:
        thread.join(max(deadline - time.monotonic(), 0.0))
        if not answer:
            logger.warning("readiness: %s did not answer within %.1f s", name, READY_TIMEOUT)
            return "down"
        return answer[0]

    return result


def probe(
    settings: Settings, connect: Callable[[], sessionmaker[Session]]
) -> Callable[[], Readiness]:
    """A readiness check for a process without a session factory of its own (a gunicorn master,
    a Celery worker's metrics thread): ``connect`` makes one on the first probe, not at start."""
    factory: list[sessionmaker[Session]] = []

    def check() -> Readiness:
        if not factory:
            try:
                factory.append(connect())
            except Exception as exc:
                logger.warning("readiness: database not configured: %s", exc)
                return Readiness({DATABASE: "down", TRANSPORT: check_transport(settings)})
        return readiness(settings, factory[0])

    return check
