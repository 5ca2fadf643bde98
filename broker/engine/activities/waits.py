"""Blocking activities: they leave a bookmark and the instance suspends until a stimulus.

Bookmark names and payloads (what the runtime matches a stimulus against):

- Event / SignalReceived: ``Elsa.Event`` with ``{"eventName": name}``; resumed with the event
  payload, which becomes the ``result`` output.
- Delay / Timer / StartAt: ``Elsa.Delay`` / ``Elsa.Timer`` / ``Elsa.StartAt`` with
  ``{"resumeAt": iso}`` and ``due_at``; Cron: ``Elsa.Cron`` with ``{"executeAt": iso,
  "cronExpression"}``; resumed by the timer job (input ignored). As in Elsa, a Timer inside a
  running workflow fires once; recurring is the Timer *trigger*'s (``broker.runtime.schedules``).
- RunTask: ``Elsa.RunTask`` with ``{"taskName", "taskId"}`` plus a ``RunTask`` command; resumed
  with the task's result (the ``result`` output).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour
from broker.engine.activity_context import ActivityContext
from broker.engine.cron import next_occurrence
from broker.engine.results import RunTask as RunTaskCommand
from broker.engine.values import as_datetime, as_text, as_timedelta
from broker.errors import WorkflowFault

EVENT = "Elsa.Event"


def started_by(ax: ActivityContext) -> bool:
    """True when this activity is the trigger the instance was started with."""
    trigger = ax.state.get("trigger") or {}
    if trigger.get("activityId") != ax.node.id or ax.state.get("triggerConsumed"):
        return False
    ax.state["triggerConsumed"] = True
    return True


class Waiting(Behaviour):
    blocking = True

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        ax.set_output("result", value)
        ax.complete()


class Event(Waiting):
    def event_name(self, ax: ActivityContext) -> str:
        return as_text(ax.get("eventName"))

    def execute(self, ax: ActivityContext) -> None:
        name = self.event_name(ax)
        if not name:
            raise WorkflowFault(
                f"activity {ax.node.id!r} waits for an event with no name", activity_id=ax.node.id
            )
        if started_by(ax):
            ax.set_output("result", (ax.state.get("trigger") or {}).get("payload"))
            ax.complete()
            return
        ax.bookmark(EVENT, {"eventName": name})


class SignalReceived(Event):
    """The seed's alias: waits like an Event named by its ``signal`` input."""

    def event_name(self, ax: ActivityContext) -> str:
        return as_text(ax.get("signal", ax.get("eventName")))


class Delay(Waiting):
    bookmark_name = "Elsa.Delay"
    input_name = "timeSpan"

    def execute(self, ax: ActivityContext) -> None:
        if self.bookmark_name == "Elsa.Timer" and started_by(ax):
            ax.complete()
            return
        due = ax.now() + as_timedelta(ax.get(self.input_name, 0))
        ax.bookmark(self.bookmark_name, {"resumeAt": due.isoformat()}, due_at=due)

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        ax.complete()


class Timer(Delay):
    bookmark_name = "Elsa.Timer"
    input_name = "interval"


class StartAt(Delay):
    bookmark_name = "Elsa.StartAt"

    def execute(self, ax: ActivityContext) -> None:
        if started_by(ax):
            ax.complete()
            return
        due = as_datetime(ax.get("dateTime"))
        if due <= ax.now():  # as Elsa's: a time already reached does not wait
            ax.complete()
            return
        ax.bookmark(self.bookmark_name, {"resumeAt": due.isoformat()}, due_at=due)


class Cron(Delay):
    """Waits for the next time its six-field cron expression names (Elsa's ``Cron``); as the
    trigger that started the instance it completes at once, as Elsa's does."""

    bookmark_name = "Elsa.Cron"

    def execute(self, ax: ActivityContext) -> None:
        if started_by(ax):
            ax.complete()
            return
        expression = as_text(ax.get("cronExpression"))
        try:
            due = next_occurrence(expression, ax.now())
        except ValueError as exc:
            raise WorkflowFault(str(exc), activity_id=ax.node.id) from exc
        payload = {"executeAt": due.isoformat(), "cronExpression": expression}
        ax.bookmark(self.bookmark_name, payload, due_at=due)


class RunTask(Waiting):
    def execute(self, ax: ActivityContext) -> None:
        task_name = as_text(ax.get("taskName"))
        if not task_name:
            raise WorkflowFault(f"RunTask {ax.node.id!r} has no taskName", activity_id=ax.node.id)
        payload = ax.get("args", ax.get("payload"))
        bookmark = ax.bookmark("Elsa.RunTask", {"taskName": task_name, "taskId": ax.id})
        ax.emit(RunTaskCommand(task_name=task_name, payload=payload, bookmark_id=bookmark["id"]))
