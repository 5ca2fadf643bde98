"""HttpEndpoint bookmarks: a call to ``/workflows/{path}`` that no trigger serves resumes, through
the bookmark queue, the instance waiting for it (docs/design.md, "HTTP endpoints in the middle of
a workflow")."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.errors import Conflict
from broker.registry.triggers import HTTP_ENDPOINT
from broker.runtime.bookmarks.queue import dispatch_now, enqueue_stimulus
from broker.settings import Settings
from broker.store.models import (
    Bookmark,
    InstanceStatus,
    OutboxRow,
    OutboxState,
    WorkflowInstance,
)

#: Elsa's answer when a call matches more than one waiting instance
AMBIGUOUS = "The call is ambiguous and matches multiple workflows."


@dataclasses.dataclass(frozen=True)
class Resumed:
    """A call queued to resume one instance: its queue item (the HTTP request the workflow
    answers), the resume row, and whose instance it is."""

    item_id: str
    outbox_ids: tuple[str, ...]
    instance_id: str
    request_id: str | None


def endpoint_stimulus(method: str, path: str) -> dict[str, str]:
    """The payload an HttpEndpoint bookmark waiting for ``method`` ``path`` holds."""
    return {"path": path.strip().strip("/").lower(), "method": method.strip().lower()}


def waiting_endpoints(
    session: Session,
    *,
    client_key: str,
    method: str,
    path: str,
    instance_id: str | None = None,
    correlation_id: str | None = None,
) -> list[Bookmark]:
    """The HttpEndpoint bookmarks of this client's running instances waiting for the call,
    narrowed to one instance or correlation id when the caller names one (Elsa's
    ``workflowInstanceId`` and ``correlationId`` selectors)."""
    wanted = endpoint_stimulus(method, path)
    stmt = (
        select(Bookmark)
        .join(WorkflowInstance, WorkflowInstance.id == Bookmark.instance_id)
        .where(
            Bookmark.name == HTTP_ENDPOINT,
            Bookmark.client_key == client_key,
            WorkflowInstance.status == InstanceStatus.RUNNING.value,
        )
    )
    if instance_id is not None:
        stmt = stmt.where(Bookmark.instance_id == instance_id)
    if correlation_id is not None:
        stmt = stmt.where(Bookmark.correlation_id == correlation_id)
    found = session.scalars(stmt.order_by(Bookmark.created_at, Bookmark.id))
    return [b for b in found if dict(b.payload or {}) == wanted]


def resume_endpoint(
    session: Session,
    settings: Settings,
    *,
    item_id: str,
    client_key: str,
    method: str,
    path: str,
    request: Mapping[str, Any],
    instance_id: str | None = None,
    correlation_id: str | None = None,
) -> Resumed | None:
    """Queue the call as the stimulus of the one HttpEndpoint waiting for it, with its resume
    row, in the caller's transaction (never commits); None when nothing waits, ``Conflict`` when
    instances of more than one workflow instance wait."""
    bookmarks = waiting_endpoints(
        session,
        client_key=client_key,
        method=method,
        path=path,
        instance_id=instance_id,
        correlation_id=correlation_id,
    )
    if not bookmarks:
        return None
    instances = sorted({b.instance_id for b in bookmarks})
    if len(instances) > 1:
        raise Conflict(
            AMBIGUOUS,
            field="workflowInstanceId",
            workflows=[{"workflowInstanceId": i} for i in instances],
        )
    bookmark = bookmarks[0]
    item = enqueue_stimulus(
        session,
        item_id=item_id,
        name=HTTP_ENDPOINT,
        payload={**request, "requestId": item_id},
        instance_id=bookmark.instance_id,
        bookmark_id=bookmark.id,
        correlation_id=bookmark.correlation_id,
        client_key=client_key,
    )
    rows = dispatch_now(session, settings, item)
    instance = session.get(WorkflowInstance, bookmark.instance_id)
    return Resumed(
        item_id=item_id,
        outbox_ids=tuple(rows),
        instance_id=bookmark.instance_id,
        request_id=instance.request_id if instance is not None else None,
    )


def resumed_response(session: Session, resumed: Resumed) -> tuple[dict[str, Any] | None, bool]:
    """(the response the resumed workflow wrote for this call, or None; whether to stop waiting:
    the resumed step is saved, or the instance is no longer running)."""
    # The row first: the step marks it done in the transaction that saves the response.
    done = session.scalar(select(OutboxRow.state).where(OutboxRow.id.in_(resumed.outbox_ids))) in (
        OutboxState.DONE.value,
        OutboxState.DEAD.value,
    )
    found = session.execute(
        select(WorkflowInstance.state, WorkflowInstance.status).where(
            WorkflowInstance.id == resumed.instance_id
        )
    ).first()
    if found is None:
        return None, True
    state, status = found
    response = (state or {}).get("httpResponse")
    if isinstance(response, dict) and response.get("requestId") == resumed.item_id:
        return response, True
    return None, done or status != InstanceStatus.RUNNING.value
