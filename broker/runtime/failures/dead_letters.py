"""Dead letters written by the runtime: ``record`` for every kind, ``record_fault`` for the
``request`` letter of a fault. Replay is ``broker.runtime.admin.dead_letters.replay``.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.redaction import redact_optional
from broker.runtime import ids
from broker.store.models import DeadLetter, DeadLetterKind, utcnow

logger = logging.getLogger(__name__)


def record(
    session: Session,
    *,
    dead_letter_id: str,
    kind: str,
    reason: str,
    source_id: str | None = None,
    request_id: str | None = None,
    instance_id: str | None = None,
    activity_id: str | None = None,
    client_key: str | None = None,
    name: str | None = None,
    error: str | None = None,
    attempts: int = 0,
    data: dict[str, Any] | None = None,
) -> DeadLetter:
    """Write a dead letter (or answer the one already written under the same id)."""
    existing = session.get(DeadLetter, dead_letter_id)
    if existing is not None:
        return existing
    letter = DeadLetter(
        id=dead_letter_id,
        kind=kind,
        reason=reason,
        source_id=source_id,
        request_id=request_id,
        instance_id=instance_id,
        activity_id=activity_id,
        client_key=client_key,
        name=name,
        error=redact_optional(error),
        attempts=attempts,
        data=data,
        replayable=True,
        created_at=utcnow(),
    )
    session.add(letter)
    session.flush()
    return letter


#: the reasons of request dead letters: an activity faulted (``Fault``, a refused URL, a 4xx, an
#: expression error), or its transient failures ran out of attempts
FAULTED, EXHAUSTED = "Faulted", "Exhausted"


def record_fault(
    session: Session,
    *,
    key: str,
    reason: str,
    error: str | None,
    request_id: str | None,
    instance_id: str | None,
    activity_id: str | None = None,
    client_key: str | None = None,
    name: str | None = None,
    attempts: int = 1,
    queue: str | None = None,
    source_id: str | None = None,
    work: dict[str, Any] | None = None,
) -> DeadLetter:
    """The ``request`` dead letter of one fault of a request or of a (child) instance: ``key``
    names the fault (its id derives from it, so recording it twice writes it once), ``reason``
    and ``activity_id`` say why and where. Replaying it resumes at the failed activity, or, when
    ``work`` names a task (``{"taskName", "args"}``: work that killed its worker), publishes that
    task once more."""
    data: dict[str, Any] = {**(work or {}), **({"queue": queue} if queue else {})}
    letter = record(
        session,
        dead_letter_id=ids.dead_letter_id_for("request", key),
        kind=DeadLetterKind.REQUEST.value,
        reason=reason,
        source_id=source_id,
        request_id=request_id,
        instance_id=instance_id,
        activity_id=activity_id,
        client_key=client_key,
        name=name,
        error=error,
        attempts=attempts,
        data=data or None,
    )
    logger.info(
        "dead letter %s: %s in activity %s",
        letter.id,
        reason,
        activity_id,
        extra={"request_id": request_id, "instance_id": instance_id},
    )
    return letter


def open_fault(session: Session, instance_id: str) -> DeadLetter | None:
    """The newest replayable ``request`` dead letter of ``instance_id``, if any."""
    return session.scalars(
        select(DeadLetter)
        .where(
            DeadLetter.instance_id == instance_id,
            DeadLetter.kind == DeadLetterKind.REQUEST.value,
            DeadLetter.replayable.is_(True),
        )
        .order_by(DeadLetter.created_at.desc())
        .limit(1)
    ).first()
