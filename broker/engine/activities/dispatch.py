"""Other workflows: dispatch (through the outbox), execute in-process; events to them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import CompletedChild, activity
from broker.engine.activities.waits import Waiting
from broker.engine.expr import expressions
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.specs import RESULT, ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_bool, as_list, as_text
from broker.engine.run.activity_context import ActivityContext, ActivityScope
from broker.engine.run.results import ChildInstance
from broker.engine.run.results import DispatchWorkflow as DispatchCommand
from broker.engine.run.results import PublishEvent as PublishCommand
from broker.engine.run.state import child_instance_id
from broker.errors import WorkflowFault

_CORRELATION = InputSpec(
    "CorrelationId", "String", "The correlation ID to associate the workflow with."
)
_WAIT = InputSpec(
    "WaitForCompletion",
    "Boolean",
    "Wait for the child workflow to complete before completing this activity.",
)
_DEFINITION = InputSpec(
    "WorkflowDefinitionId",
    "String",
    "The definition ID of the workflow to run.",
    ui_hint="workflow-definition-picker",
)

#: the bookmark names of the activities that wait for children
DISPATCH_BOOKMARK = "Elsa.DispatchWorkflow"
BULK_BOOKMARK = "Elsa.BulkDispatchWorkflows"
EXECUTE_BOOKMARK = "Elsa.ExecuteWorkflow"
#: the input and property names Elsa gives a child instance
PARENT_INSTANCE_ID = "ParentInstanceId"
WAIT_FOR_COMPLETION = "WaitForCompletion"


def child_input(value: Any, parent_instance_id: str) -> dict[str, Any]:
    """The input a child starts with: the activity's ``input`` and, as in Elsa, the parent's
    instance id under ``ParentInstanceId``."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise WorkflowFault(
            f"a child workflow's input must be an object, not {type(value).__name__}"
        )
    return {**value, PARENT_INSTANCE_ID: parent_instance_id}


def child_properties(parent_instance_id: str, wait: bool) -> dict[str, Any]:
    """The properties Elsa gives a child instance: its parent, and whether the parent waits."""
    properties: dict[str, Any] = {PARENT_INSTANCE_ID: parent_instance_id}
    if wait:
        properties[WAIT_FOR_COMPLETION] = True
    return properties


def require_definition(ax: ActivityContext, definition_id: str) -> WorkflowDefinition:
    """The published (else latest) version of ``definition_id``; Elsa's fault when none."""
    found = ax.definitions.by_definition_id(definition_id) if definition_id else None
    if found is None:
        raise WorkflowFault(
            f"No published version of workflow definition with ID {definition_id} found.",
            activity_id=ax.node.id,
        )
    return found


def correlation_of(ax: ActivityContext) -> str | None:
    correlation = ax.get("correlationId")
    return as_text(correlation) if correlation is not None else None


@activity(
    "Elsa.DispatchWorkflow",
    ActivitySpec(
        "Composition",
        "Create a new workflow instance of the specified workflow and dispatch it for execution.",
        inputs=(
            _DEFINITION,
            _CORRELATION,
            InputSpec(
                "Input",
                "Object",
                "The input to send to the workflow.",
                ui_hint="json-editor",
            ),
            _WAIT,
        ),
        outputs=(OutputSpec("ChildInstanceId", "String"), RESULT),
    ),
    outbound=("Done",),
)
class DispatchWorkflow(Waiting):
    """Elsa's ``DispatchWorkflow``: the child starts through the outbox once this step commits
    (its id chosen now), with ``ParentInstanceId`` in its input and properties. Waiting, the
    activity resumes with the child's output as its ``result`` once the child finishes
    (whatever its sub-status); else it completes at once."""

    def execute(self, ax: ActivityContext) -> None:
        definition = require_definition(ax, as_text(ax.get("workflowDefinitionId")))
        wait = as_bool(ax.get("waitForCompletion", False))
        child_id = child_instance_id(ax.instance_id, ax.id)
        bookmark_id = None
        if wait:
            bookmark_id = ax.bookmark(DISPATCH_BOOKMARK, {"childInstanceId": child_id})["id"]
        ax.emit(
            DispatchCommand(
                child_instance_id=child_id,
                definition_id=definition.definition_id,
                input=child_input(ax.get("input"), ax.instance_id),
                correlation_id=correlation_of(ax),
                wait_for_completion=wait,
                parent_instance_id=ax.instance_id,
                bookmark_id=bookmark_id,
                properties=child_properties(ax.instance_id, wait),
            )
        )
        ax.set_output("childInstanceId", child_id)
        if not wait:
            ax.complete()


class ItemScope(ActivityScope):
    """The scope of Elsa's ``CorrelationIdFunction``: the activity's, plus the current item as
    the argument ``Item`` (``getItem()``, ``Item``)."""

    __slots__ = ("_item",)

    def __init__(self, ax: ActivityContext, item: Any) -> None:
        super().__init__(ax.run, ax.ctx, ax.node)
        self._item = item

    def variable_names(self) -> list[str]:
        return [*super().variable_names(), "Item"]

    def get_variable(self, name: str) -> Any:
        if name == "Item":
            return self._item
        return super().get_variable(name)


