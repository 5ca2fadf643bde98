"""Faults the runtime records for an instance from outside its engine: a step past its ceiling,
work that killed its worker process again and again."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from broker.runtime.failures import dead_letters
from broker.runtime.persist import Target, journal, notify_parent
from broker.runtime.requests.transitions import finish_request
from broker.store.models import (
    InstanceStatus,
    InstanceSubStatus,
    Request,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OutsideFault:
    """What to record: the message (the request's ``errorDetail``), the fault's code and
    category (the code is also the dead letter's reason), the activity where known, and what a
    replay of the dead letter needs (``work``: the task to publish again)."""

    message: str
    code: str
    category: str
    key: str
    activity_id: str | None = None
    queue: str | None = None
    work: dict[str, Any] | None = None
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _NoOutput:
    """What a parent waiting for a faulted child receives: no output."""

    output: Any = None


def fault_instance_txn(
    session: Session,
    fault: OutsideFault,
    *,
    instance_id: str | None,
    request_id: str | None = None,
) -> bool:
    """Fault ``instance_id`` (still running) and its request, or ``request_id`` alone when its
    instance was never written, with a replayable ``request`` dead letter; a parent waiting for
    the instance is told. Answers whether this call recorded it (False: the instance finished or
    was cancelled meanwhile, or there was nothing to fault). Never commits."""
    now = utcnow()
    instance = session.get(WorkflowInstance, instance_id) if instance_id else None
    if instance is not None:
        request_id = instance.request_id
        faulted = session.execute(
            update(WorkflowInstance)
            .where(
                WorkflowInstance.id == instance.id,
                WorkflowInstance.status == InstanceStatus.RUNNING.value,
            )
            .values(
                status=InstanceStatus.FINISHED.value,
                sub_status=InstanceSubStatus.FAULTED.value,
                fault={
                    "message": fault.message,
                    "code": fault.code,
                    "category": fault.category,
                    "activityId": fault.activity_id,
                },
                updated_at=now,
                finished_at=now,
            )
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
        if not faulted:
            return False
        session.refresh(instance)
        journal.record(
            session,
            instance.id,
            activity_id=fault.activity_id or instance.definition_id,
            activity_type="Runtime",
            event_name=fault.code,
            payload={"error": fault.message, **fault.details},
        )
    client_key = None
    if request_id is not None:
        request = session.get(Request, request_id)
        if request is None:
            return False
        client_key = request.client_key
        moved = finish_request(
            session, request_id, sub_status="Faulted", output=None, error=fault.message
        )
        if instance is None and moved is None:
            return False  # a request that ended meanwhile, and no instance to fault
    elif instance is None:
        return False
    if instance is not None and instance.parent_id is not None:
        notify_parent(session, _target_of(instance, fault.queue), _NoOutput(), "Faulted", now)
    dead_letters.record_fault(
        session,
        key=fault.key,
        reason=fault.code,
        error=fault.message,
        request_id=request_id,
        instance_id=instance.id if instance is not None else None,
        activity_id=fault.activity_id,
        client_key=client_key,
        name=instance.definition_id if instance is not None else None,
        queue=fault.queue,
        work=fault.work,
    )
    logger.error(
        "instance %s: %s",
        instance_id,
        fault.message,
        extra={"instance_id": instance_id, "request_id": request_id},
    )
    return True


def _target_of(instance: WorkflowInstance, queue: str | None) -> Target:
    return Target(
        instance_id=instance.id,
        definition_id=instance.definition_id,
        version_id=instance.definition_version_id,
        version=instance.version,
        queue=queue or "",
        workflow_properties={},
        expected_checkpoint=instance.checkpoint,
        request_id=instance.request_id,
        parent_id=instance.parent_id,
        correlation_id=instance.correlation_id,
        name=instance.name,
    )
