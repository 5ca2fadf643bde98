"""What a step's save works on and returns: the instance a step ran on (``Target``), what the save
produced (``Saved``), the conflict of a stale step, and the StepResult keys the runtime keeps
beside the engine's state.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from broker.errors import Conflict

#: the StepResult key of a parent link the runtime keeps beside the engine's state
PARENT_LINK = "parent-link"


class StaleStep(Conflict):
    """Raised when the instance moved on (another run saved first, or it was cancelled)."""

    code = "stale_step"


@dataclasses.dataclass(frozen=True)
class Target:
    """The instance a step ran on, and what the runtime knows about it besides the engine."""

    instance_id: str
    definition_id: str
    version_id: str
    version: int
    queue: str
    workflow_properties: dict[str, Any]
    expected_checkpoint: int
    attempt: int = 1
    request_id: str | None = None
    client_key: str | None = None
    parent_id: str | None = None
    correlation_id: str | None = None
    name: str | None = None
    #: the request's type and submission time, for the metrics recorded after commit
    request_type: str | None = None
    submitted_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class Start:
    """The start of a request's first step, not written yet: its instance row at checkpoint 0
    (``row``, every column) and Queued -> Processing at ``started``. Written on its own
    (``open_start``) when the step runs long, else by the step's save, which then inserts the
    row in its saved state and, for a step that finishes the workflow, moves the request from
    Queued to its end in one UPDATE."""

    request_id: str
    row: dict[str, Any]
    started: dt.datetime


@dataclasses.dataclass
class Saved:
    """What the save produced: new outbox rows to publish after commit, the new checkpoint, and
    what the metrics recorded after commit need (the request's terminal status, a retry)."""

    outbox_ids: list[str] = dataclasses.field(default_factory=list)
    checkpoint: int = 0
    request_status: str | None = None
    finished_at: dt.datetime | None = None
    retry_scheduled: bool = False
