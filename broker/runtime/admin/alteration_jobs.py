"""Elsa's alterations run on workflow instances, one job each: ``run`` (given alterations),
``retry`` (the faulted activities) and ``retry_request`` (the console's Retry). Each instance is
altered under its lock and goes on through its dead letter's replay (docs/design.md, "Recovery").
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from broker.errors import Conflict, NotFound, WorkflowDefinitionError
from broker.names import DEFAULT_QUEUE, RESUME_INSTANCE
from broker.runtime import ids
from broker.runtime.admin import (
    alterations,
)
from broker.runtime.admin import (
    dead_letters as dead_letter_admin,
)
from broker.runtime.admin import (
    instances as instance_admin,
)
from broker.runtime.admin.alterations import Log
from broker.runtime.failures import dead_letters
from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Alterations
from broker.runtime.persist.faults import fault_error
from broker.runtime.requests import transitions as statuses
from broker.store import operator_actions
from broker.store.db import transaction
from broker.store.models import (
    DeadLetter,
    DeadLetterKind,
    InstanceStatus,
    InstanceSubStatus,
    Request,
    RequestStatus,
    WorkflowDefinition,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)

#: the audit event every alteration of a request's instance writes
ALTERED_EVENT = "WorkflowAltered"
#: seconds to wait for an instance a worker holds
LOCK_WAIT_SECONDS = 5.0


@dataclasses.dataclass
class Result:
    """Elsa's ``RunAlterationsResult`` of one instance, with the outbox rows to publish."""

    instance_id: str
    log: Log
    scheduled_work: bool = False
    outbox_ids: list[str] = dataclasses.field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {
            "workflowInstanceId": self.instance_id,
            "log": {"logEntries": self.log.entries},
            "workflowHasScheduledWork": self.scheduled_work,
            "isSuccessful": not self.log.failed,
        }


def run(
    rt: Alterations,
    instance_ids: Sequence[str],
    raw_alterations: Any,
    *,
    actor: str,
    plan_id: str | None = None,
) -> list[Result]:
    """Apply the alterations to each instance (Elsa's ``alterations/run``); an instance whose
    alterations fail is left unchanged, with the errors in its log."""
    parsed = alterations.parse(raw_alterations)
    kind = "plan" if plan_id else "run"
    return [run_one(rt, i, parsed, actor=actor, plan_id=plan_id, kind=kind) for i in instance_ids]


def retry(
    rt: Alterations,
    instance_ids: Sequence[str],
    activity_ids: Sequence[str] | None,
    *,
    actor: str,
) -> list[Result]:
    """Schedule the faulted activities of each instance again (Elsa's
    ``alterations/workflows/retry``): those named, else the one that faulted and those with an
    incident."""
    results = []
    for instance_id in instance_ids:
        with transaction(rt.factory, write=False) as session:
            instance = session.get(WorkflowInstance, instance_id)
            state = dict(instance.state or {}) if instance is not None else {}
            if instance is not None and not state.get("fault") and instance.fault:
                state["fault"] = instance.fault
        wanted = list(activity_ids or _faulted_activities(state))
        if instance is not None and not wanted:
            log = Log()
            log.add(
                f"Workflow instance {instance_id} has no faulted activity to retry",
                "Warning",
            )
            results.append(Result(instance_id, log))
            continue
        schedule = [{"type": alterations.SCHEDULE_ACTIVITY, "activityId": a} for a in wanted]
        results.append(
            run_one(rt, instance_id, alterations.parse(schedule), actor=actor, kind="retry")
        )
    return results


