"""Request status transitions: the allowed moves as data, and the one function that makes them
(docs/design.md, section 4)."""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any, Final

from sqlalchemy import Update, bindparam, update
from sqlalchemy.orm import Session

from broker.redaction import redact, redact_optional
from broker.runtime import webhooks
from broker.store import audit
from broker.store.models import (
    InstanceSubStatus,
    Request,
    RequestEvent,
    RequestStatus,
    table_of,
    utcnow,
)
from broker.store.rows import insert_rows

logger = logging.getLogger(__name__)

QUEUED, PROCESSING = RequestStatus.QUEUED, RequestStatus.PROCESSING
COMPLETED, FAULTED, CANCELLED = (
    RequestStatus.COMPLETED,
    RequestStatus.FAULTED,
    RequestStatus.CANCELLED,
)

#: the status a new request is inserted with, and the audit event of its submission
INITIAL: Final = QUEUED
SUBMITTED_EVENT: Final = "RequestSubmitted"

_FINISHES = {
    COMPLETED: "RequestCompleted",
    FAULTED: "RequestFaulted",
    CANCELLED: "RequestCancelled",
}

#: each status -> the statuses it may move to, with the audit event of that move. A terminal
#: status moves nowhere, except Faulted, which an operator's replay reopens.
TRANSITIONS: Final[Mapping[RequestStatus, Mapping[RequestStatus, str]]] = MappingProxyType(
    {
        QUEUED: MappingProxyType({PROCESSING: "RequestProcessing", **_FINISHES}),
        PROCESSING: MappingProxyType(dict(_FINISHES)),
        COMPLETED: MappingProxyType({}),
        FAULTED: MappingProxyType({PROCESSING: "RequestReplayed"}),
        CANCELLED: MappingProxyType({}),
    }
)

TERMINAL: Final = tuple(s.value for s in RequestStatus if s.terminal)
#: the statuses a request may finish from
ACTIVE: Final = tuple(s for s in RequestStatus if not s.terminal)

_REQUESTS = table_of(Request)


def event_of(leaving: Collection[RequestStatus], to: RequestStatus) -> str:
    """The audit event of moving from any of ``leaving`` to ``to``; ``ValueError`` when one of
    them may not move there, or when they would record different events."""
    events = {TRANSITIONS[status].get(to) for status in leaving}
    if len(events) != 1 or None in events:
        raise ValueError(f"no single transition from {sorted(leaving)} to {to}")
    return str(events.pop())


@functools.cache
def _statement(
    leaving: tuple[RequestStatus, ...], to: RequestStatus, columns: tuple[str, ...]
) -> Update:
    # Built once per kind of move (see ``table_of``): every request runs these.
    event_of(leaving, to)
    status = _REQUESTS.c.status
    guard = (
        status == leaving[0].value if len(leaving) == 1 else status.in_([s.value for s in leaving])
    )
    return (
        update(_REQUESTS)
        .where(_REQUESTS.c.id == bindparam("request_id"), guard)
        .values(
            status=to.value,
            updated_at=bindparam("now"),
            **{column: bindparam(column) for column in columns},
        )
    )


