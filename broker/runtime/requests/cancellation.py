"""Cancelling a request or workflow instances: the request's status change goes through
``statuses``; its instances and all their descendants are finished as Cancelled, and their
bookmarks, unfired timers and open outbox rows go with them. Functions never commit.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.orm import Session

from broker.errors import Conflict
from broker.runtime.requests import transitions as statuses
from broker.runtime.requests.queries import get_owned
from broker.store.models import (
    Bookmark,
    InstanceStatus,
    InstanceSubStatus,
    OutboxRow,
    OutboxState,
    Request,
    Timer,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)


def cancel(session: Session, request_id: str, *, client_id: str | None, source: str) -> Request:
    """Mark a request Cancelled with its workflow instances; ``Conflict`` when already terminal."""
    record = get_owned(session, request_id, client_id)
    now = utcnow()
    if not statuses.cancel(session, request_id, source=source, now=now):
        session.refresh(record)
        raise Conflict(f"Request '{request_id}' is already {record.status}", status=record.status)
    roots = session.scalars(
        select(WorkflowInstance.id).where(WorkflowInstance.request_id == request_id)
    ).all()
    cancel_instances(session, roots)
    # A start that was not taken yet (the row names the request, not an instance) is closed too.
    _close_open_work(session, OutboxRow.request_id == request_id, now)
    session.refresh(record)
    logger.info("cancelled request %s", request_id, extra={"request_id": request_id})
    return record


def cancel_instances(session: Session, instance_ids: Iterable[str]) -> list[str]:
    """Mark running instances and all their descendants Cancelled; answers the ids changed.

    Their bookmarks and unfired timers go too, so no stimulus can resume a cancelled instance, and
    their open outbox rows are closed, so a worker that receives one finds it finished and neither
    starts a child nor resumes or retries the instance. A step already running when the cancel
    commits cannot save: its save is fenced on ``status = Running``.
    """
    now = utcnow()
    seen: set[str] = set()
    frontier = [i for i in instance_ids if i]
    while frontier:
        seen.update(frontier)
        children = session.scalars(
            select(WorkflowInstance.id).where(WorkflowInstance.parent_id.in_(frontier))
        ).all()
        frontier = [c for c in children if c not in seen]
    if not seen:
        return []
    ids = sorted(seen)
    changed = session.scalars(
        update(WorkflowInstance)
        .where(
            WorkflowInstance.id.in_(ids), WorkflowInstance.status != InstanceStatus.FINISHED.value
        )
        .values(
            status=InstanceStatus.FINISHED.value,
            sub_status=InstanceSubStatus.CANCELLED.value,
            updated_at=now,
            finished_at=now,
        )
        .returning(WorkflowInstance.id)
        .execution_options(synchronize_session=False)
    ).all()
    if changed:
        session.execute(
            delete(Timer).where(Timer.instance_id.in_(changed), Timer.fired_at.is_(None))
        )
        session.execute(delete(Bookmark).where(Bookmark.instance_id.in_(changed)))
        _close_open_work(session, OutboxRow.instance_id.in_(changed), now)
    return list(changed)


def _close_open_work(session: Session, which: ColumnElement[bool], now: dt.datetime) -> None:
    session.execute(
        update(OutboxRow)
        .where(
            which, OutboxRow.state.in_([OutboxState.PENDING.value, OutboxState.DISPATCHED.value])
        )
        .values(
            state=OutboxState.DONE.value,
            finished_at=now,
            lease_expires_at=None,
            last_error="cancelled",
        )
        .execution_options(synchronize_session=False)
    )
