"""The bookmark queue and timers: stimuli matched to waiting bookmarks
(docs/design.md, section 6)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.errors import NotFound
from broker.names import DEFAULT_QUEUE, EVENT, RESUME_INSTANCE
from broker.registry.triggers import trigger_hash
from broker.runtime import ids
from broker.runtime.bookmarks import schedules, triggers
from broker.runtime.failures import dead_letters
from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Bookmarks
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import (
    Bookmark,
    BookmarkQueueItem,
    InstanceStatus,
    Timer,
    WorkflowDefinition,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)

QUEUE_LOCK = "bookmark-queue"
TIMER_LOCK = "timers"
EVENT_BOOKMARK = EVENT
BATCH = 200


@dataclasses.dataclass(frozen=True)
class QueueReport:
    matched: int = 0
    waiting: int = 0
    expired: int = 0
    failed: int = 0
    skipped: bool = False


def matching_bookmarks(session: Session, item: BookmarkQueueItem) -> list[Bookmark]:
    """The bookmarks a stimulus resumes: the one it names, the bookmarks of its name whose
    stimulus hash is the item's (a webhook event), or the event bookmarks waiting for its name
    (same instance, correlation id and owning client when the item carries them; an event a
    workflow published with ``isLocal`` carries its instance)."""
    if item.bookmark_id is not None:
        bookmark = session.get(Bookmark, item.bookmark_id)
        return [bookmark] if bookmark is not None else []
    hashed = item.hash is not None
    stmt = select(Bookmark).where(Bookmark.name == (item.name if hashed else EVENT_BOOKMARK))
    if item.instance_id is not None:
        stmt = stmt.where(Bookmark.instance_id == item.instance_id)
    if item.correlation_id is not None:
        stmt = stmt.where(Bookmark.correlation_id == item.correlation_id)
    if item.client_key is not None:
        stmt = stmt.where(Bookmark.client_key == item.client_key)
    if not item.name:
        return []  # an event without a name resumes nothing (nor a bookmark without one)
    found = session.scalars(stmt.order_by(Bookmark.created_at, Bookmark.id))
    if hashed:
        return [b for b in found if trigger_hash(b.name, b.payload or {}) == item.hash]
    return [b for b in found if triggers.event_matches(b.payload, item.name)]


def process_queue(rt: Bookmarks) -> QueueReport:
    """One run of the bookmark-queue job (beat)."""
    settings = rt.settings
    lock = rt.locks.acquire(QUEUE_LOCK, ttl=settings.lock_ttl, timeout=0)
    if lock is None:
        return QueueReport(skipped=True)
    # Loading the registry publishes workflow files in write transactions of its own: do it
    # before this job opens its transaction, or SQLite's single writer would wait on itself.
    registry, clients = rt.registry, rt.clients
    try:
        with transaction(rt.factory) as session:
            report, written = process_due_items(
                session, settings, registry=registry, clients=clients
            )
            written = outbox.publishable(session, written)
    finally:
        lock.release()
    if written:
        rt.publisher.publish(written)
    return report


def due_items(session: Session, now: dt.datetime, limit: int = BATCH) -> list[BookmarkQueueItem]:
    """The items this run serves: due ones, taken round-robin by client, each client's longest
    waiting first.

    Every client's first due item comes before any client's second, and so on, so a client
    flooding unmatched events cannot crowd another client's stimulus out of the batch. Within a
    client the order is by ``next_attempt_at``: an unmatched item goes to the back of its
    client's line when the run puts it off, so the client's later items get their turn too.
    Stimuli of the runtime itself (no client) form one more line of their own.
    """
    turn = (
        func.row_number()
        .over(
            partition_by=BookmarkQueueItem.client_key,
            order_by=(BookmarkQueueItem.next_attempt_at, BookmarkQueueItem.id),
        )
        .label("turn")
    )
    ranked = (
        select(BookmarkQueueItem.id, BookmarkQueueItem.next_attempt_at, turn)
        .where(BookmarkQueueItem.next_attempt_at <= now)
        .subquery()
    )
    chosen = session.execute(
        select(ranked.c.id)
        .order_by(ranked.c.turn, ranked.c.next_attempt_at, ranked.c.id)
        .limit(limit)
    ).scalars()
    order = {item_id: index for index, item_id in enumerate(chosen)}
    if not order:
        return []
    items = session.scalars(
        select(BookmarkQueueItem).where(BookmarkQueueItem.id.in_(list(order)))
    ).all()
    return sorted(items, key=lambda found: order[found.id])


def process_due_items(
    session: Session, settings: Settings, *, registry: Any = None, clients: Any = None
) -> tuple[QueueReport, list[str]]:
    """Match the due items; with the ``registry``, an event also starts the workflows whose
    Event trigger it matches (``broker.runtime.bookmarks.triggers``)."""
    now = utcnow()
    items = due_items(session, now)
    matched = waiting = expired = failed = 0
    written: list[str] = []
    for item in items:
        try:
            with session.begin_nested():
                rows = _dispatch(session, item, now)
                if registry is not None:
                    rows += triggers.event_starts(session, item, registry, clients)
        except Exception as exc:
            logger.warning(
                "bookmark-queue item %s failed: %s", item.id, exc, extra={"queue_item_id": item.id}
            )
            failed += 1
            _failed(session, settings, item, str(exc), now)
            continue
        if rows:
            matched += 1
            written += rows
            _matched(settings, item, rows, now)
        elif item.created_at <= now - dt.timedelta(seconds=settings.bookmark_queue_ttl):
            expired += 1
            _bury(session, item, reason="Expired", error="no bookmark matched before the TTL")
        else:
            waiting += 1
            item.next_attempt_at = now + dt.timedelta(seconds=settings.bookmark_queue_interval)
    session.flush()
    if matched or expired or failed:
        logger.info(
            "bookmark queue: %d matched, %d waiting, %d expired, %d failed",
            matched,
            waiting,
            expired,
            failed,
        )
    return QueueReport(matched=matched, waiting=waiting, expired=expired, failed=failed), written


def _matched(
    settings: Settings, item: BookmarkQueueItem, rows: list[str], now: dt.datetime
) -> None:
    item.delivery_attempts += 1
    item.options = {**(item.options or {}), "dispatched": rows}
    # Kept (not deleted) while its resumes run: they read the stimulus from it. The purge job
    # removes it later.
    item.next_attempt_at = now + dt.timedelta(seconds=settings.dead_letter_ttl)


def dispatch_now(session: Session, settings: Settings, item: BookmarkQueueItem) -> list[str]:
    """Match one queued stimulus at once, for a caller that waits for the result (an HTTP call
    resuming its endpoint); answers its resume rows. One that matches nothing now stays queued,
    as every stimulus does. Never commits."""
    now = utcnow()
    rows = _dispatch(session, item, now)
    if rows:
        _matched(settings, item, rows, now)
    session.flush()
    return rows


def _dispatch(session: Session, item: BookmarkQueueItem, now: dt.datetime) -> list[str]:
    """One resume row per matched bookmark. A bookmark of a finished instance is no match (it
    lost a race with the instance's last step); one whose instance is gone is a broken store and
    fails the item, so its attempts count towards a ``Failed`` dead letter instead of the
    stimulus vanishing."""
    written = []
    for bookmark in matching_bookmarks(session, item):
        instance = session.get(WorkflowInstance, bookmark.instance_id)
        if instance is None:
            raise NotFound(
                f"bookmark {bookmark.id} names workflow instance {bookmark.instance_id}, "
                "which does not exist",
                bookmarkId=bookmark.id,
            )
        if instance.status != InstanceStatus.RUNNING.value:
            continue
        row = outbox.enqueue(
            session,
            outbox_id=ids.outbox_id_for("resume", item.id, bookmark.id),
            task_name=RESUME_INSTANCE,
            queue=_queue_of(session, instance),
            args={
                "instance_id": bookmark.instance_id,
                "bookmark_id": bookmark.id,
                "queue_item_id": item.id,
            },
            instance_id=bookmark.instance_id,
            request_id=instance.request_id,
            available_at=now,
        )
        written.append(row.id)
    return written


def _queue_of(session: Session, instance: WorkflowInstance | None) -> str:
    """The queue of the instance's workflow version (a dedicated worker may serve it)."""
    if instance is None or not instance.definition_version_id:
        return DEFAULT_QUEUE
    definition = session.get(WorkflowDefinition, instance.definition_version_id)
    return (definition.queue if definition is not None else None) or DEFAULT_QUEUE


def _failed(
    session: Session, settings: Settings, item: BookmarkQueueItem, error: str, now: dt.datetime
) -> None:
    item.delivery_attempts += 1
    item.last_error = error
    if item.delivery_attempts >= settings.bookmark_queue_max_delivery_attempts:
        _bury(session, item, reason="Failed", error=error)
    else:
        item.next_attempt_at = now + dt.timedelta(
            seconds=settings.bookmark_queue_interval * 2**item.delivery_attempts
        )


def _bury(session: Session, item: BookmarkQueueItem, *, reason: str, error: str) -> None:
    dead_letters.record(
        session,
        dead_letter_id=ids.dead_letter_id_for("bookmark", item.id),
        kind="bookmark",
        reason=reason,
        source_id=item.id,
        instance_id=item.instance_id,
        client_key=item.client_key,
        name=item.name,
        error=error,
        attempts=item.delivery_attempts,
        data={
            "name": item.name,
            "hash": item.hash,
            "correlationId": item.correlation_id,
            "bookmarkId": item.bookmark_id,
            "instanceId": item.instance_id,
            "payload": item.payload,
        },
    )
    session.delete(item)


def enqueue_stimulus(
    session: Session,
    *,
    item_id: str,
    name: str,
    payload: Any,
    instance_id: str | None = None,
    bookmark_id: str | None = None,
    correlation_id: str | None = None,
    client_key: str | None = None,
    stimulus: dict[str, Any] | None = None,
) -> BookmarkQueueItem:
    """Queue a stimulus (idempotent by ``item_id``); ``stimulus``: the payload the bookmarks of
    ``name`` must hold to match (its hash is kept), instead of an event name."""
    existing = session.get(BookmarkQueueItem, item_id)
    if existing is not None:
        return existing
    now = utcnow()
    item = BookmarkQueueItem(
        id=item_id,
        name=name,
        instance_id=instance_id,
        bookmark_id=bookmark_id,
        correlation_id=correlation_id,
        client_key=client_key,
        payload=payload,
        hash=trigger_hash(name, stimulus) if stimulus is not None else None,
        created_at=now,
        next_attempt_at=now,
    )
    session.add(item)
    session.flush()
    return item


# Timers -------------------------------------------------------------------------------------------


def fire_timers(rt: Bookmarks) -> int:
    """One run of the timer job (beat): due timers become resume rows, due schedule triggers
    start their workflows."""
    lock = rt.locks.acquire(TIMER_LOCK, ttl=rt.settings.lock_ttl, timeout=0)
    if lock is None:
        return 0
    # As in process_queue: load the registry (its own write transactions) before this one.
    registry = rt.registry
    try:
        with transaction(rt.factory) as session:
            written = fire_due_timers(session)
            # Schedule triggers share the job and its lock (broker.runtime.bookmarks.schedules).
            now = utcnow()
            schedules.sync(session, registry, now)
            written += schedules.fire_due(session, registry, now)
            publish = outbox.publishable(session, written)
    finally:
        lock.release()
    if publish:
        rt.publisher.publish(publish)
    return len(written)


def fire_due_timers(session: Session, *, now: dt.datetime | None = None) -> list[str]:
    now = now or utcnow()
    timers = session.scalars(
        select(Timer)
        .where(Timer.fired_at.is_(None), Timer.due_at <= now)
        .order_by(Timer.due_at)
        .limit(BATCH)
    ).all()
    written = []
    for timer in timers:
        timer.fired_at = now
        instance = session.get(WorkflowInstance, timer.instance_id)
        row = outbox.enqueue(
            session,
            outbox_id=ids.outbox_id_for("timer", timer.id),
            task_name=RESUME_INSTANCE,
            queue=_queue_of(session, instance),
            args={"instance_id": timer.instance_id, "bookmark_id": timer.bookmark_id},
            instance_id=timer.instance_id,
            request_id=instance.request_id if instance is not None else None,
            available_at=now,
        )
        written.append(row.id)
    session.flush()
    return written
