"""The engine's entry points: start, resume, retry and cancel workflow instances, each from
JSON state to a ``RunResult``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour
from broker.engine.activities.catalog import behaviour_for
from broker.engine.model.definition import Activity, Input, Variable, WorkflowDefinition
from broker.engine.model.lookup import DefinitionLookup
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.errors import InstanceFinished, NothingToRetry, UnknownBookmark
from broker.engine.run.interpreter import Run
from broker.engine.run.ports import EngineServices
from broker.engine.run.results import (
    Bookmark,
    Fault,
    Retry,
    RunResult,
    WorkflowStatus,
    WorkflowSubStatus,
)
from broker.engine.run.state import migrate, new_scope, new_state

__all__ = [
    "Engine",
    "EngineServices",
    "forget_memory_variables",
    "initialise_variables",
    "to_bookmark",
    "workflow_output",
]


class Engine:
    """Runs Elsa 3 workflows. ``definitions`` resolves children and composite activities."""

    def __init__(
        self,
        definitions: DefinitionLookup,
        services: EngineServices | None = None,
        *,
        flowchart_mode: str = "CounterBased",
        incident_strategy: str = "fault",
        js_time_limit: float = 1.0,
        js_memory_limit: int = 32 * 1024 * 1024,
    ) -> None:
        self.definitions = definitions
        self.js_time_limit = js_time_limit
        self.js_memory_limit = js_memory_limit
        self.services = services or EngineServices()
        self.flowchart_mode = flowchart_mode
        self.incident_strategy = incident_strategy

    def behaviour(self, node: Activity) -> Behaviour:
        return behaviour_for(node, self.definitions)

    def start(
        self,
        definition: WorkflowDefinition,
        *,
        instance_id: str,
        input: Mapping[str, Any] | None = None,
        correlation_id: str | None = None,
        parent_id: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        write_lines: list[str] | None = None,
        name: str | None = None,
    ) -> RunResult:
        """Start a new instance. ``trigger`` names the activity that starts it
        (``{"activityId": ..., "headers": {...}}``); ``options`` may set ``flowchartMode``,
        ``incidentStrategy``, instance ``properties`` and ``httpContext`` (``{"id": ...}``: the
        HTTP request the instance answers, as a submission is; an HTTP trigger is one); ``name``:
        the instance's name when its starter gave one (else the definition's)."""
        options = options or {}
        mode = options.get("flowchartMode") or definition.flowchart_mode or self.flowchart_mode
        strategy = (
            options.get("incidentStrategy")
            or definition.incident_strategy
            or definition.custom_properties.get("incidentStrategy")
            or self.incident_strategy
        )
        properties = dict(options.get("properties") or {})
        if parent_id:
            properties.setdefault("ParentInstanceId", parent_id)
        state = new_state(
            instance_id=instance_id,
            definition_id=definition.definition_id,
            definition_version_id=definition.id,
            version=definition.version,
            name=name or definition.name,
            input=input,
            correlation_id=correlation_id,
            parent_id=parent_id,
            flowchart_mode=str(mode),
            incident_strategy=str(strategy),
            properties=properties,
        )
        if trigger:
            state["trigger"] = dict(trigger)
            if trigger.get("method"):  # started by an HTTP call: it awaits the response
                state["httpContext"] = {"id": trigger.get("requestId"), "source": "trigger"}
        if isinstance(options.get("httpContext"), Mapping):
            state["httpContext"] = dict(options["httpContext"])
        run = Run(self, state, write_lines=write_lines)
        run.remember(definition)
        root = run.create_context(None, None, definition.id)
        root["scope"] = new_scope(
            definition.variables,
            kind="workflow",
            inputs=state["input"],
            outputs=[o.name for o in definition.outputs],
        )
        root["scope"]["root"] = True
        state["rootContextId"] = root["id"]
        initialise_variables(run, root, definition)
        run.drive()
        return self._result(run)

    def resume(
        self,
        state: Mapping[str, Any],
        *,
        bookmark_id: str,
        input: Any = None,
        write_lines: list[str] | None = None,
    ) -> RunResult:
        """Resume the activity waiting on ``bookmark_id`` with ``input`` (the stimulus)."""
        current = migrate(_copy(state))
        if current["status"] == WorkflowStatus.FINISHED:
            raise InstanceFinished(current["instanceId"])
        bookmark = next((b for b in current["bookmarks"] if b["id"] == bookmark_id), None)
        if bookmark is None:
            raise UnknownBookmark(current["instanceId"], bookmark_id)
        run = Run(self, current, write_lines=write_lines)
        current["bookmarks"] = [b for b in current["bookmarks"] if b["id"] != bookmark_id]
        current["subStatus"] = WorkflowSubStatus.EXECUTING
        ctx = run.contexts[bookmark["activityInstanceId"]]
        node = run.node(ctx)
        ctx["status"] = "Running"
        run.record(ctx, node, "Resumed")
        ax = ActivityContext(run, ctx, node)
        run.guard(ax, lambda: self.behaviour(node).resume(ax, bookmark, input))
        run.drive()
        return self._result(run)

    def retry(self, state: Mapping[str, Any], *, write_lines: list[str] | None = None) -> RunResult:
        """Run again the activity that raised ``RetryLater`` or faulted (a replay)."""
        current = migrate(_copy(state))
        if current["subStatus"] == WorkflowSubStatus.SUSPENDED:
            # Activities left faulted by the continue-with-incidents strategy run again.
            stalled = [c for c in current["contexts"].values() if c.get("status") == "Faulted"]
            for ctx in stalled:
                ctx["status"] = "Scheduled"
                current["queue"].append(ctx["id"])
            if not stalled:
                raise NothingToRetry(current["instanceId"])
        elif current["subStatus"] not in (WorkflowSubStatus.FAULTED, WorkflowSubStatus.EXECUTING):
            raise NothingToRetry(current["instanceId"])
        if not current["queue"]:
            raise NothingToRetry(current["instanceId"])
        current["status"] = WorkflowStatus.RUNNING
        current["subStatus"] = WorkflowSubStatus.EXECUTING
        current["fault"] = None
        current["retry"] = None
        run = Run(self, current, write_lines=write_lines)
        run.drive()
        return self._result(run)

    resume_retry = retry

    def cancel(self, state: Mapping[str, Any]) -> RunResult:
        current = migrate(_copy(state))
        run = Run(self, current)
        if current["status"] != WorkflowStatus.FINISHED:
            current["subStatus"] = WorkflowSubStatus.CANCELLED
            run.finish_workflow()
        return self._result(run)

    def _result(self, run: Run) -> RunResult:
        state = run.state
        if state["status"] != WorkflowStatus.FINISHED and run.retry is None and not run.queue:
            if state["bookmarks"] or run.stalled():
                state["subStatus"] = WorkflowSubStatus.SUSPENDED
            else:
                # Nothing runs and nothing waits: the workflow has nowhere left to go.
                run.finish_workflow()
        if state["status"] != WorkflowStatus.FINISHED:
            forget_memory_variables(run)
        bookmarks: tuple[Bookmark, ...] = ()
        if state["subStatus"] != WorkflowSubStatus.FAULTED:
            bookmarks = tuple(to_bookmark(b) for b in state["bookmarks"])
        fault = Fault(**state["fault"]) if state.get("fault") else None
        retry = Retry(**state["retry"]) if state.get("retry") else None
        return RunResult(
            state=state,
            status=state["status"],
            sub_status=state["subStatus"],
            bookmarks=bookmarks,
            commands=tuple(run.commands),
            journal=tuple(run.journal),
            output=workflow_output(state),
            fault=fault,
            retry=retry,
            write_lines=tuple(run.write_lines),
            child_instances=tuple(run.child_instances),
            incidents=tuple(run.incidents),
            http_response=state.get("httpResponse"),
        )


def initialise_variables(run: Run, ctx: dict[str, Any], definition: WorkflowDefinition) -> None:
    """Give declared variables their initial values (Literal, converted by type)."""
    scope = ctx["scope"]
    node = run.node(ctx)
    for variable in definition.variables:
        if variable.value is not None:
            scope["vars"][variable.name] = run.evaluate(ctx, node, _literal(variable))


def forget_memory_variables(run: Run) -> None:
    """Clear the variables stored with Elsa's ``MemoryStorageDriver`` from a state about to be
    saved: their values live only while the instance runs in one go, as in a new Elsa process
    after a suspension."""
    for ctx in run.state["contexts"].values():
        scope = ctx.get("scope")
        if not scope:
            continue
        node = run.node(ctx)
        variables = list(node.variables)
        if ctx.get("node") is None:
            variables += run.definition(ctx["def"]).variables
        for variable in variables:
            if variable.storage == "memory" and variable.name in scope["vars"]:
                scope["vars"][variable.name] = None


def _literal(variable: Variable) -> Input:
    return Input(variable.type_name, {"type": "Literal", "value": variable.value})


def workflow_output(state: Mapping[str, Any]) -> Any:
    """Declared outputs (SetOutput), else the last WriteHttpResponse content, else None."""
    root = state.get("output")
    if root:
        return root
    response = state.get("httpResponse")
    if response is not None:
        return response.get("content")
    return None


def to_bookmark(raw: Mapping[str, Any]) -> Bookmark:
    due = raw.get("dueAt")
    return Bookmark(
        id=raw["id"],
        name=raw["name"],
        hash=raw["hash"],
        payload=raw["payload"],
        activity_id=raw["activityId"],
        activity_instance_id=raw["activityInstanceId"],
        due_at=dt.datetime.fromisoformat(due) if due else None,
    )


def _copy(state: Mapping[str, Any]) -> dict[str, Any]:
    # A deep copy through JSON: the caller's dict stays untouched and the state stays JSON.
    copied: dict[str, Any] = json.loads(json.dumps(state))
    return copied
