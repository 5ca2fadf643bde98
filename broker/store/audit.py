"""The audit trail as log lines: one structured line (without payload) per committed
``RequestEvent``; ``install`` puts the listeners on one session factory."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from broker.store.models import RequestEvent

logger = logging.getLogger("broker.audit")

_PENDING = "broker.audit.pending"


def _collect(session: Session, _context: Any, _instances: Any) -> None:
    new = [obj for obj in session.new if isinstance(obj, RequestEvent)]
    if new:
        session.info.setdefault(_PENDING, []).extend(new)


def add_pending(session: Session, rows: Iterable[Mapping[str, Any]]) -> None:
    """Log these audit event rows, inserted without the ORM (a multi-row statement), when the
    session's transaction commits, as the listeners do for ``RequestEvent`` objects."""
    session.info.setdefault(_PENDING, []).extend(rows)


def _fields(audit: RequestEvent | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(audit, Mapping):
        return audit
    return {
        "event_type": audit.event_type,
        "message": audit.message,
        "request_id": audit.request_id,
        "properties": audit.properties,
        "source": audit.source,
    }


def _emit(session: Session) -> None:
    for pending in session.info.pop(_PENDING, ()):
        audit = _fields(pending)
        properties = audit["properties"] or {}
        logger.info(
            "%s: %s",
            audit["event_type"],
            audit["message"] or "-",
            extra={
                "event_type": audit["event_type"],
                "request_id": audit["request_id"],
                "correlation_id": audit["request_id"],  # a request's correlation id is its id
                "instance_id": properties.get("instanceId"),
                "source": audit["source"],
            },
        )


def _discard(session: Session) -> None:
    session.info.pop(_PENDING, None)


_LISTENERS = (("before_flush", _collect), ("after_commit", _emit), ("after_rollback", _discard))


def install(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """Log the audit events that sessions of ``factory`` commit; safe to call twice. Answers
    ``factory``."""
    missing = _missing(factory)
    for name, listener in _LISTENERS:
        if name in missing:
            event.listen(factory, name, listener)
    return factory


def installed(factory: sessionmaker[Session]) -> bool:
    """Whether ``install`` has put the listeners on ``factory``."""
    return not _missing(factory)


def _missing(factory: sessionmaker[Session]) -> set[str]:
    """The events whose listener the sessions of ``factory`` do not call. Read from a session's
    own dispatch: ``event.contains`` keys its registry by ``id()``, so a new factory whose
    session class got the address of a freed one could pass for installed."""
    with factory() as session:  # no connection is made
        return {n for n, listener in _LISTENERS if listener not in getattr(session.dispatch, n)}
