"""The fenced save of one engine step: instance state and checkpoint, journal rows, bookmarks and
timers, a retry, the request dead letter of any fault, and the request's end."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Integer, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from broker.engine.run.results import RunResult
from broker.names import RESUME_INSTANCE
from broker.redaction import redact_text
from broker.runtime import ids
from broker.runtime.failures import dead_letters
from broker.runtime.failures.dead_letters import EXHAUSTED, FAULTED
from broker.runtime.failures.retry import policy_for
from broker.runtime.outbox import rows as outbox
from broker.runtime.persist import journal
from broker.runtime.persist.commands import notify_parent, save_commands
from broker.runtime.persist.faults import fault_error, fault_of
from broker.runtime.persist.target import PARENT_LINK, Saved, StaleStep, Start, Target
from broker.runtime.requests.transitions import finish_request, run_through, start_processing
from broker.settings import Settings
from broker.store.models import (
    Bookmark,
    InstanceStatus,
    InstanceSubStatus,
    StepResult,
    Timer,
    WorkflowInstance,
    table_of,
    utcnow,
)

logger = logging.getLogger(__name__)


def open_start(session: Session, start: Start) -> bool:
    """Write a request's start on its own (a long first step): Queued -> Processing and its
    instance row at checkpoint 0; False when the request is no longer Queued."""
    if not start_processing(session, start.request_id, start.row["id"], now=start.started):
        return False
    session.execute(_INSERT_INSTANCE, {**start.row, "heartbeat_at": utcnow()})
    return True


def save_step(
    session: Session,
    settings: Settings,
    target: Target,
    result: RunResult,
    *,
    start: Start | None = None,
) -> Saved:
    """Persist ``result`` (a ``broker.engine.run.results.RunResult``) for ``target``; ``start``: the
    request's start, not written yet (see ``Start``), which this save writes with the step."""
    now = utcnow()
    saved = Saved(checkpoint=target.expected_checkpoint + 1)
    status, sub_status = str(result.status), str(result.sub_status)
    fault = fault_of(result.fault)
    exhausted = None
    if result.retry is not None:
        policy = policy_for(
            settings,
            activity_policy=result.retry.policy,
            workflow_properties=target.workflow_properties,
        )
        if policy.exhausted(target.attempt):
            exhausted = policy
            status, sub_status = InstanceStatus.FINISHED.value, InstanceSubStatus.FAULTED.value
            fault = {
                "message": redact_text(
                    f"{result.retry.error} (gave up after {target.attempt} attempts)"
                ),
                "code": "RetriesExhausted",
                "category": "Retry",
                "activityId": result.retry.activity_id,
            }
        else:
            saved.retry_scheduled = True
            delay = policy.delay(target.attempt + 1, hint=result.retry.delay)
            saved.outbox_ids.append(
                outbox.enqueue(
                    session,
                    outbox_id=ids.outbox_id_for("retry", target.instance_id, str(saved.checkpoint)),
                    task_name=RESUME_INSTANCE,
                    queue=target.queue,
                    args={"instance_id": target.instance_id, "retry": target.attempt + 1},
                    request_id=target.request_id,
                    instance_id=target.instance_id,
                    available_at=now + dt.timedelta(seconds=delay),
                ).id
            )
            logger.info(
                "activity %s of instance %s failed transiently (attempt %d); retry in %.1fs",
                result.retry.activity_id,
                target.instance_id,
                target.attempt,
                delay,
                extra={"instance_id": target.instance_id, "request_id": target.request_id},
            )
    finished = status == InstanceStatus.FINISHED.value
    target = _renamed(target, result.state)
    values = _instance_values(target, result, status, sub_status, fault, now, finished)
    if start is None:
        _save_instance(session, target, values)
    else:
        saved.request_status = _open_with(session, start, target, result, values, fault, now)
    # The fence just passed at checkpoint 0: no step of this instance was ever saved, so it has no
    # journal rows, bookmarks or timers yet (only save_step writes them) and needs no lookups.
    fresh = target.expected_checkpoint == 0
    sequence = 1 if fresh else journal.next_sequence(session, target.instance_id)
    sequence += journal.append(
        session, target.instance_id, result.journal, attempt=target.attempt, sequence=sequence
    )
    if result.retry is not None:
        journal.record(
            session,
            target.instance_id,
            activity_id=result.retry.activity_id,
            activity_instance_id=result.retry.activity_instance_id,
            activity_type="Runtime",
            event_name="RetriesExhausted" if exhausted else "RetryScheduled",
            attempt=target.attempt,
            payload={"error": result.retry.error},
            sequence=sequence,
        )
    _save_bookmarks(session, target, result.bookmarks, now, fresh=fresh)
    saved.outbox_ids += save_commands(session, target, result.commands, now)
    saved.outbox_ids += _save_executed_children(session, settings, target, result, now)
    if finished and sub_status == InstanceSubStatus.FAULTED.value:
        _record_fault(session, target, saved, result, fault, exhausted=exhausted is not None)
    if finished:
        if target.parent_id is not None:  # only a child has a parent link to notify
            notify_parent(session, target, result, sub_status, now)
        if target.request_id is not None and start is None:
            saved.request_status = finish_request(
                session,
                target.request_id,
                sub_status=sub_status,
                output=result.output,
                error=fault_error(fault),
                now=now,
            )
        if target.request_id is not None:
            saved.finished_at = now
    return saved


