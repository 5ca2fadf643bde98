"""Poison work: a piece of work whose deliveries killed their worker process
``BROKER_MAX_WORKER_DEATHS`` times is dead-lettered instead of run again."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from broker.names import RUN_REQUEST
from broker.runtime import ids
from broker.runtime.failures import dead_letters
from broker.runtime.outbox import deliveries
from broker.runtime.outbox.deliveries import Delivery
from broker.runtime.parts import Store
from broker.runtime.steps.outside import OutsideFault, fault_instance_txn
from broker.store.db import transaction
from broker.store.models import Bookmark, DeadLetterKind

logger = logging.getLogger(__name__)

#: the fault's code (and the dead letter's reason) and category
FAULT_CODE = "WorkerDied"
FAULT_CATEGORY = "Poison"


def poison_message(deaths: int, *, activity_id: str | None, task: str | None) -> str:
    """``the worker died 3 times running it``, naming the activity and the task where known."""
    where = []
    if activity_id:
        where.append(f"activity {activity_id!r}")
    if task:
        where.append(f"task {task!r}")
    suffix = f" ({', '.join(where)})" if where else ""
    return f"the worker died {deaths} times running it{suffix}"


def bury(rt: Store, delivery: Delivery) -> str | None:
    """Dead-letter the work of ``delivery`` instead of running it: the outbox row ends ``dead``;
    work that serves a workflow instance (a step, a RunTask call) faults the instance and its
    request with a replayable ``request`` dead letter, as any other fault; other work (a webhook
    attempt) gets a dead letter of kind ``outbox``. Replaying either publishes the same task
    once more, as a new row (its count starts again). Answers the dead letter's kind, or None
    when the row was finished meanwhile. Safe to run twice."""
    with transaction(rt.factory) as session:
        return bury_txn(session, delivery)


def bury_txn(session: Session, delivery: Delivery) -> str | None:
    """``bury`` in the caller's transaction (never commits)."""
    if not deliveries.mark_dead(session, delivery.outbox_id):
        return None
    args = delivery.args
    instance_id, request_id = _subject(delivery)
    activity_id = _activity_of(session, args)
    task = str(args["task_name"]) if args.get("task_name") else None
    message = poison_message(delivery.deaths, activity_id=activity_id, task=task)
    work = {"taskName": delivery.task_name, "args": args}
    log = {
        "outbox_id": delivery.outbox_id,
        "request_id": request_id or delivery.request_id,
        "instance_id": instance_id,
    }
    if instance_id is not None or request_id is not None:
        fault = OutsideFault(
            message=message,
            code=FAULT_CODE,
            category=FAULT_CATEGORY,
            key=f"poison:{delivery.outbox_id}",
            activity_id=activity_id,
            queue=delivery.queue,
            work=work,
            details={"deaths": delivery.deaths, "task": delivery.task_name},
        )
        if fault_instance_txn(session, fault, instance_id=instance_id, request_id=request_id):
            logger.error(
                "outbox row %s (%s) dead-lettered: %s",
                delivery.outbox_id,
                delivery.task_name,
                message,
                extra=log,
            )
            return DeadLetterKind.REQUEST.value
    dead_letters.record(
        session,
        dead_letter_id=ids.dead_letter_id_for("outbox", delivery.outbox_id),
        kind=DeadLetterKind.OUTBOX.value,
        reason=FAULT_CODE,
        source_id=delivery.outbox_id,
        request_id=delivery.request_id,
        instance_id=delivery.instance_id,
        activity_id=activity_id,
        name=delivery.task_name,
        error=message,
        attempts=delivery.deaths,
        data={**work, "queue": delivery.queue},
    )
    logger.error(
        "outbox row %s (%s) dead-lettered: %s",
        delivery.outbox_id,
        delivery.task_name,
        message,
        extra=log,
    )
    return DeadLetterKind.OUTBOX.value


def _subject(delivery: Delivery) -> tuple[str | None, str | None]:
    """The instance (and request) the work serves, from its arguments: a workflow task names its
    instance, a request's first step its request (whose instance id derives from it); other work
    (a webhook attempt) names neither."""
    args = delivery.args
    instance_id = args.get("instance_id")
    request_id = args.get("request_id")
    if request_id and delivery.task_name == RUN_REQUEST:
        instance_id = ids.instance_id_for_request(str(request_id))
    return (
        str(instance_id) if instance_id else None,
        str(request_id) if request_id else None,
    )


def _activity_of(session: Session, args: dict[str, Any]) -> str | None:
    """The activity the work runs, where known: the one waiting on the bookmark it resumes or
    answers (a resume, a RunTask call)."""
    bookmark_id = args.get("bookmark_id")
    if not bookmark_id:
        return None
    bookmark = session.get(Bookmark, str(bookmark_id))
    return bookmark.activity_id if bookmark is not None else None
