"""Dead letters as operators handle them: list, view, replay, delete (``/admin`` and the console).

Views never include ``data`` (what replay needs: resume input, workflow input, options), so an
operator can inspect failures without seeing payloads or secrets. Replay is atomic: the dead
letter is marked replayed by a guarded UPDATE and the new work (a bookmark-queue item, or an
outbox row) is written in the same transaction, so two operators replaying at once create one.

Request and outbox letters are replayed by ``broker.runtime.dead_letters``. A bookmark letter
becomes a new bookmark-queue item from these camelCase fields of ``data``, falling back to the
letter's own columns: name, hash, correlationId, clientKey, instanceId, activityInstanceId,
bookmarkId, payload, options.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from sqlalchemy import ColumnElement, delete, update
from sqlalchemy.orm import Session

from broker.errors import Conflict, NotFound
from broker.runtime import dead_letters
from broker.runtime.paging import newest_first_page
from broker.runtime.request_queries import iso
from broker.store.models import BookmarkQueueItem, DeadLetter, DeadLetterKind, utcnow

logger = logging.getLogger(__name__)

#: the kinds ``/admin/bookmark-queue/dead-letters`` serves
BOOKMARK = (DeadLetterKind.BOOKMARK.value,)
#: the kinds ``/admin/dead-letters`` serves: work of requests, the outbox and webhook deliveries
WORK = (
    DeadLetterKind.REQUEST.value,
    DeadLetterKind.OUTBOX.value,
    DeadLetterKind.WEBHOOK.value,
)


@dataclasses.dataclass(frozen=True)
class Replayed:
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


def replay(session: Session, letter_id: str, kinds: tuple[str, ...]) -> Replayed:
    """Mark the dead letter replayed and enqueue its work again; ``Conflict`` if it cannot be."""
    letter = get(session, letter_id, kinds)
    if not letter.replayable:
        raise Conflict(
            f"Dead letter '{letter_id}' is not replayable",
            replayed=False,
            reason="AlreadyReplayed" if letter.replayed_at else "NotReplayable",
        )
    if letter.kind != DeadLetterKind.BOOKMARK:
        # Requests and outbox rows: the runtime owns how work resumes.
        done = dead_letters.replay(session, letter_id, source="admin")
        return Replayed(letter_id, done.outbox_id, done.reason, (done.outbox_id,))
    data = letter.data or {}
    name = data.get("name") or letter.name
    if not name:
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
    item_id = str(uuid.uuid4())
    session.add(
        BookmarkQueueItem(
            id=item_id,
            name=name,
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
    logger.info(
        "bookmark dead letter %s replayed as queue item %s",
        letter_id,
        item_id,
        extra={"instance_id": letter.instance_id, "queue_item_id": item_id},
    )
    return Replayed(letter_id, item_id, letter.reason)
