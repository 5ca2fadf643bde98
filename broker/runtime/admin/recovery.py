"""Recovery and housekeeping jobs: stalled instances, forgotten requests, purges
(docs/design.md, section 8)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from broker.names import DEFAULT_QUEUE, RESUME_INSTANCE, RUN_CHILD, RUN_REQUEST
from broker.runtime import ids
from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Recovery
from broker.runtime.webhooks import delivery as webhook_delivery
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import (
    ActivityExecution,
    BookmarkQueueItem,
    DeadLetter,
    InstanceStatus,
    InstanceSubStatus,
    OutboxRow,
    OutboxState,
    Request,
    RequestStatus,
    Timer,
    WorkflowDefinition,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)

RECOVERY_LOCK = "recovery"
PURGE_LOCK = "purge"
BATCH = 200
OPEN = (OutboxState.PENDING.value, OutboxState.DISPATCHED.value)


def run_recovery(rt: Recovery) -> list[str]:
    """One run of the recovery job (beat): takes its lock, re-dispatches what stalled
    (``redispatch_stalled``) and publishes the rows; answers the outbox rows written."""
    lock = rt.locks.acquire(RECOVERY_LOCK, ttl=rt.settings.lock_ttl, timeout=0)
    if lock is None:
        return []
    try:
        with transaction(rt.factory) as session:
            written = redispatch_stalled(session, rt.settings)
            publish = outbox.publishable(session, written)
    finally:
        lock.release()
    if publish:
        rt.publisher.publish(publish)
    return written


def redispatch_stalled(
    session: Session, settings: Settings, *, now: dt.datetime | None = None
) -> list[str]:
    """Give a fresh outbox row to each stalled instance (running, silent for
    ``inactivity_threshold``, no open row) and each request still Queued without one; answers the
    rows written. Never commits."""
    now = now or utcnow()
    cutoff = now - dt.timedelta(seconds=settings.inactivity_threshold)
    written: list[str] = []
    open_for_instance = select(OutboxRow.id).where(
        OutboxRow.instance_id == WorkflowInstance.id, OutboxRow.state.in_(OPEN)
    )
    stalled = session.scalars(
        select(WorkflowInstance)
        .where(
            WorkflowInstance.status == InstanceStatus.RUNNING.value,
            WorkflowInstance.sub_status.in_(
                [InstanceSubStatus.EXECUTING.value, InstanceSubStatus.PENDING.value]
            ),
            func.coalesce(WorkflowInstance.heartbeat_at, WorkflowInstance.updated_at) < cutoff,
            ~open_for_instance.exists(),
        )
        .limit(BATCH)
    ).all()
    for instance in stalled:
        queue = _queue_of(session, instance.definition_version_id)
        args: dict[str, Any] = {"instance_id": instance.id}
        if instance.checkpoint == 0 and instance.parent_id is not None:
            task = RUN_CHILD  # a dispatched child that never started
        elif instance.checkpoint == 0 and instance.request_id is not None:
            task, args = RUN_REQUEST, {"request_id": instance.request_id}  # a first step lost
        elif (instance.state or {}).get("retry"):
            last = session.scalar(
                select(func.max(ActivityExecution.attempt)).where(
                    ActivityExecution.instance_id == instance.id
                )
            )
            task = RESUME_INSTANCE  # a scheduled retry whose row is gone
            args["retry"] = int(last or 1) + 1
        else:
            logger.warning(
                "instance %s is stalled with nothing to redo",
                instance.id,
                extra={"instance_id": instance.id},
            )
            continue
        row = outbox.enqueue(
            session,
            # One row per stall: the same checkpoint may stall again after a recovery.
            outbox_id=ids.outbox_id_for(
                "recover", instance.id, str(instance.checkpoint), _iso(instance.heartbeat_at)
            ),
            task_name=task,
            queue=queue,
            args=args,
            request_id=instance.request_id,
            instance_id=instance.id,
        )
        if row.state == OutboxState.PENDING.value:
            written.append(row.id)
            logger.warning(
                "instance %s stalled; re-dispatched",
                instance.id,
                extra={"instance_id": instance.id, "request_id": instance.request_id},
            )
    forgotten = session.scalars(
        select(Request)
        .where(
            Request.status == RequestStatus.QUEUED.value,
            Request.updated_at < cutoff,
            ~select(OutboxRow.id)
            .where(
                OutboxRow.request_id == Request.id,
                OutboxRow.state.in_([*OPEN, OutboxState.DEAD.value]),
            )
            .exists(),
        )
        .limit(BATCH)
    ).all()
    for request in forgotten:
        row = outbox.enqueue(
            session,
            outbox_id=ids.outbox_id_for(
                "recover-request", request.id, request.updated_at.isoformat()
            ),
            task_name=RUN_REQUEST,
            queue=_queue_of(session, request.definition_version_id),
            args={"request_id": request.id},
            request_id=request.id,
        )
        written.append(row.id)
        logger.warning(
            "request %s was queued without work; re-dispatched",
            request.id,
            extra={"request_id": request.id},
        )
    return written


def _iso(value: dt.datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def _queue_of(session: Session, version_id: str | None) -> str:
    definition = session.get(WorkflowDefinition, version_id) if version_id else None
    return (definition.queue if definition is not None else None) or DEFAULT_QUEUE


# Purge --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PurgeReport:
    outbox_rows: int = 0
    dead_letters: int = 0
    queue_items: int = 0
    states: int = 0
    webhook_deliveries: int = 0
    timers: int = 0
    files: int = 0


def purge(rt: Recovery) -> PurgeReport:
    """One run of the purge job (beat): old rows, then stored files past their retention."""
    lock = rt.locks.acquire(PURGE_LOCK, ttl=rt.settings.lock_ttl, timeout=0)
    if lock is None:
        return PurgeReport()
    try:
        with transaction(rt.factory) as session:
            report = purge_old(session, rt.settings)
        cutoff = utcnow() - dt.timedelta(seconds=rt.settings.file_retention)
        return dataclasses.replace(report, files=rt.files.purge(cutoff))
    finally:
        lock.release()


def purge_old(
    session: Session, settings: Settings, *, now: dt.datetime | None = None
) -> PurgeReport:
    now = now or utcnow()
    rows = outbox.purge_orphans(session, retention=settings.orphaned_outbox_retention, now=now)
    # A fired timer only guards against firing twice while its resume row is open; it goes with
    # the finished outbox rows (without this the table grew by one row per timer, for ever).
    timers = session.execute(
        delete(Timer)
        .where(
            Timer.fired_at.is_not(None),
            Timer.fired_at < now - dt.timedelta(seconds=settings.orphaned_outbox_retention),
        )
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    letters = session.execute(
        delete(DeadLetter)
        .where(DeadLetter.created_at < now - dt.timedelta(seconds=settings.dead_letter_ttl))
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    items = 0
    for item in session.scalars(
        select(BookmarkQueueItem).where(BookmarkQueueItem.delivery_attempts > 0).limit(BATCH)
    ):
        dispatched = (item.options or {}).get("dispatched") or []
        if not dispatched:
            continue
        still_open = session.scalar(
            select(func.count())
            .select_from(OutboxRow)
            .where(OutboxRow.id.in_(dispatched), OutboxRow.state.in_(OPEN))
        )
        if not still_open:
            session.delete(item)
            items += 1
    states = session.execute(
        update(WorkflowInstance)
        .where(
            WorkflowInstance.status == InstanceStatus.FINISHED.value,
            # A faulted instance keeps its state: replaying its dead letter resumes from it.
            WorkflowInstance.sub_status != InstanceSubStatus.FAULTED.value,
            WorkflowInstance.finished_at < now - dt.timedelta(seconds=settings.result_retention),
            WorkflowInstance.state.is_not(None),
        )
        .values(state=None)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    deliveries = webhook_delivery.purge_finished(
        session, retention=settings.dead_letter_ttl, now=now
    )
    report = PurgeReport(
        outbox_rows=rows,
        dead_letters=int(letters),
        queue_items=items,
        states=int(states),
        webhook_deliveries=deliveries,
        timers=int(timers),
    )
    if any(dataclasses.astuple(report)):
        logger.info("purge: %s", report)
    return report
