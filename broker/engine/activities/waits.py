"""Blocking activities: they leave a bookmark and the instance suspends until a stimulus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour, activity
from broker.engine.model.cron import next_occurrence
from broker.engine.model.specs import RESULT, ActivitySpec, InputSpec
from broker.engine.model.values import as_datetime, as_text, as_timedelta
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.results import RunTask as RunTaskCommand
from broker.errors import WorkflowFault
from broker.names import CRON, EVENT, START_AT, TIMER


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


@activity(
    EVENT,
    ActivitySpec(
        "Primitives",
        "Wait for an event (or start the workflow when one arrives).",
        inputs=(InputSpec("EventName", "String", "The name of the event."),),
        outputs=(RESULT,),
        kind="Trigger",
    ),
    outbound=("Done",),
    trigger=EVENT,
    trigger_aliases=("Event",),
)
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


@activity(
    "Elsa.SignalReceived",
    ActivitySpec(
        "Primitives",
        "Wait for a signal (an event by another name).",
        inputs=(InputSpec("Signal", "String", "The name of the signal."),),
        outputs=(RESULT,),
        kind="Trigger",
        browsable=False,
    ),
    aliases=("Elsa.Primitives.SignalReceived",),
    outbound=("Done",),
    trigger=EVENT,
    trigger_aliases=("SignalReceived",),
)
class SignalReceived(Event):
    """The seed's alias: waits like an Event named by its ``signal`` input."""

    def event_name(self, ax: ActivityContext) -> str:
        return as_text(ax.get("signal", ax.get("eventName")))


@activity(
    "Elsa.Delay",
    ActivitySpec(
        "Scheduling",
        "Wait for a duration.",
        inputs=(InputSpec("TimeSpan", "TimeSpan", "How long to wait (hh:mm:ss)."),),
    ),
    outbound=("Done",),
)
class Delay(Waiting):
    bookmark_name = "Elsa.Delay"
    input_name = "timeSpan"

    def execute(self, ax: ActivityContext) -> None:
        if self.bookmark_name == TIMER and started_by(ax):
            ax.complete()
            return
        due = ax.now() + as_timedelta(ax.get(self.input_name, 0))
        ax.bookmark(self.bookmark_name, {"resumeAt": due.isoformat()}, due_at=due)

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        ax.complete()


@activity(
    TIMER,
    ActivitySpec(
        "Scheduling",
        "Start or resume the workflow at an interval.",
        inputs=(InputSpec("Interval", "TimeSpan", "The interval (hh:mm:ss)."),),
        kind="Trigger",
    ),
    outbound=("Done",),
    trigger=TIMER,
    trigger_aliases=("Elsa.Scheduling.Timer", "Timer"),
)
class Timer(Delay):
    bookmark_name = TIMER
    input_name = "interval"


@activity(
    START_AT,
    ActivitySpec(
        "Scheduling",
        "Wait until a moment.",
        inputs=(InputSpec("DateTime", "DateTimeOffset", "When.", ui_hint="datetime-picker"),),
        kind="Trigger",
    ),
    outbound=("Done",),
    trigger=START_AT,
    trigger_aliases=("Elsa.Scheduling.StartAt", "StartAt"),
)
class StartAt(Delay):
    bookmark_name = START_AT

    def execute(self, ax: ActivityContext) -> None:
        if started_by(ax):
            ax.complete()
            return
        due = as_datetime(ax.get("dateTime"))
        if due <= ax.now():  # as Elsa's: a time already reached does not wait
            ax.complete()
            return
        ax.bookmark(self.bookmark_name, {"resumeAt": due.isoformat()}, due_at=due)


@activity(
    CRON,
    ActivitySpec(
        "Scheduling",
        "Start or resume the workflow at the times a cron expression names.",
        inputs=(
            InputSpec("CronExpression", "String", "Six fields, seconds first (0 */5 * * * *)."),
        ),
        kind="Trigger",
    ),
    outbound=("Done",),
    trigger=CRON,
    trigger_aliases=("Elsa.Scheduling.Cron", "Cron"),
)
class Cron(Delay):
    """Waits for the next time its six-field cron expression names (Elsa's ``Cron``); as the
    trigger that started the instance it completes at once, as Elsa's does."""

    bookmark_name = CRON

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


@activity(
    "Elsa.RunTask",
    ActivitySpec(
        "Primitives",
        "Ask an external worker to run a task and wait for its result.",
        inputs=(
            InputSpec("TaskName", "String", "The name of the task."),
            InputSpec("Args", "Object", "The task's arguments.", ui_hint="json-editor"),
        ),
        outputs=(RESULT,),
        kind="Task",
    ),
    outbound=("Done",),
)
class RunTask(Waiting):
    def execute(self, ax: ActivityContext) -> None:
        task_name = as_text(ax.get("taskName"))
        if not task_name:
            raise WorkflowFault(f"RunTask {ax.node.id!r} has no taskName", activity_id=ax.node.id)
        payload = ax.get("args", ax.get("payload"))
        bookmark = ax.bookmark("Elsa.RunTask", {"taskName": task_name, "taskId": ax.id})
        ax.emit(RunTaskCommand(task_name=task_name, payload=payload, bookmark_id=bookmark["id"]))
