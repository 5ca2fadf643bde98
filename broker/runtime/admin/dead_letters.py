"""Dead letters as operators handle them: list, view, delete, and the one ``replay`` of every
kind (request, outbox, webhook, bookmark); ``docs/design.md`` has the mechanism.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, delete, update
from sqlalchemy.orm import Session

from broker.errors import BrokerError, Conflict, NotFound
from broker.names import DEFAULT_QUEUE, RESUME_INSTANCE, RUN_CHILD, RUN_REQUEST
from broker.runtime import ids
from broker.runtime.admin.paging import newest_first_page
from broker.runtime.requests import transitions as statuses
from broker.runtime.requests.queries import iso
from broker.runtime.webhooks import delivery as webhook_delivery
from broker.store.models import (
    BookmarkQueueItem,
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

#: the kinds ``/admin/bookmark-queue/dead-letters`` serves
BOOKMARK = (DeadLetterKind.BOOKMARK.value,)
#: the kinds ``/admin/dead-letters`` serves: work of requests, the outbox and webhook deliveries
WORK = (
    DeadLetterKind.REQUEST.value,
    DeadLetterKind.OUTBOX.value,
    DeadLetterKind.WEBHOOK.value,
)


#: every kind
ALL = (*WORK, *BOOKMARK)


@dataclasses.dataclass(frozen=True)
class Replayed:
    """A replay's outcome: ``new_id`` is the new work (an outbox row, or a bookmark-queue item),
    ``outbox_ids`` the rows to publish on the fast path."""

    dead_letter_id: str
    new_id: str
    reason: str
    outbox_ids: tuple[str, ...] = ()


def view(letter: DeadLetter) -> dict[str, Any]:
    return {
        "id": letter.id,
        "kind": letter.kind,
        "reason": letter.reason,
        "requestId": letter.request_id,
        "workflowInstanceId": letter.instance_id,
        "activityId": letter.activity_id,
        "sourceId": letter.source_id,
        "clientKey": letter.client_key,
        "name": letter.name,
        "error": letter.error,
        "attempts": letter.attempts,
        "replayable": letter.replayable,
        "replayedAt": iso(letter.replayed_at),
        "createdAt": iso(letter.created_at),
    }


def list_page(
    session: Session,
    kinds: tuple[str, ...],
    *,
    page: int,
    page_size: int,
    instance_id: str | None = None,
) -> dict[str, Any]:
    """One page (zero-based, as Elsa pages) of dead letters, newest first, with the total."""
    where: list[ColumnElement[bool]] = [DeadLetter.kind.in_(kinds)]
    if instance_id is not None:
        where.append(DeadLetter.instance_id == instance_id)
    return newest_first_page(session, DeadLetter, where, view, page=page, page_size=page_size)


def get(session: Session, letter_id: str, kinds: tuple[str, ...]) -> DeadLetter:
    letter = session.get(DeadLetter, letter_id)
    if letter is None or letter.kind not in kinds:
        raise NotFound(f"Dead letter '{letter_id}' not found")
    return letter


def remove(session: Session, letter_id: str, kinds: tuple[str, ...]) -> None:
    deleted = session.execute(
        delete(DeadLetter)
        .where(DeadLetter.id == letter_id, DeadLetter.kind.in_(kinds))
        .returning(DeadLetter.id)
    ).first()
    if deleted is None:
        raise NotFound(f"Dead letter '{letter_id}' not found")
    logger.info("dead letter %s deleted", letter_id)


def replay(
    session: Session,
    letter_id: str,
    kinds: tuple[str, ...] = WORK,
    *,
    source: str = "admin",
) -> Replayed:
    """Mark the letter replayed and write its new work in the caller's transaction; ``NotFound``
    outside ``kinds``, ``Conflict`` when it cannot be replayed (twice at once: once)."""
    letter = get(session, letter_id, kinds)
    if not letter.replayable:
        raise Conflict(
            f"Dead letter '{letter_id}' is not replayable",
            replayed=False,
            reason="AlreadyReplayed" if letter.replayed_at else "NotReplayable",
        )
    if letter.kind == DeadLetterKind.BOOKMARK.value and not _stimulus(letter):
        raise Conflict(
            f"Dead letter '{letter_id}' cannot be replayed: it names no stimulus",
            replayed=False,
            reason="NotReplayable",
        )
    now = utcnow()
    marked = session.execute(
        update(DeadLetter)
        .where(DeadLetter.id == letter_id, DeadLetter.replayable.is_(True))
        .values(replayable=False, replayed_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not marked:
        raise Conflict(
            f"Dead letter '{letter_id}' was replayed concurrently",
            replayed=False,
            reason="AlreadyReplayed",
        )
    outcome = _REPLAYS[letter.kind](session, letter, now, source)
    session.flush()
    logger.info(
        "replayed dead letter %s (%s) as %s",
        letter_id,
        letter.kind,
        outcome.new_id,
        extra={"request_id": letter.request_id, "instance_id": letter.instance_id},
    )
    return outcome


def _stimulus(letter: DeadLetter) -> str | None:
    return (letter.data or {}).get("name") or letter.name


def _outbox_replay(letter: DeadLetter, outbox_id: str, reason: str) -> Replayed:
    return Replayed(letter.id, outbox_id, reason, (outbox_id,))


def _replay_request(
    session: Session, letter: DeadLetter, now: dt.datetime, source: str
) -> Replayed:
    """The request goes back to ``Processing`` and its instance resumes at the failed activity."""
    outbox_id = _replay_id(letter)
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
    work = letter.data or {}
    args: dict[str, Any]
    reason = "request reopened and resumed at the failed activity"
    if work.get("taskName"):  # work that killed its worker (poison): run that task once more
        task, args = str(work["taskName"]), dict(work.get("args") or {})
        reason = (
            "request reopened; the work that killed its worker is delivered again "
            "(its count of deaths starts at 0)"
        )
    elif instance is None:  # never started (a remote dispatch): start it again
        task = RUN_REQUEST
        args = {"request_id": letter.request_id}
    elif instance.state is None:  # its first step never saved (it ran out of time): run it again
        task = RUN_CHILD if letter.request_id is None else RUN_REQUEST
        key = "instance_id" if letter.request_id is None else "request_id"
        args = {key: letter.instance_id if letter.request_id is None else letter.request_id}
    else:
        task = RESUME_INSTANCE
        args = {"instance_id": letter.instance_id, "retry": 1}
    _add_outbox_row(session, letter, outbox_id, task, args, now)
    return _outbox_replay(letter, outbox_id, reason)


def _replay_outbox(session: Session, letter: DeadLetter, now: dt.datetime, source: str) -> Replayed:
    """The outbox row's task is published again, as a new row."""
    data = letter.data or {}
    outbox_id = _replay_id(letter)
    task = str(data.get("taskName") or letter.name)
    _add_outbox_row(session, letter, outbox_id, task, dict(data.get("args") or {}), now)
    return _outbox_replay(letter, outbox_id, "outbox row published again")


