"""The transactional outbox (docs/design.md, section 5): rows written with the state change that
asked for them, published after commit, and relayed until the consumer records its result."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import and_, bindparam, delete, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import LockLost
from broker.redaction import redact_optional, redact_text
from broker.runtime import ids
from broker.runtime.failures import dead_letters
from broker.runtime.outbox.deliveries import CLOSE_DEAD_START, note_finished, tracked
from broker.runtime.outbox.pause import is_paused, is_paused_cached, paused_if_known
from broker.runtime.ports import Lock, LockProvider, Sender
from broker.settings import Settings
from broker.store.db import acquire_lease, fence, release_lease, transaction
from broker.store.models import OutboxRow, OutboxState, table_of, utcnow

logger = logging.getLogger(__name__)

RELAY_LEASE = "outbox-relay"
RELAY_LOCK = "outbox-relay"
#: batches one relay run may publish before it yields to the next beat tick
MAX_BATCHES_PER_RUN = 20
#: seconds a row held back by the pause waits before it is due again (the relay still waits for
#: the resume; this only spaces the retries out)
PAUSED_DELAY = 1.0


#: told (epoch, claimed rows) inside each fenced batch, before the rows are published
Observer = Callable[[int, list[OutboxRow]], None]


# Writing and finishing rows -----------------------------------------------------------------------


def enqueue(
    session: Session,
    *,
    outbox_id: str,
    task_name: str,
    queue: str,
    args: dict[str, Any],
    request_id: str | None = None,
    instance_id: str | None = None,
    available_at: dt.datetime | None = None,
) -> OutboxRow:
    """Add a pending row (or answer the existing one: ids are deterministic, so a retried step
    that enqueues the same work finds its earlier row instead of adding a second)."""
    existing = session.get(OutboxRow, outbox_id)
    if existing is not None:
        return existing
    now = utcnow()
    row = OutboxRow(
        id=outbox_id,
        task_name=task_name,
        queue=queue,
        args=args,
        state=OutboxState.PENDING.value,
        attempts=0,
        request_id=request_id,
        instance_id=instance_id,
        available_at=available_at or now,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


_OUTBOX = table_of(OutboxRow)
# Built once (see ``table_of``): every task runs these.
_MARK_DONE_BEFORE_0004 = (
    update(_OUTBOX)
    .where(
        _OUTBOX.c.id == bindparam("outbox_id"),
        or_(
            _OUTBOX.c.state == OutboxState.PENDING.value,
            _OUTBOX.c.state == OutboxState.DISPATCHED.value,
        ),
    )
    .values(state=OutboxState.DONE.value, finished_at=bindparam("now"), lease_expires_at=None)
)
_MARK_DONE = _MARK_DONE_BEFORE_0004.values(started_at=None, start_retries=None)
#: what a result of the work writes besides: its delivery's start is closed
_CLOSE_START: dict[str, Any] = {"started_at": None, "start_retries": None}
_STATE_OF = select(_OUTBOX.c.state).where(_OUTBOX.c.id == bindparam("outbox_id"))


def mark_done(session: Session, outbox_id: str | None) -> bool:
    """Record that the consumer finished the row; False when it was already finished."""
    if outbox_id is None:
        return False
    statement = _MARK_DONE if tracked(session) else _MARK_DONE_BEFORE_0004
    result = session.execute(statement, {"outbox_id": outbox_id, "now": utcnow()})
    note_finished(outbox_id)
    return bool(result.rowcount)  # type: ignore[attr-defined]


def is_finished(session: Session, outbox_id: str | None) -> bool:
    """Whether the row was already done or dead (a redelivered message: skip it)."""
    if outbox_id is None:
        return False
    state = session.scalar(_STATE_OF, {"outbox_id": outbox_id})
    return state in (OutboxState.DONE.value, OutboxState.DEAD.value)


def postpone(session: Session, outbox_id: str, *, delay: float, error: str | None = None) -> None:
    """Put an unfinished row back to pending, due after ``delay`` seconds (e.g. the instance was
    locked by another worker); the relay publishes it then. The delivery that postpones it ended
    with a result: its start is closed."""
    note_finished(outbox_id)
    session.execute(
        update(OutboxRow)
        .where(
            OutboxRow.id == outbox_id,
            OutboxRow.state.in_([OutboxState.PENDING.value, OutboxState.DISPATCHED.value]),
        )
        .values(
            state=OutboxState.PENDING.value,
            available_at=utcnow() + dt.timedelta(seconds=delay),
            lease_expires_at=None,
            last_error=redact_optional(error),
            **(_CLOSE_START if tracked(session) else {}),
        )
        .execution_options(synchronize_session=False)
    )


def publishable(session: Session, written: list[str]) -> list[str]:
    """The rows a maintenance job may publish on the fast path after its commit: none while the
    runtime is paused (read fresh, in the job's own transaction, not from the per-process cache),
    so work a stimulus causes after a pause waits in SQL for the relay, which holds it."""
    if written and is_paused(session):
        return []
    return written


def hold_if_paused(factory: sessionmaker[Session], outbox_id: str | None) -> bool:
    """While the runtime is paused, hand the row back to pending and answer True (the task must
    not run it); False when the runtime is running. A row-less call (``outbox_id`` None) is never
    held: there would be nothing to pick it up again."""
    if outbox_id is None:
        return False
    known = paused_if_known(factory)
    if known is False:
        return False
    if known is None:
        with transaction(factory, write=False) as session:
            if not is_paused_cached(session):
                return False
    with transaction(factory) as session:
        postpone(session, outbox_id, delay=PAUSED_DELAY, error="runtime paused")
    logger.info(
        "runtime paused; outbox row %s held back", outbox_id, extra={"outbox_id": outbox_id}
    )
    return True


def extend_lease(session: Session, outbox_id: str, lease: float) -> None:
    """Keep a row that is being worked on from being republished (the worker's heartbeat)."""
    session.execute(
        update(OutboxRow)
        .where(OutboxRow.id == outbox_id, OutboxRow.state == OutboxState.DISPATCHED.value)
        .values(lease_expires_at=utcnow() + dt.timedelta(seconds=lease))
        .execution_options(synchronize_session=False)
    )


def mark_dispatched(session: Session, outbox_id: str, *, lease: float, only_pending: bool) -> bool:
    """Record a publish: attempts + 1 and a fresh lease. The fast path passes ``only_pending`` so
    a row the consumer already finished (or the relay already republished) is left alone."""
    states = [OutboxState.PENDING.value]
    if not only_pending:
        states.append(OutboxState.DISPATCHED.value)
    now = utcnow()
    result = session.execute(
        update(OutboxRow)
        .where(OutboxRow.id == outbox_id, OutboxRow.state.in_(states))
        .values(
            state=OutboxState.DISPATCHED.value,
            attempts=OutboxRow.attempts + 1,
            dispatched_at=now,
            lease_expires_at=now + dt.timedelta(seconds=lease),
            **(CLOSE_DEAD_START if tracked(session) else {}),
        )
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def mark_all_dispatched(session: Session, outbox_ids: Sequence[str], *, lease: float) -> int:
    """Record the publish of a batch the relay claimed, in one UPDATE: as ``mark_dispatched``
    with ``only_pending=False`` for each row; answers how many rows it marked."""
    if not outbox_ids:
        return 0
    now = utcnow()
    result = session.execute(
        update(OutboxRow)
        .where(
            OutboxRow.id.in_(list(outbox_ids)),
            OutboxRow.state.in_([OutboxState.PENDING.value, OutboxState.DISPATCHED.value]),
        )
        .values(
            state=OutboxState.DISPATCHED.value,
            attempts=OutboxRow.attempts + 1,
            dispatched_at=now,
            lease_expires_at=now + dt.timedelta(seconds=lease),
            **(CLOSE_DEAD_START if tracked(session) else {}),
        )
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# The relay ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RelayReport:
    """What one relay run did (``skipped``: another relay holds the lock or the lease)."""

    published: int = 0
    dead: int = 0
    failed: int = 0
    skipped: bool = False
    epoch: int | None = None
    paused: bool = False


def relay_owner() -> str:
    """A name unique to this relay run (host, process, random), stored on the lease row."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def claim_due(session: Session, *, limit: int, now: dt.datetime | None = None) -> list[OutboxRow]:
    """Rows due for publishing: pending and available, or dispatched with an expired lease.

    PostgreSQL skips rows another transaction holds; SQLite ignores FOR UPDATE, and the caller's
    ``BEGIN IMMEDIATE`` transaction serializes claims instead.
    """
    now = now or utcnow()
    stmt = (
        select(OutboxRow)
        .where(
            or_(
                and_(
                    OutboxRow.state == OutboxState.PENDING.value,
                    OutboxRow.available_at <= now,
                ),
                and_(
                    OutboxRow.state == OutboxState.DISPATCHED.value,
                    OutboxRow.lease_expires_at <= now,
                ),
            )
        )
        .order_by(OutboxRow.available_at, OutboxRow.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list(session.scalars(stmt))


def relay_batch(
    session: Session,
    settings: Settings,
    sender: Sender,
    *,
    owner: str,
    epoch: int,
    observer: Observer | None = None,
) -> RelayReport:
    """One fenced batch, in the caller's transaction: fence, claim the batch (one statement), send
    its rows, mark the sent ones dispatched (one statement).

    Raises ``LockLost`` (before publishing anything) when the lease was taken over.
    """
    if not fence(session, RELAY_LEASE, owner, epoch, settings.lock_ttl):
        raise LockLost("the outbox relay lease was taken over", owner=owner, epoch=epoch)
    if is_paused(session):
        # Checked per batch, inside the fenced transaction: a pause stops the next batch.
        return RelayReport(epoch=epoch, paused=True)
    rows = claim_due(session, limit=settings.outbox_batch_size)
    if observer is not None:
        observer(epoch, rows)
    dead = failed = 0
    sent: list[str] = []
    for row in rows:
        if row.attempts >= settings.max_outbox_delivery_attempts:
            bury(session, row)
            dead += 1
            continue
        try:
            sender.send(row)
        except Exception as exc:  # the transport is down: keep the rest for the next run
            error = redact_text(str(exc))
            logger.warning(
                "publishing outbox row %s failed: %s",
                row.id,
                error,
                extra={"outbox_id": row.id, "request_id": row.request_id},
            )
            row.last_error = f"publish failed: {error}"
            failed += 1
            break
        sent.append(row.id)
    # The rows sent are marked together, in the fenced transaction that claimed them.
    mark_all_dispatched(session, sent, lease=settings.outbox_lease)
    return RelayReport(published=len(sent), dead=dead, failed=failed, epoch=epoch)


def relay(
    settings: Settings,
    factory: sessionmaker[Session],
    sender: Sender,
    locks: LockProvider,
    *,
    max_batches: int = MAX_BATCHES_PER_RUN,
    observer: Observer | None = None,
) -> RelayReport:
    """One relay run (the beat job): take the lock and the lease, publish due rows in batches.

    ``observer(epoch, rows)`` is told about each fenced claim before it is published (metrics,
    and the chaos tests' proof that epochs only grow).
    """
    lock = locks.acquire(RELAY_LOCK, ttl=settings.lock_ttl, timeout=0)
    if lock is None:
        return RelayReport(skipped=True)
    owner = relay_owner()
    total = RelayReport()
    try:
        with transaction(factory) as session:
            epoch = acquire_lease(session, RELAY_LEASE, owner, settings.lock_ttl)
        if epoch is None:
            return RelayReport(skipped=True)
        for _ in range(max_batches):
            with transaction(factory) as session:
                report = relay_batch(
                    session, settings, sender, owner=owner, epoch=epoch, observer=observer
                )
            total = RelayReport(
                published=total.published + report.published,
                dead=total.dead + report.dead,
                failed=total.failed + report.failed,
                epoch=epoch,
                paused=report.paused,
            )
            if (
                report.paused
                or report.failed
                or report.published + report.dead < settings.outbox_batch_size
            ):
                break
            _extend(lock, settings.lock_ttl)
        with transaction(factory) as session:
            release_lease(session, RELAY_LEASE, owner)
    except LockLost:
        logger.warning("outbox relay %s lost its lease; stopped without publishing", owner)
        return dataclasses.replace(total, skipped=True)
    finally:
        _release(lock)
    if total.published or total.dead:
        logger.info("outbox relay published %d rows, dead-lettered %d", total.published, total.dead)
    return total


def bury(session: Session, row: OutboxRow) -> None:
    """Give up on a row that was published too often without finishing: a dead letter."""
    row.state = OutboxState.DEAD.value
    row.finished_at = utcnow()
    row.lease_expires_at = None
    if tracked(session):
        row.started_at = None
    dead_letters.record(
        session,
        dead_letter_id=ids.dead_letter_id_for("outbox", row.id),
        kind="outbox",
        reason="Undeliverable",
        source_id=row.id,
        request_id=row.request_id,
        instance_id=row.instance_id,
        name=row.task_name,
        error=row.last_error or f"not finished after {row.attempts} deliveries",
        attempts=row.attempts,
        data={"taskName": row.task_name, "queue": row.queue, "args": row.args},
    )
    logger.error(
        "outbox row %s (%s) dead-lettered after %d deliveries",
        row.id,
        row.task_name,
        row.attempts,
        extra={"outbox_id": row.id, "request_id": row.request_id},
    )


def purge_orphans(session: Session, *, retention: float, now: dt.datetime | None = None) -> int:
    """Delete finished rows (done or dead) older than ``retention`` seconds."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=retention)
    result = session.execute(
        delete(OutboxRow)
        .where(
            OutboxRow.state.in_([OutboxState.DONE.value, OutboxState.DEAD.value]),
            OutboxRow.finished_at < cutoff,
        )
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def pending_ids(session: Session, outbox_ids: Sequence[str]) -> list[OutboxRow]:
    """The rows among ``outbox_ids`` still waiting for their first publish and already due."""
    if not outbox_ids:
        return []
    stmt = select(OutboxRow).where(
        OutboxRow.id.in_(list(outbox_ids)),
        OutboxRow.state == OutboxState.PENDING.value,
        OutboxRow.available_at <= utcnow(),
    )
    return list(session.scalars(stmt))


def _extend(lock: Lock, ttl: float) -> None:
    try:
        lock.extend(ttl)
    except Exception:  # a lock that cannot be extended is still fenced by the SQL lease
        logger.debug("could not extend the outbox relay lock", exc_info=True)


def _release(lock: Lock) -> None:
    try:
        lock.release()
    except Exception:  # expired and taken over: the new holder's lock is not ours to remove
        logger.debug("outbox relay lock was already gone at release", exc_info=True)
