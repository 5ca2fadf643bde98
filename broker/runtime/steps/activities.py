"""A task-mode Python activity, run as its own Celery task on its declared queue: its answer
(outputs and outcome, a wait, or a fault) resumes the workflow's bookmark, as RunTask's result
does (docs/activities.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from broker.activities.adapter import DECLARED, TASK_BOOKMARK, call
from broker.activities.results import Answer
from broker.errors import NotFound, RetryLater
from broker.runtime.failures.retry import RetryPolicy
from broker.runtime.parts import Store
from broker.runtime.steps import answers

logger = logging.getLogger(__name__)


def run_activity(
    rt: Store,
    *,
    outbox_id: str | None,
    type_name: str,
    inputs: Mapping[str, Any],
    instance_id: str,
    bookmark_id: str,
) -> Answer | None:
    """Run the declared activity and queue its answer for the waiting bookmark; a retry it asks
    for postpones the row (its policy's backoff) until its attempts run out, then it faults."""
    log = {"instance_id": instance_id, "outbox_id": outbox_id}
    attempts = answers.attempts_so_far(rt, outbox_id)
    if attempts is None:
        return None
    declared = DECLARED.get(type_name)
    if declared is None:  # this worker lacks the team's package: another delivery may have it
        raise NotFound(
            f"no Python activity {type_name!r} is declared in this worker", activity=type_name
        )
    try:
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
    answers.answer(
        rt,
        outbox_id=outbox_id,
        kind="activity",
        stimulus=TASK_BOOKMARK,
        payload=answer,
        instance_id=instance_id,
        bookmark_id=bookmark_id,
    )
    logger.info("activity %s answered for instance %s", type_name, instance_id, extra=log)
    return answer
