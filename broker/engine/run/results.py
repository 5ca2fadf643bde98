"""What one engine step hands back to the runtime: state, bookmarks, commands, journal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping
from typing import Any


class WorkflowStatus(enum.StrEnum):
    RUNNING = "Running"
    FINISHED = "Finished"


class WorkflowSubStatus(enum.StrEnum):
    EXECUTING = "Executing"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"
    FAULTED = "Faulted"
    CANCELLED = "Cancelled"


@dataclasses.dataclass(frozen=True)
class Bookmark:
    """A point where the instance waits for a stimulus (event, timer, child, task result)."""

    id: str
    name: str
    hash: str  # SHA-256 hex of name + JSON payload + activity instance id
    payload: Mapping[str, Any]
    activity_id: str
    activity_instance_id: str
    due_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class DispatchWorkflow:
    """Start another workflow through the outbox (its id is chosen before dispatch)."""

    child_instance_id: str
    definition_id: str
    input: Mapping[str, Any]
    correlation_id: str | None
    wait_for_completion: bool
    parent_instance_id: str
    bookmark_id: str | None = None  # resumed with the child's output when waiting
    #: the child instance's properties (Elsa's ``ParentInstanceId``, ``WaitForCompletion``)
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PublishEvent:
    name: str
    correlation_id: str | None
    payload: Any
    #: Elsa's ``isLocal``: only this workflow instance's event bookmarks may receive it
    local: bool = False


@dataclasses.dataclass(frozen=True)
class RunTask:
    task_name: str
    payload: Any
    bookmark_id: str


@dataclasses.dataclass(frozen=True)
class RunActivity:
    """Run a task-mode Python activity as its own Celery task on ``queue``; its answer resumes
    ``bookmark_id`` (docs/activities.md)."""

    type_name: str
    inputs: Mapping[str, Any]
    bookmark_id: str
    queue: str | None


Command = DispatchWorkflow | PublishEvent | RunTask | RunActivity


@dataclasses.dataclass(frozen=True)
class JournalEntry:
    activity_id: str
    activity_instance_id: str
    activity_type: str
    activity_name: str | None
    event_name: str  # Started, Completed, Faulted, Resumed, Cancelled
    outcome: str | None
    timestamp: dt.datetime
    #: the inputs the activity evaluated and the outputs it set, as its log persistence allows
    #: (``broker.engine.model.log_persistence``); on the entry that closes what ran in this step
    inputs: Mapping[str, Any] | None = None
    outputs: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Fault:
    message: str
    code: str | None
    category: str | None
    activity_id: str | None
    #: Elsa's ExceptionState of the failure: ``{"type", "message", "innerException"}``
    exception: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Incident:
    """An activity failure recorded while the workflow continued (strategy ``continue``)."""

    activity_id: str
    activity_instance_id: str
    message: str
    code: str | None
    #: Elsa's ExceptionState of the failure: ``{"type", "message", "innerException"}``
    exception: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Retry:
    """An activity raised ``RetryLater``; ``Engine.retry(state)`` runs it again."""

    activity_id: str
    activity_instance_id: str
    error: str
    delay: float | None
    policy: Mapping[str, Any] | None
    #: the resilience strategy that retries (Elsa.Resilience), or None for the broker's policy
    strategy: str | None = None


@dataclasses.dataclass(frozen=True)
class ChildInstance:
    """A workflow instance run in-process by ExecuteWorkflow (its ``state`` if not finished).

    ``result`` is the child's own step, saved by the runtime as the child's first step (its
    bookmarks, commands and journal are the child's, not the parent's); ``parent_bookmark_id``
    names the parent's bookmark that waits for the child to finish."""

    id: str
    definition_id: str
    definition_version_id: str
    correlation_id: str | None
    parent_id: str
    status: str
    sub_status: str
    properties: Mapping[str, Any]
    output: Any
    state: Mapping[str, Any]
    bookmarks: tuple[Bookmark, ...] = ()
    result: RunResult | None = None
    parent_bookmark_id: str | None = None
    version: int = 0
    workflow_properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RunResult:
    state: dict[str, Any]
    status: str
    sub_status: str
    bookmarks: tuple[Bookmark, ...]
    commands: tuple[Command, ...]
    journal: tuple[JournalEntry, ...]
    output: Any
    fault: Fault | None
    retry: Retry | None
    write_lines: tuple[str, ...]
    child_instances: tuple[ChildInstance, ...]
    incidents: tuple[Incident, ...] = ()
    http_response: Mapping[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status == WorkflowStatus.FINISHED
