"""Reading requests: one request as its client sees it, pages of them behind an opaque cursor,
and a request's audit history. Functions take the caller's session and never write.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from broker.errors import BadRequest, Forbidden, NotFound
from broker.store.models import Request, RequestEvent, WorkflowInstance


def get_owned(session: Session, request_id: str, client_id: str | None) -> Request:
    """The request, checked to belong to ``client_id`` (None: any owner, for operators)."""
    record = session.get(Request, request_id)
    if record is None:
        raise NotFound(f"Request '{request_id}' not found")
    if client_id is not None and record.client_key != client_id.lower():
        raise Forbidden(f"Request '{request_id}' belongs to another client")
    return record


def request_view(session: Session, record: Request) -> dict[str, Any]:
    """The JSON a client sees for one request (``GET /requests/{id}``)."""
    instance = None
    if record.instance_id:
        instance = session.get(WorkflowInstance, record.instance_id)
    return {
        "correlationId": record.id,
        "clientId": record.client_id,
        "requestType": record.request_type,
        "keys": record.keys,
        "status": record.status,
        "result": record.result,
        "errorDetail": record.error_detail,
        "submittedAt": iso(record.submitted_at),
        "updatedAt": iso(record.updated_at),
        "workflow": {
            "definitionId": record.definition_id,
            "version": record.definition_version,
            "instanceId": record.instance_id,
            "subStatus": instance.sub_status if instance is not None else None,
            # What Correlate and SetName made of the instance (the request's id never changes).
            "instanceName": instance.name if instance is not None else None,
            "instanceCorrelationId": instance.correlation_id if instance is not None else None,
        },
    }


def new_request_view(values: Mapping[str, Any]) -> dict[str, Any]:
    """``request_view`` of a request being inserted with these column values (no instance yet),
    built without a mapped object."""
    return {
        "correlationId": values["id"],
        "clientId": values["client_id"],
        "requestType": values["request_type"],
        "keys": values["keys"],
        "status": values["status"],
        "result": None,
        "errorDetail": None,
        "submittedAt": iso(values["submitted_at"]),
        "updatedAt": iso(values["updated_at"]),
        "workflow": {
            "definitionId": values["definition_id"],
            "version": values["definition_version"],
            "instanceId": None,
            "subStatus": None,
            "instanceName": None,
            "instanceCorrelationId": None,
        },
    }


@dataclasses.dataclass(frozen=True)
class ListQuery:
    """Filters of ``GET /requests``; ``cursor`` is the opaque value of an earlier ``next``."""

    status: str | None = None
    request_type: str | None = None
    since: dt.datetime | None = None
    limit: int = 50
    cursor: str | None = None


def list_requests(
    session: Session, client_id: str | None, query: ListQuery
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the client's requests (None: every client's, for operators), newest first,
    and the cursor of the next page."""
    stmt = select(Request)
    if client_id is not None:
        stmt = stmt.where(Request.client_key == client_id.lower())
    if query.status is not None:
        stmt = stmt.where(Request.status == query.status)
    if query.request_type is not None:
        stmt = stmt.where(Request.request_type_key == query.request_type.lower())
    if query.since is not None:
        stmt = stmt.where(Request.submitted_at >= query.since)
    if query.cursor is not None:
        at, last_id = decode_cursor(query.cursor)
        stmt = stmt.where(
            or_(Request.submitted_at < at, and_(Request.submitted_at == at, Request.id < last_id))
        )
    stmt = stmt.order_by(Request.submitted_at.desc(), Request.id.desc()).limit(query.limit + 1)
    rows = list(session.scalars(stmt))
    page, more = rows[: query.limit], len(rows) > query.limit
    cursor = encode_cursor(page[-1].submitted_at, page[-1].id) if more and page else None
    return [request_view(session, r) for r in page], cursor


def list_events(session: Session, request_id: str, client_id: str | None) -> list[dict[str, Any]]:
    """The audit history of one request, oldest first."""
    get_owned(session, request_id, client_id)
    events = session.scalars(
        select(RequestEvent).where(RequestEvent.request_id == request_id).order_by(RequestEvent.id)
    )
    return [
        {
            "timestamp": iso(e.timestamp),
            "eventType": e.event_type,
            "source": e.source,
            "message": e.message,
            "properties": e.properties or {},
        }
        for e in events
    ]


def encode_cursor(at: dt.datetime, request_id: str) -> str:
    raw = json.dumps([at.isoformat(), request_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, str]:
    """The (submitted_at, id) position a cursor names; ``BadRequest`` when it is not ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at_text, request_id = json.loads(raw)
        at = dt.datetime.fromisoformat(at_text)
        if at.tzinfo is None or not isinstance(request_id, str):
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("Invalid cursor", field="cursor") from exc
    return at, request_id


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
