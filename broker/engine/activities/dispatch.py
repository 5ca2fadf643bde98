"""Other workflows: dispatch (through the outbox), execute in-process, composites, events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import DONE, CompletedChild, activity
from broker.engine.activities.control import WorkflowScope
from broker.engine.activities.waits import Waiting
from broker.engine.model.definition import Input, WorkflowDefinition, camel_case
from broker.engine.model.specs import RESULT, ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_bool, as_list, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.results import ChildInstance
from broker.engine.run.results import DispatchWorkflow as DispatchCommand
from broker.engine.run.results import PublishEvent as PublishCommand
from broker.engine.run.state import child_instance_id, new_scope
from broker.errors import WorkflowFault

_CORRELATION = InputSpec("CorrelationId", "String", "The correlation id of the new instance.")
_WAIT = InputSpec("WaitForCompletion", "Boolean", "Wait until the child workflow finishes.")
_DEFINITION = InputSpec(
    "WorkflowDefinitionId",
    "String",
    "The definition id of the workflow to run.",
    ui_hint="workflow-definition-picker",
)

MAX_COMPOSITE_DEPTH = 32


def require_published(ax: ActivityContext, definition_id: str) -> None:
    """Like Elsa, a dispatch faults at once when no published workflow has the definition id."""
    if ax.definitions.by_definition_id(definition_id) is None:
        raise WorkflowFault(
            f"No published version of workflow definition with ID {definition_id} found.",
            activity_id=ax.node.id,
        )


def child_input(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    raise WorkflowFault(f"a child workflow's input must be an object, not {type(value).__name__}")


@activity(
    "Elsa.DispatchWorkflow",
    ActivitySpec(
        "Composition",
        "Start a child workflow.",
        inputs=(
            _DEFINITION,
            _CORRELATION,
            InputSpec("Input", "Object", "The child's input.", ui_hint="json-editor"),
            _WAIT,
        ),
        outputs=(OutputSpec("ChildInstanceId", "String"), RESULT),
    ),
    outbound=("Done",),
)
class DispatchWorkflow(Waiting):
    def execute(self, ax: ActivityContext) -> None:
        definition_id = as_text(ax.get("workflowDefinitionId"))
        if not definition_id:
            raise WorkflowFault(
                f"activity {ax.node.id!r} names no workflow to dispatch", activity_id=ax.node.id
            )
        require_published(ax, definition_id)
        wait = as_bool(ax.get("waitForCompletion", False))
        child_id = child_instance_id(ax.instance_id, ax.id)
        correlation = ax.get("correlationId")
        bookmark_id = None
        if wait:
            bookmark_id = ax.bookmark("Elsa.DispatchWorkflow", {"childInstanceId": child_id})["id"]
        ax.emit(
            DispatchCommand(
                child_instance_id=child_id,
                definition_id=definition_id,
                input=child_input(ax.get("input")),
                correlation_id=as_text(correlation) if correlation is not None else None,
                wait_for_completion=wait,
                parent_instance_id=ax.instance_id,
                bookmark_id=bookmark_id,
            )
        )
        ax.set_output("childInstanceId", child_id)
        if not wait:
            ax.complete()


@activity(
    "Elsa.BulkDispatchWorkflows",
    ActivitySpec(
        "Composition",
        "Start one child workflow per item.",
        inputs=(
            _DEFINITION,
            InputSpec("Items", "Object", "One input per child.", ui_hint="json-editor"),
            _CORRELATION,
            _WAIT,
        ),
        outputs=(RESULT,),
        ports=("ChildCompleted", "ChildFaulted"),
    ),
)
class BulkDispatchWorkflows(Waiting):
    """Elsa's ``BulkDispatchWorkflows``: one child per item of ``items``.

    Each child's input is ``input`` (the base), ``ParentInstanceId`` and the item: an object item
    is merged in, any other is put under ``defaultItemInputKey`` (``Item``). ``waitForCompletion``
    defaults to true, as in Elsa: then, as each child finishes, its ``childCompleted`` or
    ``childFaulted`` port runs (when the file has one, with the child's output and sub-status as
    this activity's ``childResult`` output), and once every child finished and its port ran the
    activity completes through ``Completed`` and ``Done`` (its ``result``: the children's
    outputs in finishing order). Without waiting it completes through ``Done`` at once.
    """

    def execute(self, ax: ActivityContext) -> None:
        definition_id = as_text(ax.get("workflowDefinitionId"))
        require_published(ax, definition_id)
        wait = as_bool(ax.get("waitForCompletion", True))
        correlation = ax.get("correlationId")
        items = as_list(ax.get("items"))
        key = as_text(ax.get("defaultItemInputKey", "Item")) or "Item"
        base = child_input(ax.get("input"))
        ax.props.update(results=[], dispatched=len(items), finished=0)
        for index, item in enumerate(items):
            child_id = child_instance_id(ax.instance_id, ax.id, index)
            bookmark_id = None
            if wait:
                bookmark_id = ax.bookmark(
                    "Elsa.BulkDispatchWorkflows", {"childInstanceId": child_id}
                )["id"]
            item_input = dict(item) if isinstance(item, Mapping) else {key: item}
            ax.emit(
                DispatchCommand(
                    child_instance_id=child_id,
                    definition_id=definition_id,
                    input={**base, "ParentInstanceId": ax.instance_id, **item_input},
                    correlation_id=as_text(correlation) if correlation is not None else None,
                    wait_for_completion=wait,
                    parent_instance_id=ax.instance_id,
                    bookmark_id=bookmark_id,
                )
            )
        if not wait or not items:
            ax.complete("Done")

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        # The runtime resumes with Elsa's child-completed input; a bare value is the output.
        if isinstance(value, Mapping) and "WorkflowSubStatus" in value:
            sub_status = str(value.get("WorkflowSubStatus"))
            output = value.get("WorkflowOutput")
            child_id = value.get("WorkflowInstanceId")
        else:
            sub_status, output = "Finished", value
            child_id = (bookmark.get("payload") or {}).get("childInstanceId")
        ax.props["finished"] = int(ax.props.get("finished", 0)) + 1
        ax.props["results"].append(output)
        port = ax.node.ports.get("childFaulted" if sub_status == "Faulted" else "childCompleted")
        if port is not None:
            ax.set_output(
                "childResult",
                {"childInstanceId": child_id, "subStatus": sub_status, "output": output},
            )
            ax.schedule(port)
            return
        self.attempt_to_complete(ax)

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        self.attempt_to_complete(ax)

    @staticmethod
    def attempt_to_complete(ax: ActivityContext) -> None:
        waiting = any(b["activityInstanceId"] == ax.id for b in ax.state["bookmarks"])
        done = ax.props["finished"] >= ax.props.get("dispatched", 0)
        if done and not waiting and not ax.has_children():
            ax.set_output("result", ax.props["results"])
            ax.complete("Completed", "Done")


@activity(
    "Elsa.ExecuteWorkflow",
    ActivitySpec(
        "Composition",
        "Run a child workflow and wait for it.",
        inputs=(
            _DEFINITION,
            _CORRELATION,
            InputSpec("Input", "Object", "The child's input.", ui_hint="json-editor"),
            _WAIT,
        ),
        outputs=(RESULT,),
    ),
    outbound=("Done",),
)
class ExecuteWorkflow(Waiting):
    """Runs the child in-process now; if it suspends and the parent waits, so does the parent
    (bookmark ``Elsa.ExecuteWorkflow`` with ``{"childInstanceId"}``, resumed with its output)."""

    def execute(self, ax: ActivityContext) -> None:
        definition_id = as_text(ax.get("workflowDefinitionId"))
        definition = ax.definitions.by_definition_id(definition_id)
        if definition is None:
            raise WorkflowFault(
                f"workflow definition {definition_id!r} is not loaded", activity_id=ax.node.id
            )
        wait = as_bool(ax.get("waitForCompletion", False))
        correlation = ax.get("correlationId")
        child_id = child_instance_id(ax.instance_id, ax.id)
        result = ax.start_workflow(
            definition,
            instance_id=child_id,
            input=child_input(ax.get("input")),
            correlation_id=as_text(correlation) if correlation is not None else None,
            options={"flowchartMode": ax.state["flowchartMode"]},
        )
        ax.run.commands.extend(result.commands)
        ax.run.child_instances.extend(result.child_instances)
        ax.run.child_instances.append(
            ChildInstance(
                id=child_id,
                definition_id=definition.definition_id,
                definition_version_id=definition.id,
                correlation_id=result.state["correlationId"],
                parent_id=ax.instance_id,
                status=result.status,
                sub_status=result.sub_status,
                properties=result.state["properties"],
                output=result.output,
                state=result.state,
                bookmarks=result.bookmarks,
            )
        )
        if wait and not result.finished:
            ax.bookmark("Elsa.ExecuteWorkflow", {"childInstanceId": child_id})
            return
        ax.set_output(
            "result",
            {
                "workflowInstanceId": child_id,
                "status": result.status,
                "subStatus": result.sub_status,
                "output": result.output,
            },
        )
        ax.complete()

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        child_id = bookmark["payload"].get("childInstanceId")
        ax.set_output(
            "result",
            {
                "workflowInstanceId": child_id,
                "status": "Finished",
                "subStatus": "Finished",
                "output": value,
            },
        )
        ax.complete()


class Composite(WorkflowScope):
    """A workflow-definition activity: the other definition runs inside this instance, its
    declared inputs from this node's inputs, its outputs back to this node's bindings."""

    def execute(self, ax: ActivityContext) -> None:
        definition = resolve_composite(ax)
        depth = sum(1 for _ in composite_ancestors(ax))
        if depth >= MAX_COMPOSITE_DEPTH:
            raise WorkflowFault(
                f"workflow-definition activities nest deeper than {MAX_COMPOSITE_DEPTH} (a cycle?)",
                activity_id=ax.node.id,
            )
        inputs: dict[str, Any] = {}
        for port in definition.inputs:
            spec = ax.node.inputs.get(camel_case(port.name)) or ax.node.inputs.get(port.name)
            if spec is not None and spec.expression is not None:
                inputs[port.name] = ax.run.evaluate(
                    ax.ctx, ax.node, Input(port.type_name or spec.type_name, spec.expression)
                )
        scope = new_scope(
            definition.variables,
            kind="workflow",
            inputs=inputs,
            outputs=[port.name for port in definition.outputs],
        )
        scope["definitionVersionId"] = definition.id
        ax.ctx["scope"] = scope
        ax.run.remember(definition)
        for variable in definition.variables:
            if variable.value is not None:
                scope["vars"][variable.name] = ax.run.evaluate(
                    ax.ctx,
                    ax.node,
                    Input(variable.type_name, {"type": "Literal", "value": variable.value}),
                )
        ax.schedule(definition.root, def_id=definition.id)

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        self.finish(ax, None)

    def finish(self, ax: ActivityContext, outcomes: tuple[str, ...] | None) -> None:
        scope = ax.ctx["scope"]
        chosen = outcomes or tuple(scope.get("outcomes") or ()) or DONE
        definition = ax.run.definition(scope["definitionVersionId"])
        for port in definition.outputs:
            if port.name not in scope["outputs"]:
                continue
            binding = camel_case(port.name)
            if binding not in ax.node.outputs and port.name in ax.node.outputs:
                binding = port.name
            ax.set_output(binding, scope["outputs"][port.name])
        ax.complete(*chosen)


def composite_ancestors(ax: ActivityContext) -> list[str]:
    found = []
    parent = ax.ctx["parent"]
    while parent:
        ctx = ax.run.contexts[parent]
        if ctx.get("scope", {}).get("kind") == "workflow" and ctx["parent"]:
            found.append(parent)
        parent = ctx["parent"]
    return found


def resolve_composite(ax: ActivityContext) -> WorkflowDefinition:
    """By version id; else the published (else latest) version; else by activity type."""
    lookup = ax.definitions
    version_id = ax.node.properties.get("workflowDefinitionVersionId")
    definition_id = ax.node.properties.get("workflowDefinitionId")
    found = lookup.by_version_id(version_id) if isinstance(version_id, str) else None
    if found is None and isinstance(definition_id, str):
        found = lookup.by_definition_id(definition_id)
    if found is None:
        found = lookup.by_activity_type(ax.node.type)
    if found is None:
        raise WorkflowFault(
            f"no workflow definition provides activity type {ax.node.type!r}",
            activity_id=ax.node.id,
        )
    return found


@activity(
    "Elsa.PublishEvent",
    ActivitySpec(
        "Primitives",
        "Publish an event that resumes waiting workflows.",
        inputs=(
            InputSpec("EventName", "String", "The name of the event."),
            InputSpec("CorrelationId", "String", "Only workflows with this correlation id."),
            InputSpec(
                "IsLocalEvent",
                "Boolean",
                "Whether the event is local to the workflow: delivered to this instance only.",
            ),
            InputSpec("Payload", "Object", "The event payload.", ui_hint="json-editor"),
        ),
    ),
    outbound=("Done",),
)
class PublishEvent(Waiting):
    blocking = False

    def execute(self, ax: ActivityContext) -> None:
        name = as_text(ax.get("eventName"))
        if not name:
            raise WorkflowFault(
                f"PublishEvent {ax.node.id!r} has no eventName", activity_id=ax.node.id
            )
        correlation = ax.get("correlationId", ax.state.get("correlationId"))
        # Elsa: an empty or blank correlation id publishes the event uncorrelated
        correlation = as_text(correlation).strip() if correlation is not None else ""
        ax.emit(
            PublishCommand(
                name=name,
                payload=ax.get("payload"),
                correlation_id=correlation or None,
                # Elsa's input is isLocalEvent; isLocal is how earlier broker files spelt it
                local=as_bool(ax.get("isLocalEvent", ax.get("isLocal", False))),
            )
        )
        ax.complete()
