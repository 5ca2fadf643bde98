"""A task-mode Python activity, run as its own Celery task on its declared queue: its answer
(outputs and outcome, a wait, or a fault) resumes the workflow's bookmark, as RunTask's result
does (docs/activities.md)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from broker.activities.adapter import DECLARED, TASK_BOOKMARK, call
from broker.activities.results import Answer
from broker.errors import NotFound, RetryLater
from broker.runtime.failures.retry import RetryPolicy
from broker.runtime.parts import Steps
from broker.runtime.steps import answers
from broker.runtime.steps.heartbeat import leasing

logger = logging.getLogger(__name__)

#: the fault code of a call that ran past its time limit
TIME_LIMIT_CODE = "ActivityTimeLimitExceeded"


def run_activity(
    rt: Steps,
    *,
    outbox_id: str | None,
    type_name: str,
    inputs: Mapping[str, Any],
    instance_id: str,
    bookmark_id: str,
) -> Answer | None:
    """Run the declared activity and queue its answer for the waiting bookmark; a retry it asks
    for postpones the row (its policy's backoff) until its attempts run out, then it faults. A
    call that runs past its time limit faults at the limit (its pool process then ends)."""
    log = {"instance_id": instance_id, "outbox_id": outbox_id}
    attempts = answers.attempts_so_far(rt, outbox_id)
    if attempts is None:
        return None
    declared = DECLARED.get(type_name)
    if declared is None:  # this worker lacks the team's package: another delivery may have it
        raise NotFound(
            f"no Python activity {type_name!r} is declared in this worker", activity=type_name
        )
    limit = declared.time_limit or rt.settings.activity_time_limit

    def overdue() -> bool:
        return fault_overdue_call(
            rt,
            outbox_id=outbox_id,
            type_name=type_name,
            instance_id=instance_id,
            bookmark_id=bookmark_id,
        )

    watched = (
        leasing(rt, outbox_id, limit=limit, overdue=overdue)
        if outbox_id is not None
        else contextlib.nullcontext()
    )
    try:
        with watched:
            answer = call(declared, declared.function, inputs)
    except RetryLater as exc:
        policy = RetryPolicy.from_settings(rt.settings).merged(exc.policy)
        attempt = attempts or 1
        if not policy.exhausted(attempt) and outbox_id is not None:
            delay = policy.delay(attempt + 1, hint=exc.delay)
            answers.postpone(rt, outbox_id, delay=delay, error=exc.message)
            logger.warning(
                "activity %s asked to retry in %.1fs: %s", type_name, delay, exc.message, extra=log
            )
            return None
        answer = {"fault": f"{exc.message} (attempt {attempt} of {policy.max_attempts})"}
    except Exception as exc:  # the activity's own failure faults its workflow, as a built-in's
        logger.warning("activity %s raised %s", type_name, type(exc).__name__, extra=log)
        answer = {"fault": f"{type(exc).__name__}: {exc}"}
    if not answers.answer(
        rt,
        outbox_id=outbox_id,
        kind="activity",
        stimulus=TASK_BOOKMARK,
        payload=answer,
        instance_id=instance_id,
        bookmark_id=bookmark_id,
    ):
        logger.warning(
            "activity %s answered after its call was finished (its time limit): dropped",
            type_name,
            extra=log,
        )
        return None
    logger.info("activity %s answered for instance %s", type_name, instance_id, extra=log)
    return answer


def fault_overdue_call(
    rt: Steps,
    *,
    outbox_id: str | None,
    type_name: str,
    instance_id: str,
    bookmark_id: str,
) -> bool:
    """Answer a call that ran past its time limit with its fault (the watchdog at the limit, or
    the worker's main process after Celery's hard limit); answers whether this call gave it
    (False: the call answered meanwhile)."""
    declared = DECLARED.get(type_name)
    limit = (declared.time_limit if declared else None) or rt.settings.activity_time_limit
    message = f"activity {type_name!r} exceeded its time limit of {limit:g}s and was stopped"
    if not answers.answer(
        rt,
        outbox_id=outbox_id,
        kind="activity",
        stimulus=TASK_BOOKMARK,
        payload={"fault": message, "code": TIME_LIMIT_CODE},
        instance_id=instance_id,
        bookmark_id=bookmark_id,
    ):
        return False
    logger.error("%s", message, extra={"instance_id": instance_id, "outbox_id": outbox_id})
    return True