def _save_executed_children(
    session: Session, settings: Settings, target: Target, result: RunResult, now: dt.datetime
) -> list[str]:
    """The children ExecuteWorkflow ran in-process in this step, each saved as its own instance's
    first step (its state, journal, bookmarks and timers, the rows of its commands, a retry, a
    fault's dead letter) in the parent's transaction; a child its parent waits for gets the
    parent link that wakes the parent when it finishes. A child already saved is left alone."""
    written: list[str] = []
    for child in result.child_instances:
        if child.result is None or session.get(WorkflowInstance, child.id) is not None:
            continue
        session.add(
            WorkflowInstance(
                id=child.id,
                definition_id=child.definition_id,
                definition_version_id=child.definition_version_id,
                version=child.version,
                request_id=None,
                parent_id=target.instance_id,
                correlation_id=child.correlation_id,
                status=InstanceStatus.RUNNING.value,
                sub_status=InstanceSubStatus.PENDING.value,
                checkpoint=0,
                created_at=now,
                updated_at=now,
                heartbeat_at=now,
            )
        )
        if child.parent_bookmark_id is not None:
            link = {"parentId": target.instance_id, "bookmarkId": child.parent_bookmark_id}
            session.add(
                StepResult(instance_id=child.id, step_key=PARENT_LINK, output=link, created_at=now)
            )
        session.flush()
        child_target = Target(
            instance_id=child.id,
            definition_id=child.definition_id,
            version_id=child.definition_version_id,
            version=child.version,
            queue=target.queue,
            workflow_properties=dict(child.workflow_properties),
            expected_checkpoint=0,
            client_key=target.client_key,
            parent_id=target.instance_id,
            correlation_id=child.correlation_id,
            name=child.state.get("name"),
        )
        written += save_step(session, settings, child_target, child.result).outbox_ids
    return written


def _record_fault(
    session: Session,
    target: Target,
    saved: Saved,
    result: RunResult,
    fault: dict[str, Any] | None,
    *,
    exhausted: bool,
) -> None:
    """Every fault of a step writes a request dead letter (docs/design.md, section 4): the
    retries ran out, or an activity faulted (``Fault``, a refused URL, a 4xx, a bad expression).
    The engine keeps the failed activity at the head of its queue, so a replay resumes there."""
    activity_id: str | None
    error: str | None
    if exhausted and result.retry is not None:
        reason, activity_id, error = EXHAUSTED, result.retry.activity_id, result.retry.error
    else:
        reason = FAULTED
        activity_id = (fault or {}).get("activityId")
        error = fault_error(fault)
    dead_letters.record_fault(
        session,
        key=f"{target.instance_id}:{saved.checkpoint}",
        reason=reason,
        error=error,
        request_id=target.request_id,
        instance_id=target.instance_id,
        activity_id=activity_id,
        client_key=target.client_key,
        name=target.definition_id,
        attempts=target.attempt,
        queue=target.queue,
    )


def _renamed(target: Target, state: Mapping[str, Any]) -> Target:
    """``target`` with the correlation id and name the workflow set (``Correlate``, ``SetName``).

    They are saved on the instance row, and the bookmarks saved with this step carry the new
    correlation id, so events addressed to it resume them.
    """
    correlation_id = state.get("correlationId") or target.correlation_id
    name = state.get("name") or target.name
    if (correlation_id, name) == (target.correlation_id, target.name):
        return target
    if correlation_id != target.correlation_id:
        logger.info(
            "instance %s is now correlated as %s",
            target.instance_id,
            correlation_id,
            extra={"instance_id": target.instance_id, "request_id": target.request_id},
        )
    return dataclasses.replace(target, correlation_id=correlation_id, name=name)


_INSTANCES = table_of(WorkflowInstance)
# Built once (see ``table_of``): the fence every step's save passes.
_SAVE_INSTANCE = (
    update(_INSTANCES)
    .where(
        _INSTANCES.c.id == bindparam("instance_id"),
        _INSTANCES.c.checkpoint == bindparam("expected"),
        _INSTANCES.c.status == InstanceStatus.RUNNING.value,
    )
    .values(
        status=bindparam("status"),
        sub_status=bindparam("sub_status"),
        state=bindparam("state"),
        output=bindparam("output"),
        fault=bindparam("fault"),
        checkpoint=bindparam("checkpoint"),
        heartbeat_at=bindparam("now"),
        updated_at=bindparam("now"),
        finished_at=bindparam("finished_at"),
        incident_count=_INSTANCES.c.incident_count + bindparam("incidents", type_=Integer),
        definition_version_id=bindparam("version_id"),
        version=bindparam("version"),
        correlation_id=bindparam("correlation_id"),
        name=bindparam("name"),
    )
)
#: a request's instance row, written by its start (``open_start``) or by its first step's save
_INSERT_INSTANCE = insert(_INSTANCES)


