"""Dead letters of the runtime: faulted requests and instances, outbox rows that could not be
delivered and webhook deliveries that failed for their whole horizon, and their replay by an
operator.

Every fault writes a ``request`` dead letter through ``record_fault`` (retries exhausted, an
activity that faulted, a step over its time limit, a remote dispatch or callback that failed), so
every ``Faulted`` request and instance can be brought back.

A dead letter keeps what replay needs in ``data`` (never shown in views). Replay is atomic: it
marks the letter replayed (no longer replayable) and writes the new work (an outbox row) in the
caller's transaction. Replaying a request's letter is the one way out of ``Faulted``: the same
record goes back to ``Processing`` (audit event ``RequestReplayed``) and the instance resumes at
the failed activity. Functions here take a session and never commit.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from broker.errors import BrokerError, Conflict, NotFound
from broker.redaction import redact_optional
from broker.runtime import ids, statuses
from broker.runtime.celery_config import DEFAULT_QUEUE, RESUME_INSTANCE, RUN_CHILD, RUN_REQUEST
from broker.store.models import (
    DeadLetter,
    DeadLetterKind,
    InstanceStatus,
    InstanceSubStatus,
    OutboxRow,
    OutboxState,
    WorkflowInstance,
    utcnow,
)

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
) -> DeadLetter:
    """The ``request`` dead letter of one fault of a request or of a (child) instance: ``key``
    names the fault (its id derives from it, so recording it twice writes it once), ``reason``
    and ``activity_id`` say why and where. Replaying it resumes at the failed activity."""
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
        data={"queue": queue} if queue else None,
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


@dataclasses.dataclass(frozen=True)
class Replayed:
    """The outcome of a replay: the dead letter and the outbox row that carries the new work."""

    dead_letter_id: str
    outbox_id: str
    reason: str


def replay(session: Session, dead_letter_id: str, *, source: str = "admin") -> Replayed:
    """Replay a request or outbox dead letter; ``NotFound``, or ``Conflict`` when not replayable.

    The guard is in the UPDATE (``replayable = true``), so two operators replaying at once
    create the new work once.
    """
    letter = session.get(DeadLetter, dead_letter_id)
    if letter is None or letter.kind == DeadLetterKind.BOOKMARK.value:
        raise NotFound(f"Dead letter '{dead_letter_id}' not found")
    now = utcnow()
    claimed = session.execute(
        update(DeadLetter)
        .where(DeadLetter.id == dead_letter_id, DeadLetter.replayable.is_(True))
        .values(replayable=False, replayed_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not claimed:
        raise Conflict(f"Dead letter '{dead_letter_id}' was already replayed")
    data = letter.data or {}
    outbox_id = ids.derive("replay", dead_letter_id)
    if letter.kind == DeadLetterKind.REQUEST.value:
        _reopen_request(session, letter, outbox_id, source=source)
        reason = "request reopened and resumed at the failed activity"
    elif letter.kind == DeadLetterKind.WEBHOOK.value:
        from broker.runtime import (
            webhook_delivery,
        )  # it writes dead letters through this module

        try:
            webhook_delivery.reopen(session, letter, outbox_id, now=now)
        except BrokerError as exc:
            raise Conflict(f"Dead letter '{dead_letter_id}' cannot be replayed: {exc}") from exc
        reason = "webhook delivery sent again (same webhook-id), endpoint enabled"
    else:
        session.add(
            OutboxRow(
                id=outbox_id,
                task_name=str(data.get("taskName") or letter.name),
                queue=str(data.get("queue") or DEFAULT_QUEUE),
                args=dict(data.get("args") or {}),
                state=OutboxState.PENDING.value,
                request_id=letter.request_id,
                instance_id=letter.instance_id,
                available_at=now,
                created_at=now,
            )
        )
        reason = "outbox row published again"
    session.flush()
    logger.info(
        "replayed dead letter %s (%s)",
        dead_letter_id,
        letter.kind,
        extra={"request_id": letter.request_id, "instance_id": letter.instance_id},
    )
    return Replayed(dead_letter_id=dead_letter_id, outbox_id=outbox_id, reason=reason)


def _reopen_request(session: Session, letter: DeadLetter, outbox_id: str, *, source: str) -> None:
    data = letter.data or {}
    now = utcnow()
    if letter.request_id is not None:
        properties = {"deadLetterId": letter.id, "activityId": letter.activity_id}
        if not statuses.reopen(
            session, letter.request_id, source=source, properties=properties, now=now
        ):
            raise Conflict(f"Request '{letter.request_id}' is no longer Faulted")
    if letter.instance_id is not None:
        session.execute(
            update(WorkflowInstance)
            .where(WorkflowInstance.id == letter.instance_id)
            .values(
                status=InstanceStatus.RUNNING.value,
                sub_status=InstanceSubStatus.EXECUTING.value,
                fault=None,
                finished_at=None,
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )
    instance = session.get(WorkflowInstance, letter.instance_id) if letter.instance_id else None
    if instance is None:  # never started (a remote dispatch): start it again
        task = RUN_REQUEST
        args: dict[str, Any] = {"request_id": letter.request_id}
    elif instance.state is None:  # its first step never saved (it ran out of time): run it again
        task = RUN_CHILD if letter.request_id is None else RUN_REQUEST
        key = "instance_id" if letter.request_id is None else "request_id"
        args = {key: letter.instance_id if letter.request_id is None else letter.request_id}
    else:
        task = RESUME_INSTANCE
        args = {"instance_id": letter.instance_id, "retry": 1}
    session.add(
        OutboxRow(
            id=outbox_id,
            task_name=task,
            queue=str(data.get("queue") or DEFAULT_QUEUE),
            args=args,
            state=OutboxState.PENDING.value,
            request_id=letter.request_id,
            instance_id=letter.instance_id,
            available_at=now,
            created_at=now,
        )
    )