def retry_request(rt: Alterations, request_id: str, *, actor: str) -> list[str]:
    """Retry a Faulted request (the console's Retry button): its instance's faulted activities,
    or, for a request whose instance never ran (a remote dispatch, an unknown version), the replay
    of its open dead letter. Answers the outbox rows to publish; ``Conflict`` when it is not
    Faulted or nothing can be retried."""
    with transaction(rt.factory, write=False) as session:
        record = session.get(Request, request_id)
        if record is None:
            raise NotFound(f"Request '{request_id}' not found")
        if record.status != RequestStatus.FAULTED.value:
            raise Conflict(f"Request '{request_id}' is {record.status}, not Faulted")
        instance_id = record.instance_id or ids.instance_id_for_request(request_id)
        instance = session.get(WorkflowInstance, instance_id)
        ran = instance is not None and instance.state is not None
    if ran:
        (result,) = retry(rt, [instance_id], None, actor=actor)
        if result.log.failed or not result.scheduled_work:
            raise Conflict(
                "; ".join(e["message"] for e in result.log.entries) or "nothing to retry"
            )
        return result.outbox_ids
    with transaction(rt.factory) as session:
        letter = session.scalars(
            select(DeadLetter)
            .where(
                DeadLetter.request_id == request_id,
                DeadLetter.kind == DeadLetterKind.REQUEST.value,
                DeadLetter.replayable.is_(True),
            )
            .order_by(DeadLetter.created_at.desc())
            .limit(1)
        ).first()
        if letter is None:
            raise Conflict(f"Request '{request_id}' has no dead letter left to replay")
        replayed = dead_letter_admin.replay(session, letter.id, source=actor).new_id
        operator_actions.record(
            session,
            actor=actor,
            action="request.retry",
            target=request_id,
            summary={"deadLetterId": letter.id},
        )
        return [replayed]


def _faulted_activities(state: Mapping[str, Any]) -> list[str]:
    """The activity that faulted the instance, then those with an incident (the engine's state
    keeps them as ``activity_id``; Elsa's JSON says ``activityId``)."""
    found: list[str] = []
    for entry in [state.get("fault") or {}, *(state.get("incidents") or [])]:
        activity_id = entry.get("activity_id") or entry.get("activityId")
        if activity_id and activity_id not in found:
            found.append(str(activity_id))
    return found


def run_one(
    rt: Alterations,
    instance_id: str,
    parsed: list[dict[str, Any]],
    *,
    actor: str,
    plan_id: str | None = None,
    kind: str = "run",
) -> Result:
    """Alter one instance under its lock; ``kind`` (``run``, ``retry``, ``plan``) names the
    operator action in the audit."""
    log = Log()
    result = Result(instance_id, log)
    lock = rt.locks.acquire(
        f"instance:{instance_id}", ttl=rt.settings.lock_ttl, timeout=LOCK_WAIT_SECONDS
    )
    if lock is None:
        log.add(f"Workflow instance {instance_id} is busy; try again", "Error")
        return result
    try:
        with transaction(rt.factory) as session:
            _alter(rt, session, result, parsed, actor=actor, plan_id=plan_id, kind=kind)
            if log.failed:
                session.rollback()
    finally:
        lock.release()
    return result


