"""The rows a step's engine commands become: outbox rows for tasks and dispatched children, events
on the bookmark queue, and the stimulus that wakes a parent waiting for its child.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.names import DEFAULT_QUEUE, RUN_ACTIVITY, RUN_CHILD, RUN_TASK
from broker.runtime import ids
from broker.runtime.ids import PENDING_START
from broker.runtime.outbox import rows as outbox
from broker.runtime.persist.target import PARENT_LINK, Target
from broker.store.models import (
    BookmarkQueueItem,
    InstanceStatus,
    InstanceSubStatus,
    Request,
    StepResult,
    WorkflowInstance,
)

logger = logging.getLogger(__name__)


def save_commands(session: Session, target: Target, commands: Any, now: dt.datetime) -> list[str]:
    """Outbox rows (and child rows) for the engine's side-effect commands; committed with the
    step, so only committed dispatches are ever delivered."""
    written: list[str] = []
    for index, command in enumerate(commands):
        kind = type(command).__name__
        if kind == "DispatchWorkflow":
            written.append(_dispatch_child(session, target, command, now))
        elif kind == "PublishEvent":
            item_id = ids.queue_item_id_for(
                "event", target.instance_id, str(target.expected_checkpoint), str(index)
            )
            if session.get(BookmarkQueueItem, item_id) is None:
                session.add(
                    BookmarkQueueItem(
                        id=item_id,
                        name=command.name,
                        instance_id=target.instance_id if command.local else None,
                        correlation_id=command.correlation_id,
                        client_key=target.client_key,
                        payload=command.payload,
                        created_at=now,
                        next_attempt_at=now,
                        # Marks a workflow's own event: it may start workflows by their Event
                        # trigger on behalf of the publishing request's client.
                        options={
                            "publishedBy": target.instance_id,
                            "clientId": _client_of(session, target.request_id),
                        },
                    )
                )
        elif kind == "RunTask":
            row = outbox.enqueue(
                session,
                outbox_id=ids.outbox_id_for("task", target.instance_id, command.bookmark_id),
                task_name=RUN_TASK,
                queue=target.queue,
                # The task's payload travels in the row: a RunTask call is defined by it.
                args={
                    "task_name": command.task_name,
                    "payload": command.payload,
                    "instance_id": target.instance_id,
                    "bookmark_id": command.bookmark_id,
                },
                request_id=target.request_id,
                instance_id=target.instance_id,
            )
            written.append(row.id)
        elif kind == "RunActivity":
            row = outbox.enqueue(
                session,
                outbox_id=ids.outbox_id_for("activity", target.instance_id, command.bookmark_id),
                task_name=RUN_ACTIVITY,
                queue=command.queue or target.queue,
                args={
                    "type_name": command.type_name,
                    "inputs": dict(command.inputs),
                    "instance_id": target.instance_id,
                    "bookmark_id": command.bookmark_id,
                },
                request_id=target.request_id,
                instance_id=target.instance_id,
            )
            written.append(row.id)
        else:
            logger.error("unknown engine command %s ignored", kind)
    if commands:
        session.flush()
    return written


def _client_of(session: Session, request_id: str | None) -> str | None:
    if request_id is None:
        return None
    return session.scalar(select(Request.client_id).where(Request.id == request_id))


def add_pending_instance(
    session: Session,
    instance: WorkflowInstance,
    start: dict[str, Any],
    now: dt.datetime,
) -> None:
    """Add ``instance`` as a Running/Pending row with checkpoint 0, and beside it the
    ``PENDING_START`` row holding what its first step starts it with (``start``)."""
    instance.status = InstanceStatus.RUNNING.value
    instance.sub_status = InstanceSubStatus.PENDING.value
    instance.checkpoint = 0
    instance.created_at = instance.updated_at = instance.heartbeat_at = now
    session.add(instance)
    session.add(
        StepResult(instance_id=instance.id, step_key=PENDING_START, output=start, created_at=now)
    )


def _dispatch_child(session: Session, target: Target, command: Any, now: dt.datetime) -> str:
    child_id = command.child_instance_id
    if session.get(WorkflowInstance, child_id) is None:
        child = WorkflowInstance(
            id=child_id,
            definition_id=command.definition_id,
            definition_version_id="",  # pinned when the child starts
            version=0,
            request_id=None,
            parent_id=target.instance_id,
            correlation_id=command.correlation_id,
        )
        start = {
            "input": dict(command.input or {}),
            "correlationId": command.correlation_id,
            "parentId": target.instance_id,
            "clientKey": target.client_key,
            # Elsa's ParentInstanceId and WaitForCompletion properties of the child
            "properties": dict(command.properties or {}),
        }
        add_pending_instance(session, child, start, now)
        if command.wait_for_completion and command.bookmark_id:
            session.add(
                StepResult(
                    instance_id=child_id,
                    step_key=PARENT_LINK,
                    output={"parentId": target.instance_id, "bookmarkId": command.bookmark_id},
                    created_at=now,
                )
            )
    row = outbox.enqueue(
        session,
        outbox_id=ids.outbox_id_for("dispatch", child_id),
        task_name=RUN_CHILD,
        queue=target.queue or DEFAULT_QUEUE,
        args={"instance_id": child_id},
        request_id=target.request_id,
        instance_id=child_id,
    )
    return row.id


def notify_parent(
    session: Session, target: Target, result: Any, sub_status: str, now: dt.datetime
) -> None:
    """A finished child that its parent waits for: a bookmark-queue item naming the parent's
    bookmark, processed like any other stimulus."""
    link = session.get(StepResult, (target.instance_id, PARENT_LINK))
    if link is None or not isinstance(link.output, dict):
        return
    item_id = ids.queue_item_id_for("child-completed", target.instance_id)
    if session.get(BookmarkQueueItem, item_id) is not None:
        return
    session.add(
        BookmarkQueueItem(
            id=item_id,
            name="ChildCompleted",
            instance_id=link.output["parentId"],
            bookmark_id=link.output["bookmarkId"],
            client_key=target.client_key,
            # Elsa resumes a waiting DispatchWorkflow with the child's output (its ``result``),
            # whatever the child's final sub-status.
            payload=result.output,
            options={"childInstanceId": target.instance_id, "childSubStatus": sub_status},
            created_at=now,
            next_attempt_at=now,
        )
    )
