"""Liveness and readiness answers shared by every listener and metrics port.

Liveness (``/healthz``) says only that the process answers, so it never restarts a pod for a
database outage. Readiness (``/readyz``) checks the database and the transport, each bounded in
time, and names the part that is down (503), as the probes of every deploy form read it.
"""

from __future__ import annotations

import dataclasses
import logging
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


def check_database(session_factory: sessionmaker[Session]) -> str:
    try:
        with session_factory() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        return "down"
    return "ok"


def check_transport(settings: Settings) -> str:
    from kombu.connection import Connection

    from broker.runtime.celery_config import transport_options

    try:
        with Connection(  # type: ignore[no-untyped-call]
            settings.queue_url,
            connect_timeout=READY_TIMEOUT,
            transport_options=transport_options(settings),
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=READY_TIMEOUT)
    except Exception as exc:
        logger.warning("readiness: transport unreachable: %s", exc)
        return "down"
    return "ok"


def readiness(settings: Settings, session_factory: sessionmaker[Session]) -> Readiness:
    """Check the database and the transport now."""
    return Readiness(
        {DATABASE: check_database(session_factory), TRANSPORT: check_transport(settings)}
    )


def probe(settings: Settings) -> Callable[[], Readiness]:
    """A readiness check for a process without a session factory of its own (a gunicorn master,
    a Celery worker's metrics thread): the engine is made on the first probe, not at start."""
    factory: list[sessionmaker[Session]] = []

    def check() -> Readiness:
        if not factory:
            from broker.store import db

            try:
                factory.append(db.make_session_factory(db.make_engine(settings.database_url)))
            except Exception as exc:
                logger.warning("readiness: database not configured: %s", exc)
                return Readiness({DATABASE: "down", TRANSPORT: check_transport(settings)})
        return readiness(settings, factory[0])

    return check
