"""The events a request status change writes: a delivery row per endpoint that wants the event (the
exact body, a ``webhook-id`` stable across retries) and the outbox row of its first attempt.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from typing import Any

from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.orm import Session

from broker.names import DELIVER_WEBHOOK, WEBHOOK_QUEUE
from broker.runtime import ids
from broker.store.models import (
    OutboxRow,
    OutboxState,
    Request,
    RequestStatus,
    WebhookDelivery,
    WebhookDeliveryState,
    WebhookEndpoint,
    table_of,
    utcnow,
)

logger = logging.getLogger(__name__)


EVENT_OF_STATUS = {
    RequestStatus.PROCESSING.value: "request.processing",
    RequestStatus.COMPLETED.value: "request.completed",
    RequestStatus.FAULTED.value: "request.faulted",
    RequestStatus.CANCELLED.value: "request.cancelled",
}


def endpoints_condition(endpoints: Any, requests: Any) -> Any:
    """Which endpoints hear of a request's status changes: its client's enabled ones, and a
    one-off one of this request (the join condition, for a caller that reads them with more)."""
    return and_(
        endpoints.c.client_key == requests.c.client_key,
        endpoints.c.enabled.is_(True),
        or_(endpoints.c.request_id.is_(None), endpoints.c.request_id == requests.c.id),
    )


_ENDPOINTS = table_of(WebhookEndpoint)
_REQUESTS = table_of(Request)
# Built once: every status change runs it. The client's enabled endpoints, its general ones and
# the one-off callback of this request.
_ENDPOINTS_OF_REQUEST = (
    select(_ENDPOINTS.c.id, _ENDPOINTS.c.events)
    .select_from(_ENDPOINTS.join(_REQUESTS, endpoints_condition(_ENDPOINTS, _REQUESTS)))
    .where(_REQUESTS.c.id == bindparam("request_id"))
)
_CACHE_KEY = "webhook_endpoints_of_request"
_REQUEST_DATA = select(
    _REQUESTS.c.request_type,
    _REQUESTS.c.status,
    _REQUESTS.c.result,
    _REQUESTS.c.error_detail,
    _REQUESTS.c["keys"],
).where(_REQUESTS.c.id == bindparam("request_id"))


def record_status_change(
    session: Session, request_id: str, status: str, *, now: dt.datetime | None = None
) -> list[str]:
    """Write the webhook deliveries of one committed-together status change; answers the ids
    of their first attempts' outbox rows (the relay publishes them).

    The one call every status transition makes, in the transaction that changes the status.
    """
    event = EVENT_OF_STATUS.get(status)
    if event is None:
        return []
    targets = [
        endpoint_id
        for endpoint_id, events in _endpoints_of(session, request_id)
        if event in (events or ())
    ]
    if not targets:
        return []
    row = session.execute(_REQUEST_DATA, {"request_id": request_id}).one()
    now = now or utcnow()
    body = event_body(
        event,
        now,
        correlation_id=request_id,
        request_type=row.request_type,
        status=status,
        result=row.result if status == RequestStatus.COMPLETED.value else None,
        error_detail=row.error_detail if status == RequestStatus.FAULTED.value else None,
        keys=row.keys,
    )
    message_id = f"msg_{uuid.uuid4().hex}"
    outbox_ids = []
    for endpoint_id in targets:
        delivery_id = ids.derive("webhook-delivery", endpoint_id, message_id)
        session.add(
            WebhookDelivery(
                id=delivery_id,
                message_id=message_id,
                endpoint_id=endpoint_id,
                request_id=request_id,
                event_type=event,
                body=body,
                state=WebhookDeliveryState.PENDING.value,
                attempts=0,
                next_attempt_at=now,
                created_at=now,
            )
        )
        outbox_ids.append(enqueue_attempt(session, delivery_id, 1, at=now))
    logger.info(
        "request %s: %s for %d webhook endpoint(s), webhook-id %s",
        request_id,
        event,
        len(targets),
        message_id,
        extra={"request_id": request_id},
    )
    return outbox_ids


def _cache_of(session: Session) -> dict[str, list[tuple[str, list[str]]]]:
    transaction = session.get_transaction()
    cached: tuple[Any, dict[str, list[tuple[str, list[str]]]]] | None
    cached = session.info.get(_CACHE_KEY)
    if cached is None or cached[0] is not transaction:
        cached = (transaction, {})
        session.info[_CACHE_KEY] = cached
    return cached[1]


def known_endpoints(
    session: Session, request_id: str, endpoints: list[tuple[str, list[str] | None]]
) -> None:
    """Tell this transaction the request's endpoints (read with other rows, under
    ``endpoints_condition``), so its status changes need not read them again."""
    _cache_of(session)[request_id] = [(str(id_), list(events or ())) for id_, events in endpoints]


def _endpoints_of(session: Session, request_id: str) -> list[tuple[str, list[str]]]:
    """The request's enabled endpoints and their events, read once per transaction (a short
    first step writes Processing and its end together: one read serves both)."""
    by_request = _cache_of(session)
    if request_id not in by_request:
        rows = session.execute(_ENDPOINTS_OF_REQUEST, {"request_id": request_id})
        by_request[request_id] = [(str(row[0]), list(row[1] or ())) for row in rows]
    return by_request[request_id]


def enqueue_attempt(session: Session, delivery_id: str, attempt: int, *, at: dt.datetime) -> str:
    """The outbox row of a delivery's ``attempt``-th attempt, due at ``at`` (its id derives from
    both, so a retried step writes it once). It names no request: cancelling the request closes
    the request's open work, not the webhook that tells of the cancel."""
    outbox_id = ids.outbox_id_for("webhook", delivery_id, str(attempt))
    session.add(
        OutboxRow(
            id=outbox_id,
            task_name=DELIVER_WEBHOOK,
            queue=WEBHOOK_QUEUE,
            args={"delivery_id": delivery_id},
            state=OutboxState.PENDING.value,
            attempts=0,
            available_at=at,
            created_at=at,
        )
    )
    return outbox_id


def event_body(
    event: str,
    at: dt.datetime,
    *,
    correlation_id: str,
    request_type: str,
    status: str,
    result: Any,
    error_detail: str | None,
    keys: Any,
) -> str:
    """The JSON body of an event, as sent (and signed) on every attempt."""
    document = {
        "type": event,
        "timestamp": at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "data": {
            "correlationId": correlation_id,
            "requestType": request_type,
            "status": status,
            "result": result,
            "errorDetail": error_detail,
            "keys": keys or {},
        },
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)
