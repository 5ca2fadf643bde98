"""What a task adapter did with the outbox row it consumed (returned by the runtime, logged by
Celery)."""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    DONE = "done"  # a step ran and was saved
    SKIPPED = "skipped"  # already finished, or nothing to do
    BUSY = "busy"  # the instance was held elsewhere, or the remote call failed: row postponed
    STALE = "stale"  # another run saved first; this one's result was dropped
    DISPATCHED = "dispatched"  # handed to a remote executor
