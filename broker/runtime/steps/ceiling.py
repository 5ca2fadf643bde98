"""The step ceiling: a workflow step that runs past ``BROKER_STEP_TIME_LIMIT`` ends as a fault."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Store
from broker.runtime.steps.outside import OutsideFault, fault_instance_txn
from broker.store.db import transaction
from broker.store.models import WorkflowInstance

logger = logging.getLogger(__name__)

#: the fault's code and category, and the dead letter's reason
FAULT_CODE = "StepTimeLimitExceeded"
FAULT_CATEGORY = "Timeout"


def overdue_message(limit: float, activity_id: str | None = None) -> str:
    """``the workflow step exceeded its time limit of 300s and was stopped``, naming the activity
    it was stuck in where known."""
    where = f" in activity {activity_id!r}" if activity_id else ""
    return f"the workflow step exceeded its time limit of {limit:g}s and was stopped{where}"


def fault_overdue_step(
    rt: Store,
    *,
    instance_id: str,
    outbox_id: str | None,
    request_id: str | None = None,
    queue: str | None = None,
    activity_id: str | None = None,
) -> bool:
    """Fault the step of ``instance_id`` (or of ``request_id`` whose instance was never written)
    that ran past the ceiling, in ``activity_id`` where known; answers whether this call recorded
    it."""
    with transaction(rt.factory) as session:
        return fault_overdue_step_txn(
            session,
            limit=rt.settings.step_time_limit,
            instance_id=instance_id,
            outbox_id=outbox_id,
            request_id=request_id,
            queue=queue,
            activity_id=activity_id,
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
    activity_id: str | None = None,
) -> bool:
    """``fault_overdue_step`` in the caller's transaction (never commits); ``code``,
    ``category`` and ``message``: another reason a step cannot run (a definition that cannot be
    loaded), faulted the same way."""
    if outbox.is_finished(session, outbox_id):
        return False  # the step was saved, or its fault recorded, already
    instance = session.get(WorkflowInstance, instance_id)
    checkpoint = instance.checkpoint if instance is not None else 0
    suffix = "timeout" if code == FAULT_CODE else code
    # The dead letter's idempotency key: once per delivered step (its outbox row), so the same
    # step faulting again after its dead letter was replayed (a new row) writes a new one.
    attempt = outbox_id or checkpoint
    fault = OutsideFault(
        message=message or overdue_message(limit, activity_id),
        code=code,
        category=category,
        key=f"{instance_id}:{attempt}:{suffix}",
        queue=queue,
        activity_id=activity_id,
        details={"limit": limit},
    )
    recorded = fault_instance_txn(
        session,
        fault,
        instance_id=instance_id if instance is not None else None,
        request_id=request_id,
    )
    outbox.mark_done(session, outbox_id)
    if recorded:
        logger.error(
            "instance %s: %s",
            instance_id,
            fault.message,
            extra={"instance_id": instance_id, "request_id": request_id, "outbox_id": outbox_id},
        )
    return recorded
