"""Python activities that never return, for the chaos tests of their time limits: a worker lists
this module in BROKER_TASK_MODULES (it is never part of the product).

Each records its attempt (its pool process's pid, one line in ``attempts``) and sleeps for
``seconds`` while the file ``stuck_while`` exists; once the test removes it, the call answers."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from broker.activities import activity

#: seconds one call of the task-mode activity may run
TASK_TIME_LIMIT = 3.0


def _stuck(seconds: float, stuck_while: str, attempts: str) -> dict[str, Any]:
    with Path(attempts).open("a") as record:
        record.write(f"{os.getpid()}\n")
    if Path(stuck_while).exists():
        time.sleep(seconds)
    return {"slept": seconds}


@activity("Stuck.Inline", category="Stuck", outputs=("slept",))
def stuck_inline(seconds: float, stuck_while: str, attempts: str) -> dict[str, Any]:
    """A blocking call without a timeout, in the workflow's step."""
    return _stuck(seconds, stuck_while, attempts)


@activity(
    "Stuck.Task",
    category="Stuck",
    outputs=("slept",),
    queue="stuck.calls",
    time_limit=TASK_TIME_LIMIT,
)
def stuck_task(seconds: float, stuck_while: str, attempts: str) -> dict[str, Any]:
    """A blocking call without a timeout, as its own Celery task."""
    return _stuck(seconds, stuck_while, attempts)