@activity(
    "Elsa.BulkDispatchWorkflows",
    ActivitySpec(
        "Composition",
        "Create new workflow instances for each item in the data source and dispatch them for "
        "execution.",
        inputs=(
            _DEFINITION,
            InputSpec(
                "Items",
                "Object",
                "The data source to use for dispatching the workflows.",
                ui_hint="json-editor",
            ),
            InputSpec(
                "DefaultItemInputKey",
                "String",
                "The default key to use for the input name when sending the current item to the "
                "dispatched workflow.",
                default="Item",
            ),
            InputSpec(
                "CorrelationIdFunction",
                "String",
                "A function to compute the correlation ID to associate a dispatched workflow with.",
            ),
            InputSpec(
                "Input",
                "Object",
                "Additional input to send to the workflows being dispatched.",
                ui_hint="json-editor",
            ),
            InputSpec(
                "WaitForCompletion",
                "Boolean",
                "Wait for the dispatched workflows to complete before completing this activity.",
                default=True,
            ),
        ),
        outputs=(RESULT,),
        ports=("ChildCompleted", "ChildFaulted"),
    ),
)
class BulkDispatchWorkflows(Waiting):
    """Elsa's ``BulkDispatchWorkflows``: one child per item of ``items``.

    Each child's input is ``input`` (the base), ``ParentInstanceId`` and the item: an object item
    is merged in, any other is put under ``defaultItemInputKey`` (``Item``); its correlation id
    is ``correlationIdFunction`` evaluated with the item as ``Item`` (the broker also reads a
    plain ``correlationId``). ``waitForCompletion`` defaults to true, as in Elsa: then, as each
    child finishes, its ``childCompleted`` or ``childFaulted`` port runs (when the file has one,
    with the child's output and sub-status as this activity's ``childResult`` output), and once
    every child finished and its port ran the activity completes through ``Completed`` and
    ``Done`` (its ``result``: the children's outputs in finishing order). Without waiting it
    completes through ``Done`` at once.
    """

    def execute(self, ax: ActivityContext) -> None:
        wait = as_bool(ax.get("waitForCompletion", True))
        items = as_list(ax.get("items"))
        key = as_text(ax.get("defaultItemInputKey", "Item")) or "Item"
        base = child_input(ax.get("input"), ax.instance_id)
        definition = (
            require_definition(ax, as_text(ax.get("workflowDefinitionId"))) if items else None
        )
        ax.props.update(results=[], dispatched=len(items), finished=0)
        for index, item in enumerate(items):
            assert definition is not None
            child_id = child_instance_id(ax.instance_id, ax.id, index)
            bookmark_id = None
            if wait:
                bookmark_id = ax.bookmark(BULK_BOOKMARK, {"childInstanceId": child_id})["id"]
            item_input = dict(item) if isinstance(item, Mapping) else {key: item}
            ax.emit(
                DispatchCommand(
                    child_instance_id=child_id,
                    definition_id=definition.definition_id,
                    input={**base, **item_input},
                    correlation_id=self.correlation_id(ax, item),
                    wait_for_completion=wait,
                    parent_instance_id=ax.instance_id,
                    bookmark_id=bookmark_id,
                    properties=child_properties(ax.instance_id, wait),
                )
            )
        if not wait or not items:
            ax.complete("Done")

    @staticmethod
    def correlation_id(ax: ActivityContext, item: Any) -> str | None:
        function = ax.node.inputs.get("correlationIdFunction")
        if function is None or function.expression is None:
            return correlation_of(ax)
        found = expressions.evaluate(
            function.expression,
            ItemScope(ax, item),
            type_name="String",
            js_time_limit=ax.run.engine.js_time_limit,
            js_memory_limit=ax.run.engine.js_memory_limit,
        )
        return as_text(found) if found is not None else None

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
                {
                    "childInstanceId": child_id,
                    "subStatus": sub_status,
                    "output": output,
                },
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
        "Create a new workflow instance of the specified workflow and execute it.",
        inputs=(
            _DEFINITION,
            _CORRELATION,
            InputSpec(
                "Input",
                "Object",
                "The input to send to the workflow.",
                ui_hint="json-editor",
            ),
            _WAIT,
        ),
        outputs=(RESULT,),
        kind="Task",
    ),
    outbound=("Done",),
)
class ExecuteWorkflow(Waiting):
    """Elsa's ``ExecuteWorkflow``: runs the child in-process now (input and properties carry
    ``ParentInstanceId``; ``WaitForCompletion`` too when waiting). Not waiting, or the child
    finished, it completes with Elsa's ``ExecuteWorkflowResult`` as ``result``; else it waits
    (bookmark ``Elsa.ExecuteWorkflow``) and resumes with the child's output as ``result``."""

    def execute(self, ax: ActivityContext) -> None:
        definition = require_definition(ax, as_text(ax.get("workflowDefinitionId")))
        wait = as_bool(ax.get("waitForCompletion", False))
        child_id = child_instance_id(ax.instance_id, ax.id)
        result = ax.start_workflow(
            definition,
            instance_id=child_id,
            input=child_input(ax.get("input"), ax.instance_id),
            correlation_id=correlation_of(ax),
            options={
                "flowchartMode": ax.state["flowchartMode"],
                "properties": child_properties(ax.instance_id, wait),
            },
        )
        bookmark_id = None
        if wait and not result.finished:
            bookmark_id = ax.bookmark(EXECUTE_BOOKMARK, {"childInstanceId": child_id})["id"]
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
                result=result,
                parent_bookmark_id=bookmark_id,
                version=definition.version,
                workflow_properties=dict(definition.custom_properties),
            )
        )
        if bookmark_id is not None:
            return
        ax.set_output(
            "result",
            {
                "workflowDefinitionVersionId": None,  # Elsa leaves these two unset
                "workflowInstanceId": child_id,
                "correlationId": None,
                "status": result.status,
                "subStatus": result.sub_status,
                "output": result.output,
            },
        )
        ax.complete()

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        # Elsa sets the result to the resuming input: the finished child's output.
        ax.set_output("result", value)
        ax.complete()


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
