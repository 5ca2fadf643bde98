"""Workflow instances as operators see them (``/admin`` and the console): list, view, journal,
cancel."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from broker.errors import Conflict, NotFound
from broker.runtime.admin.paging import newest_first_page
from broker.runtime.requests import cancellation
from broker.runtime.requests.queries import iso
from broker.store.models import ActivityExecution, InstanceStatus, WorkflowInstance

logger = logging.getLogger(__name__)


def view(instance: WorkflowInstance) -> dict[str, Any]:
    fault = instance.fault or None
    return {
        "id": instance.id,
        "definitionId": instance.definition_id,
        "definitionVersionId": instance.definition_version_id,
        "version": instance.version,
        "requestId": instance.request_id,
        "parentId": instance.parent_id,
        "correlationId": instance.correlation_id,
        "name": instance.name,
        "status": instance.status,
        "subStatus": instance.sub_status,
        "incidentCount": instance.incident_count,
        "fault": None
        if fault is None
        else {"message": fault.get("message"), "activityId": fault.get("activityId")},
        "createdAt": iso(instance.created_at),
        "updatedAt": iso(instance.updated_at),
        "finishedAt": iso(instance.finished_at),
    }


def list_page(
    session: Session, *, status: str | None, definition_id: str | None, page: int, page_size: int
) -> dict[str, Any]:
    where: list[ColumnElement[bool]] = []
    if status is not None:
        # One filter for both levels: Running/Finished or a sub-status such as Suspended.
        where.append(
            (func.lower(WorkflowInstance.status) == status.lower())
            | (func.lower(WorkflowInstance.sub_status) == status.lower())
        )
    if definition_id is not None:
        where.append(WorkflowInstance.definition_id == definition_id)
    return newest_first_page(session, WorkflowInstance, where, view, page=page, page_size=page_size)


def get(session: Session, instance_id: str) -> WorkflowInstance:
    instance = session.get(WorkflowInstance, instance_id)
    if instance is None:
        raise NotFound(f"Workflow instance '{instance_id}' not found")
    return instance


def journal(session: Session, instance_id: str) -> list[dict[str, Any]]:
    get(session, instance_id)
    rows = session.scalars(
        select(ActivityExecution)
        .where(ActivityExecution.instance_id == instance_id)
        .order_by(ActivityExecution.sequence)
    )
    return [
        {
            "sequence": r.sequence,
            "activityId": r.activity_id,
            "activityInstanceId": r.activity_instance_id,
            "activityType": r.activity_type,
            "activityName": r.activity_name,
            "eventName": r.event_name,
            "outcome": r.outcome,
            "attempt": r.attempt,
            "timestamp": iso(r.timestamp),
        }
        for r in rows
    ]


def cancel(session: Session, instance_id: str) -> WorkflowInstance:
    """Cancel an instance and its descendants; a root instance cancels its request too."""
    instance = get(session, instance_id)
    if instance.status == InstanceStatus.FINISHED:
        raise Conflict(
            f"Workflow instance '{instance_id}' is already finished",
            status=instance.status,
            subStatus=instance.sub_status,
        )
    if instance.parent_id is None and instance.request_id:
        try:
            cancellation.cancel(session, instance.request_id, client_id=None, source="admin")
        except Conflict:
            logger.warning(
                "instance %s runs for terminal request %s",
                instance_id,
                instance.request_id,
                extra={"instance_id": instance_id},
            )
    cancellation.cancel_instances(session, [instance_id])
    session.refresh(instance)
    logger.info("workflow instance %s cancelled", instance_id, extra={"instance_id": instance_id})
    return instance


def delete(session: Session, instance_id: str) -> None:
    """Delete an instance as Elsa's API does: one still running is cancelled first (its request,
    descendants, bookmarks and timers with it, as ``cancel``), then it goes with its journal and
    step results. A worker still holding a step of it finds the instance gone at its save (the
    checkpoint fence), so nothing brings it back."""
    from broker.runtime.admin import instance_queries

    if get(session, instance_id).status != InstanceStatus.FINISHED:
        cancel(session, instance_id)
    instance_queries.delete_finished(session, instance_id)
