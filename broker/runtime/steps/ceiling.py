"""The step ceiling: a workflow step that runs past ``BROKER_STEP_TIME_LIMIT`` ends as a fault."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from broker.runtime.failures import dead_letters
from broker.runtime.outbox import rows as outbox
from broker.runtime.persist import Target, journal, notify_parent
from broker.runtime.requests.transitions import finish_request
from broker.runtime.wiring import Runtime
from broker.store.db import transaction
from broker.store.models import (
    InstanceStatus,
    InstanceSubStatus,
    Request,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)

#: the fault's code and category, and the dead letter's reason
FAULT_CODE = "StepTimeLimitExceeded"
FAULT_CATEGORY = "Timeout"


def overdue_message(limit: float) -> str:
    return f"the workflow step exceeded its time limit of {limit:g}s and was stopped"


@dataclasses.dataclass(frozen=True)
class _NoOutput:
    """What a parent waiting for a timed-out child receives: no output."""

    output: Any = None


def fault_overdue_step(
    rt: Runtime,
    *,
    instance_id: str,
    outbox_id: str | None,
    request_id: str | None = None,
    queue: str | None = None,
) -> bool:
    """Fault the step of ``instance_id`` (or of ``request_id`` whose instance was never written)
    that ran past the ceiling; answers whether this call recorded it."""
    with transaction(rt.factory) as session:
        return fault_overdue_step_txn(
            session,
            limit=rt.settings.step_time_limit,
            instance_id=instance_id,
            outbox_id=outbox_id,
            request_id=request_id,
            queue=queue,
        )


def fault_overdue_step_txn(
    session: Session,
    *,
    limit: float,
    instance_id: str,
    outbox_id: str | None,
    request_id: str | None = None,
    queue: str | None = None,
    code: str = FAULT_CODE,
    category: str = FAULT_CATEGORY,
    message: str | None = None,
) -> bool:
    """``fault_overdue_step`` in the caller's transaction (never commits); ``code``,
    ``category`` and ``message``: another reason a step cannot run (a definition that cannot be
    loaded), faulted the same way."""
    if outbox.is_finished(session, outbox_id):
        return False  # the step was saved, or its fault recorded, already
    now = utcnow()
    message = message or overdue_message(limit)
    suffix = "timeout" if code == FAULT_CODE else code  # the dead letter's idempotency key
    instance = session.get(WorkflowInstance, instance_id)
    if instance is not None:
        request_id = instance.request_id
        faulted = session.execute(
            update(WorkflowInstance)
            .where(
                WorkflowInstance.id == instance_id,
                WorkflowInstance.status == InstanceStatus.RUNNING.value,
            )
            .values(
                status=InstanceStatus.FINISHED.value,
                sub_status=InstanceSubStatus.FAULTED.value,
                fault={
                    "message": message,
                    "code": code,
                    "category": category,
                    "activityId": None,
                },
                updated_at=now,
                finished_at=now,
            )
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
        if not faulted:
            outbox.mark_done(session, outbox_id)
            return False  # finished or cancelled meanwhile: nothing to fault
        session.refresh(instance)
        journal.record(
            session,
            instance_id,
            activity_id=instance.definition_id,
            activity_type="Runtime",
            event_name=code,
            payload={"error": message, "limit": limit},
        )
    client_key = None
    if request_id is not None:
        request = session.get(Request, request_id)
        client_key = request.client_key if request is not None else None
        finish_request(session, request_id, sub_status="Faulted", output=None, error=message)
    if instance is not None and instance.parent_id is not None:
        notify_parent(session, _target_of(instance, queue), _NoOutput(), "Faulted", now)
    if request_id is not None or instance is not None:
        dead_letters.record_fault(
            session,
            key=f"{instance_id}:{instance.checkpoint if instance is not None else 0}:{suffix}",
            reason=code,
            error=message,
            request_id=request_id,
            instance_id=instance_id if instance is not None else None,
            client_key=client_key,
            name=instance.definition_id if instance is not None else None,
            queue=queue,
        )
    outbox.mark_done(session, outbox_id)
    logger.error(
        "instance %s: %s",
        instance_id,
        message,
        extra={"instance_id": instance_id, "request_id": request_id, "outbox_id": outbox_id},
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