def move(
    session: Session,
    request_id: str,
    to: RequestStatus,
    *,
    leaving: Collection[RequestStatus],
    source: str,
    values: Mapping[str, Any] | None = None,
    message: str | None = None,
    properties: dict[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> bool:
    """Move a request from one of ``leaving`` to ``to`` (guarded in the UPDATE), writing the
    ``values`` columns too, then its audit event and its webhook deliveries; False when the
    request was in none of ``leaving`` (nothing is written then).

    The one place a request's status changes after its insert, but for ``run_through``, which
    makes two moves in one UPDATE."""
    now = now or utcnow()
    values = values or {}
    statement = _statement(tuple(leaving), to, tuple(values))
    params = {"request_id": request_id, "now": now, **values}
    if not session.execute(statement, params).rowcount:  # type: ignore[attr-defined]
        return False
    add_events(
        session,
        [
            event_row(
                request_id,
                event_of(leaving, to),
                source=source,
                message=message,
                properties=properties,
                now=now,
            )
        ],
    )
    webhooks.record_status_change(session, request_id, to.value, now=now)
    return True


def note(
    session: Session,
    request_id: str,
    event_type: str,
    *,
    source: str,
    message: str | None = None,
    properties: dict[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Add one audit event of ``request_id`` (a status change's, or one that changes none)."""
    session.add(
        RequestEvent(
            request_id=request_id,
            timestamp=now or utcnow(),
            event_type=event_type,
            source=source,
            message=message,
            properties=properties,
        )
    )


_EVENTS = table_of(RequestEvent)


def event_row(
    request_id: str,
    event_type: str,
    *,
    source: str,
    message: str | None = None,
    properties: dict[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The row of one audit event, for ``add_events``: redacted as ``RequestEvent`` redacts."""
    return {
        "request_id": request_id,
        "timestamp": now or utcnow(),
        "event_type": event_type,
        "source": source,
        "message": redact_optional(message),
        "properties": None if properties is None else redact(properties),
    }


def add_events(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert audit events built by ``event_row`` with one multi-row statement (what ``note``
    does one ORM object at a time); they are logged once the transaction commits.

    Events ``note`` added and the session has not flushed yet go first, so the audit trail keeps
    the order the events were recorded in (its ids are its order)."""
    if rows:
        if any(isinstance(pending, RequestEvent) for pending in session.new):
            session.flush()
        insert_rows(session, _EVENTS, rows)
        audit.add_pending(session, rows)


def _finish_of(
    sub_status: str, output: Any, error: str | None, now: dt.datetime
) -> tuple[RequestStatus, dict[str, Any], str | None]:
    """The terminal status of a workflow's ``sub_status``, the columns it writes and the audit
    message (a fault's redacted error)."""
    error = redact_optional(error)  # errorDetail and the audit event are client-readable
    values: dict[str, Any] = {"completed_at": now}
    if sub_status == InstanceSubStatus.FINISHED.value:
        return COMPLETED, {**values, "result": output}, None
    if sub_status == InstanceSubStatus.CANCELLED.value:
        return CANCELLED, values, None
    values["error_detail"] = error or "Faulted"
    return FAULTED, values, error


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
    """Move a request to the terminal status of its workflow's ``sub_status`` (guarded); answers
    the status set, or None when the request was already terminal (the change is then ignored
    and logged)."""
    now = now or utcnow()
    status, values, message = _finish_of(sub_status, output, error, now)
    moved = move(
        session,
        request_id,
        status,
        leaving=ACTIVE,
        source=source,
        values=values,
        message=message,
        properties={"status": status.value},
        now=now,
    )
    if not moved:
        logger.warning(
            "request %s is already terminal; %s ignored",
            request_id,
            event_of(ACTIVE, status),
            extra={"request_id": request_id},
        )
        return None
    return status.value


def run_through(
    session: Session,
    request_id: str,
    instance_id: str,
    *,
    started: dt.datetime,
    sub_status: str,
    output: Any,
    error: str | None,
    now: dt.datetime,
) -> str | None:
    """Queued -> Processing -> terminal in one UPDATE, for a request whose first step finished
    before its start was written: both moves' audit events and webhook deliveries are written
    (the Processing ones at ``started``), as ``start_processing`` then ``finish_request`` would.
    Answers the status set, or None when the request was no longer Queued (nothing is written)."""
    status, values, message = _finish_of(sub_status, output, error, now)
    statement = _statement((QUEUED,), status, ("instance_id", *values))
    params = {"request_id": request_id, "now": now, "instance_id": instance_id, **values}
    if not session.execute(statement, params).rowcount:  # type: ignore[attr-defined]
        return None
    add_events(
        session,
        [
            event_row(
                request_id,
                event_of((QUEUED,), PROCESSING),
                source="worker",
                properties={"instanceId": instance_id},
                now=started,
            ),
            event_row(
                request_id,
                event_of((PROCESSING,), status),
                source="worker",
                message=message,
                properties={"status": status.value},
                now=now,
            ),
        ],
    )
    webhooks.record_status_change(session, request_id, PROCESSING.value, now=started)
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
    return move(
        session,
        request_id,
        PROCESSING,
        leaving=(QUEUED,),
        source="worker",
        values={"instance_id": instance_id},
        message=message,
        properties={"instanceId": instance_id} if instance_id else None,
        now=now,
    )


def cancel(session: Session, request_id: str, *, source: str, now: dt.datetime) -> bool:
    """Queued or Processing -> Cancelled, asked by a client or an operator through ``source``;
    False when the request was already terminal."""
    return move(
        session,
        request_id,
        CANCELLED,
        leaving=ACTIVE,
        source=source,
        values={"completed_at": now},
        message=f"Cancelled through the {source}",
        now=now,
    )


def reopen(
    session: Session,
    request_id: str,
    *,
    source: str,
    properties: dict[str, Any],
    now: dt.datetime,
) -> bool:
    """Faulted -> Processing for an operator's replay of its dead letter (the only way out of
    Faulted); False when the request is no longer Faulted."""
    return move(
        session,
        request_id,
        PROCESSING,
        leaving=(FAULTED,),
        source=source,
        values={"error_detail": None, "completed_at": None},
        message="Dead letter replayed; resuming at the failed activity",
        properties=properties,
        now=now,
    )
