"""Python activities that never return, for the chaos tests of their time limits: a worker lists
this module in BROKER_TASK_MODULES (it is never part of the product).

Each records its attempt (one line in ``attempts``: its pool process's pid, and the pid of a child
process it started in a session of its own) and, while the file ``stuck_while`` exists, blocks
for ``seconds``: in a ``time.sleep`` (the watchdog reaches it), or, for ``Stuck.TaskGil``, in a
regular expression that backtracks while holding the GIL (only Celery's hard limit reaches it)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from broker.activities import activity

#: seconds one call of the task-mode activities may run
TASK_TIME_LIMIT = 3.0


def _stuck(seconds: float, stuck_while: str, attempts: str) -> dict[str, Any]:
    child = subprocess.Popen(["sleep", str(seconds)], start_new_session=True)
    with Path(attempts).open("a") as record:
        record.write(f"{os.getpid()} {child.pid}\n")
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


@activity(
    "Stuck.TaskGil",
    category="Stuck",
    outputs=("slept",),
    queue="stuck.calls",
    time_limit=TASK_TIME_LIMIT,
)
def stuck_task_gil(seconds: float, stuck_while: str, attempts: str) -> dict[str, Any]:
    """Catastrophic backtracking in C code that never releases the GIL, as its own Celery task."""
    with Path(attempts).open("a") as record:
        record.write(f"{os.getpid()}\n")
    if Path(stuck_while).exists():
        re.match(r"(a+)+$", "a" * 64 + "b")
    return {"slept": seconds}