def _alter(
    rt: Alterations,
    session: Session,
    result: Result,
    parsed: list[dict[str, Any]],
    *,
    actor: str,
    plan_id: str | None,
    kind: str,
) -> None:
    log, instance_id = result.log, result.instance_id
    instance = session.get(WorkflowInstance, instance_id)
    if instance is None:
        log.add(f"Workflow instance with ID '{instance_id}' not found.", "Error")
        return
    if instance.state is None:
        log.add(f"Workflow instance {instance_id} has no saved state to alter", "Error")
        return
    published = rt.registry.get_version(instance.definition_version_id)
    if published is None:
        log.add(
            f"Workflow definition with ID '{instance.definition_version_id}' not found.",
            "Error",
        )
        return
    faulted = instance.sub_status == InstanceSubStatus.FAULTED.value
    finished = instance.status == InstanceStatus.FINISHED.value
    state = copy.deepcopy(dict(instance.state))
    try:
        target = alterations.Target(
            rt.definitions.parse(published), _versions(rt, session, parsed, instance)
        )
    except WorkflowDefinitionError as exc:
        log.add(
            f"Workflow definition version {published.version_id} cannot be loaded: {exc.reason}",
            "Error",
        )
        return
    cancel = alterations.apply(state, parsed, target, log)
    scheduled = bool(state.get("queue")) and not cancel
    if cancel and finished:
        log.add(f"Workflow instance {instance_id} is already {instance.sub_status}", "Error")
    if finished and not faulted and any(a["type"] != alterations.MODIFY_VARIABLE for a in parsed):
        log.add(
            f"Workflow instance {instance_id} finished as {instance.sub_status}",
            "Error",
        )
    if log.failed:
        return
    if scheduled and not faulted:
        state["subStatus"] = InstanceSubStatus.EXECUTING.value
    checkpoint = instance.checkpoint + 1
    changed = session.execute(
        update(WorkflowInstance)
        .where(
            WorkflowInstance.id == instance_id,
            WorkflowInstance.checkpoint == instance.checkpoint,
        )
        .values(
            state=state,
            checkpoint=checkpoint,
            definition_version_id=state.get("definitionVersionId", instance.definition_version_id),
            version=state.get("version", instance.version),
            updated_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not changed:
        log.add(f"Workflow instance {instance_id} moved on meanwhile; try again", "Error")
        return
    request_id = _request_of(session, instance)
    named = alterations.summary(parsed)
    if request_id is not None:
        # The client reads this trail: what was altered, by name, never the values set.
        statuses.note(
            session,
            request_id,
            ALTERED_EVENT,
            source=actor,
            message=", ".join(dict.fromkeys(a["type"] for a in parsed)),
            properties={
                "workflowInstanceId": instance_id,
                "planId": plan_id,
                "alterations": named,
            },
        )
    operator_actions.record(
        session,
        actor=actor,
        action=f"alteration.{kind}",
        target=instance_id,
        summary={"requestId": request_id, "planId": plan_id, "alterations": named},
    )
    logger.warning(
        "workflow instance %s altered by %s: %s",
        instance_id,
        actor,
        [a["type"] for a in parsed],
        extra={"instance_id": instance_id, "request_id": request_id},
    )
    if cancel:
        session.refresh(instance)
        instance_admin.cancel(session, instance_id)
        log.add("Workflow instance cancelled", event="Cancelled")
        return
    if scheduled:
        result.scheduled_work = True
        result.outbox_ids.append(
            _dispatch(session, instance, faulted, checkpoint, actor, published.queue)
        )
        log.add("Workflow instance dispatched", event="Dispatched")


def _dispatch(
    session: Session,
    instance: WorkflowInstance,
    faulted: bool,
    checkpoint: int,
    actor: str,
    queue: str | None,
) -> str:
    """Run the scheduled work: a faulted instance through the replay of its dead letter (which
    reopens its request), any other by a retry row."""
    if faulted:
        letter = dead_letters.open_fault(session, instance.id)
        if letter is None:  # faulted before every fault wrote one
            letter = dead_letters.record_fault(
                session,
                key=f"{instance.id}:{checkpoint}:alteration",
                reason=dead_letters.FAULTED,
                error=fault_error(instance.fault),
                request_id=instance.request_id,
                instance_id=instance.id,
                activity_id=(instance.fault or {}).get("activityId"),
                name=instance.definition_id,
            )
        return dead_letter_admin.replay(session, letter.id, source=actor).new_id
    row = outbox.enqueue(
        session,
        outbox_id=ids.outbox_id_for("alteration", instance.id, str(checkpoint)),
        task_name=RESUME_INSTANCE,
        queue=queue or DEFAULT_QUEUE,
        args={"instance_id": instance.id, "retry": 1},
        request_id=instance.request_id,
        instance_id=instance.id,
    )
    return row.id


def _versions(
    rt: Alterations,
    session: Session,
    parsed: list[dict[str, Any]],
    instance: WorkflowInstance,
) -> dict[int, Any]:
    """The definition versions the plan's Migrate alterations name, parsed."""
    wanted = {int(a["targetVersion"]) for a in parsed if a["type"] == alterations.MIGRATE}
    found: dict[int, Any] = {}
    for version in wanted:
        version_id = session.scalars(
            select(WorkflowDefinition.id).where(
                WorkflowDefinition.definition_id == instance.definition_id,
                WorkflowDefinition.version == version,
            )
        ).first()
        published = rt.registry.get_version(version_id) if version_id else None
        if published is not None:
            found[version] = rt.definitions.parse(published)
    return found


def _request_of(session: Session, instance: WorkflowInstance) -> str | None:
    """The request an instance serves: its own, or its root parent's."""
    seen: set[str] = set()
    current: WorkflowInstance | None = instance
    while current is not None and current.request_id is None and current.parent_id:
        if current.id in seen:
            return None
        seen.add(current.id)
        current = session.get(WorkflowInstance, current.parent_id)
    return current.request_id if current is not None else None
