"""Request status transitions, each with its audit event, guarded in the UPDATE itself.

``Queued -> Processing -> Completed | Faulted | Cancelled``. Every UPDATE carries the state it
moves from in its WHERE clause, so a redelivery, a late callback or a duplicate can never move a
terminal request (the change is ignored and logged); the one way out of Faulted is an operator's
replay (``dead_letters.replay``). Each change also writes its webhook deliveries
(``webhooks.record_status_change``) in the same transaction. Functions take a session and never
commit.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import and_, bindparam, update
from sqlalchemy.orm import Session

from broker.redaction import redact_optional
from broker.runtime import webhooks
from broker.store.models import (
    InstanceSubStatus,
    Request,
    RequestEvent,
    RequestStatus,
    table_of,
    utcnow,
)

logger = logging.getLogger(__name__)

TERMINAL = tuple(s.value for s in RequestStatus if s.terminal)

_REQUESTS = table_of(Request)
# Built once (see ``table_of``): every request runs these. Each moves a request only from the
# states it may leave, so a redelivery or a late callback changes nothing.
_NOT_TERMINAL = and_(*(_REQUESTS.c.status != status for status in TERMINAL))
_FINISH = {
    column: update(_REQUESTS)
    .where(_REQUESTS.c.id == bindparam("request_id"), _NOT_TERMINAL)
    .values(
        status=bindparam("status"),
        updated_at=bindparam("now"),
        completed_at=bindparam("now"),
        **({column: bindparam(column)} if column else {}),
    )
    for column in ("result", "error_detail", None)
}
_START = (
    update(_REQUESTS)
    .where(
        _REQUESTS.c.id == bindparam("request_id"),
        _REQUESTS.c.status == RequestStatus.QUEUED.value,
    )
    .values(
        status=RequestStatus.PROCESSING.value,
        instance_id=bindparam("instance_id"),
        updated_at=bindparam("now"),
    )
)


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
    error = redact_optional(error)  # errorDetail and the audit event are client-readable
    column: str | None
    if sub_status == InstanceSubStatus.FINISHED.value:
        status, event, column, value = RequestStatus.COMPLETED, "RequestCompleted", "result", output
    elif sub_status == InstanceSubStatus.CANCELLED.value:
        status, event, column, value = RequestStatus.CANCELLED, "RequestCancelled", None, None
    else:
        status, event = RequestStatus.FAULTED, "RequestFaulted"
        column, value = "error_detail", error or "Faulted"
    params = {"request_id": request_id, "status": status.value, "now": now}
    if column is not None:
        params[column] = value
    changed = session.execute(_FINISH[column], params).rowcount  # type: ignore[attr-defined]
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
    webhooks.record_status_change(session, request_id, status.value, now=now)
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
        _START, {"request_id": request_id, "instance_id": instance_id, "now": now}
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
        webhooks.record_status_change(session, request_id, RequestStatus.PROCESSING.value, now=now)
    return bool(changed)
