"""Request status transitions, each with its audit event, guarded in the UPDATE itself.

``Queued -> Processing -> Completed | Faulted | Cancelled``. Every UPDATE carries the state it
moves from in its WHERE clause, so a redelivery, a late callback or a duplicate can never move a
terminal request (the change is ignored and logged); the one way out of Faulted is an operator's
replay (``deadletters.replay``). Functions take a session and never commit.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from broker.store.models import InstanceSubStatus, Request, RequestEvent, RequestStatus, utcnow

logger = logging.getLogger(__name__)

TERMINAL = tuple(s.value for s in RequestStatus if s.terminal)


def finish_request(
    session: Session,
    request_id: str,
    *,
    sub_status: str,
    output: Any,
    error: str | None,
    now: dt.datetime | None = None,
    source: str = "worker",
) -> str | None:
    """Move a request to its terminal status (guarded); answers the status set, or None when the
    request was already terminal (the change is then ignored and logged)."""
    now = now or utcnow()
    if sub_status == InstanceSubStatus.FINISHED.value:
        status, event, values = RequestStatus.COMPLETED, "RequestCompleted", {"result": output}
    elif sub_status == InstanceSubStatus.CANCELLED.value:
        status, event, values = RequestStatus.CANCELLED, "RequestCancelled", {}
    else:
        status, event = RequestStatus.FAULTED, "RequestFaulted"
        values = {"error_detail": error or "Faulted"}
    changed = session.execute(
        update(Request)
        .where(Request.id == request_id, Request.status.not_in(TERMINAL))
        .values(status=status.value, updated_at=now, completed_at=now, **values)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not changed:
        logger.warning(
            "request %s is already terminal; %s ignored",
            request_id,
            event,
            extra={"request_id": request_id},
        )
        return None
    session.add(
        RequestEvent(
            request_id=request_id,
            timestamp=now,
            event_type=event,
            source=source,
            message=error if status is RequestStatus.FAULTED else None,
            properties={"status": status.value},
        )
    )
    return status.value


def start_processing(
    session: Session,
    request_id: str,
    instance_id: str | None,
    *,
    message: str | None = None,
    now: dt.datetime | None = None,
) -> bool:
    """Queued -> Processing with a RequestProcessing event; False when it was not Queued.
    ``now``: when processing started, if that was before this write (a deferred opening)."""
    now = now or utcnow()
    changed = session.execute(
        update(Request)
        .where(Request.id == request_id, Request.status == RequestStatus.QUEUED.value)
        .values(status=RequestStatus.PROCESSING.value, instance_id=instance_id, updated_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if changed:
        session.add(
            RequestEvent(
                request_id=request_id,
                timestamp=now,
                event_type="RequestProcessing",
                source="worker",
                message=message,
                properties={"instanceId": instance_id} if instance_id else None,
            )
        )
    return bool(changed)