def _instance_values(
    target: Target,
    result: Any,
    status: str,
    sub_status: str,
    fault: dict[str, Any] | None,
    now: dt.datetime,
    finished: bool,
) -> dict[str, Any]:
    """The parameters of ``_SAVE_INSTANCE`` for this step."""
    return {
        "instance_id": target.instance_id,
        "expected": target.expected_checkpoint,
        "status": status,
        "sub_status": sub_status,
        "state": result.state,
        "output": result.output,
        "fault": fault,
        "checkpoint": target.expected_checkpoint + 1,
        "now": now,
        "finished_at": now if finished else None,
        "incidents": len(result.incidents),
        "version_id": target.version_id,
        "version": target.version,
        "correlation_id": target.correlation_id,
        "name": target.name,
    }


def _save_instance(session: Session, target: Target, values: dict[str, Any]) -> None:
    changed = session.execute(_SAVE_INSTANCE, values).rowcount  # type: ignore[attr-defined]
    if not changed:
        raise StaleStep(
            f"instance {target.instance_id} moved past checkpoint {target.expected_checkpoint}",
            instance_id=target.instance_id,
        )


def _open_with(
    session: Session,
    start: Start,
    target: Target,
    result: Any,
    values: dict[str, Any],
    fault: dict[str, Any] | None,
    now: dt.datetime,
) -> str | None:
    """The first step of a request whose start is not written: the request's moves (guarded on
    Queued: the fence of this case, as no instance row exists yet), then its instance row inserted
    in its saved state. Answers the request's terminal status when the step finished it."""
    instance_id = target.instance_id
    request_status = None
    if values["finished_at"] is not None:
        request_status = run_through(
            session,
            start.request_id,
            instance_id,
            started=start.started,
            sub_status=values["sub_status"],
            output=result.output,
            error=fault_error(fault),
            now=now,
        )
        opened = request_status is not None
    else:
        opened = start_processing(session, start.request_id, instance_id, now=start.started)
    if not opened:
        raise StaleStep(f"request of instance {instance_id} is no longer queued")
    session.execute(
        _INSERT_INSTANCE,
        {
            **start.row,
            "status": values["status"],
            "sub_status": values["sub_status"],
            "state": values["state"],
            "output": values["output"],
            "fault": values["fault"],
            "checkpoint": values["checkpoint"],
            "heartbeat_at": now,
            "updated_at": now,
            "finished_at": values["finished_at"],
            "incident_count": values["incidents"],
            "definition_version_id": values["version_id"],
            "version": values["version"],
            "correlation_id": values["correlation_id"],
            "name": values["name"],
        },
    )
    return request_status


def _save_bookmarks(
    session: Session, target: Target, bookmarks: Any, now: dt.datetime, *, fresh: bool
) -> None:
    """Replace the instance's bookmarks with the open ones, and its unfired timers to match;
    ``fresh``: the instance has none stored yet (its first step), so nothing is read or deleted."""
    if fresh and not bookmarks:
        return
    if not fresh:
        session.execute(delete(Bookmark).where(Bookmark.instance_id == target.instance_id))
    wanted_timers: dict[str, dt.datetime] = {}
    for bookmark in bookmarks:
        session.add(
            Bookmark(
                id=bookmark.id,
                instance_id=target.instance_id,
                activity_id=bookmark.activity_id,
                activity_instance_id=bookmark.activity_instance_id,
                name=bookmark.name,
                hash=bookmark.hash,
                payload=dict(bookmark.payload) if bookmark.payload is not None else None,
                correlation_id=target.correlation_id,
                client_key=target.client_key,
                created_at=now,
            )
        )
        if bookmark.due_at is not None:
            wanted_timers[bookmark.id] = _aware(bookmark.due_at)
    existing: dict[str, Timer] = {}
    if not fresh:
        existing = {
            t.bookmark_id: t
            for t in session.scalars(select(Timer).where(Timer.instance_id == target.instance_id))
        }
    for bookmark_id, timer in existing.items():
        if bookmark_id not in wanted_timers and timer.fired_at is None:
            session.delete(timer)
    for bookmark_id, due_at in wanted_timers.items():
        if bookmark_id not in existing:
            session.add(
                Timer(
                    id=ids.timer_id_for(bookmark_id),
                    instance_id=target.instance_id,
                    bookmark_id=bookmark_id,
                    due_at=due_at,
                )
            )
    session.flush()


def _aware(value: Any) -> dt.datetime:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value  # type: ignore[no-any-return]