def _replay_webhook(
    session: Session, letter: DeadLetter, now: dt.datetime, source: str
) -> Replayed:
    """The same delivery (same ``webhook-id``) is sent again and its endpoint enabled."""
    outbox_id = _replay_id(letter)
    try:
        webhook_delivery.reopen(session, letter, outbox_id, now=now)
    except BrokerError as exc:
        raise Conflict(f"Dead letter '{letter.id}' cannot be replayed: {exc}") from exc
    reason = "webhook delivery sent again (same webhook-id), endpoint enabled"
    return _outbox_replay(letter, outbox_id, reason)


def _replay_bookmark(
    session: Session, letter: DeadLetter, now: dt.datetime, source: str
) -> Replayed:
    """A new bookmark-queue item from ``data`` (camelCase), falling back to the letter's columns."""
    data = letter.data or {}
    item_id = str(uuid.uuid4())
    session.add(
        BookmarkQueueItem(
            id=item_id,
            name=_stimulus(letter),
            hash=data.get("hash"),
            correlation_id=data.get("correlationId"),
            client_key=data.get("clientKey", letter.client_key),
            instance_id=data.get("instanceId", letter.instance_id),
            activity_instance_id=data.get("activityInstanceId"),
            bookmark_id=data.get("bookmarkId"),
            payload=data.get("payload"),
            options=data.get("options"),
            created_at=now,
            next_attempt_at=now,
        )
    )
    return Replayed(letter.id, item_id, letter.reason)


_REPLAYS: dict[str, Callable[[Session, DeadLetter, dt.datetime, str], Replayed]] = {
    DeadLetterKind.REQUEST.value: _replay_request,
    DeadLetterKind.OUTBOX.value: _replay_outbox,
    DeadLetterKind.WEBHOOK.value: _replay_webhook,
    DeadLetterKind.BOOKMARK.value: _replay_bookmark,
}


def _replay_id(letter: DeadLetter) -> str:
    return ids.derive("replay", letter.id)


def _add_outbox_row(
    session: Session,
    letter: DeadLetter,
    outbox_id: str,
    task: str,
    args: dict[str, Any],
    now: dt.datetime,
) -> None:
    session.add(
        OutboxRow(
            id=outbox_id,
            task_name=task,
            queue=str((letter.data or {}).get("queue") or DEFAULT_QUEUE),
            args=args,
            state=OutboxState.PENDING.value,
            request_id=letter.request_id,
            instance_id=letter.instance_id,
            available_at=now,
            created_at=now,
        )
    )
