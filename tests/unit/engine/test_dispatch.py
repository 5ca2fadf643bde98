"""Child workflows in the engine (``broker.engine.activities.dispatch``): ExecuteWorkflow,
DispatchWorkflow and BulkDispatchWorkflows as Elsa runs them, driven by the testing kit."""

from __future__ import annotations

from typing import Any

from broker.engine.parser import parse_workflow
from broker.engine.run.results import DispatchWorkflow
from broker.engine.testing import WorkflowTest


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def script(value: str) -> dict[str, Any]:
    return {"typeName": "Object", "expression": {"type": "JavaScript", "value": value}}


def sequence(definition_id: str, *activities: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": f"{definition_id}-v1",
        "definitionId": definition_id,
        "name": definition_id,
        "version": 1,
        "isPublished": True,
        "root": {
            "id": "root",
            "type": "Elsa.Sequence",
            "version": 1,
            "activities": list(activities),
        },
        **extra,
    }


def node(activity_id: str, kind: str, **inputs: Any) -> dict[str, Any]:
    return {"id": activity_id, "type": kind, "version": 1, **inputs}


#: a child that waits for the event "go", then sets its output "answer"
CHILD = sequence(
    "child",
    node("go", "Elsa.Event", eventName=literal("go")),
    node(
        "answer", "Elsa.SetOutput", outputName=literal("answer"), outputValue=literal(42, "Int32")
    ),
)
RESULT = {"typeName": "Object", "memoryReference": {"id": "Result"}}
VARIABLES = [{"id": "Result", "name": "Result", "typeName": "Object"}]


def flow(parent: dict[str, Any]) -> WorkflowTest:
    child = parse_workflow(CHILD)
    return WorkflowTest(parse_workflow(parent), uses=[child])


def execute(wait: bool, **inputs: Any) -> dict[str, Any]:
    return node(
        "execute",
        "Elsa.ExecuteWorkflow",
        workflowDefinitionId=literal("child"),
        waitForCompletion=literal(wait, "Boolean"),
        result=RESULT,
        **inputs,
    )


def test_execute_workflow_not_waiting_completes_with_elsas_execute_workflow_result() -> None:
    # Given a parent that executes the waiting child without waiting for it
    run = flow(sequence("parent", execute(False), variables=VARIABLES)).start(
        instance_id="parent-1"
    )
    # Then the parent finished, its result describing the child that still runs
    run.assert_finished()
    [child] = run.child_instances
    assert run.variables["Result"] == {
        "workflowDefinitionVersionId": None,
        "workflowInstanceId": child.id,
        "correlationId": None,
        "status": "Running",
        "subStatus": "Suspended",
        "output": None,
    }
    # And the child knows its parent, in its input and its properties, but not as a waiting one
    assert child.state["input"] == {"ParentInstanceId": "parent-1"}
    assert dict(child.properties) == {"ParentInstanceId": "parent-1"}
    assert child.parent_bookmark_id is None


def test_execute_workflow_waiting_resumes_with_the_childs_output_when_the_child_finishes() -> None:
    # Given a parent that executes the waiting child and waits for it
    run = flow(sequence("parent", execute(True), variables=VARIABLES)).start(instance_id="parent-1")
    run.assert_waiting_for("execute")
    [child] = run.child_instances
    assert dict(child.properties) == {"ParentInstanceId": "parent-1", "WaitForCompletion": True}
    assert child.parent_bookmark_id == run.bookmarks[0].id
    # When the child, a run of its own, gets its event
    [child_run] = run.executed
    child_run.deliver_event("go").assert_finished()
    # Then the parent resumed with the child's output as the activity's result
    run.assert_finished()
    assert run.variables["Result"] == {"answer": 42}


def test_a_child_workflow_nobody_loaded_faults_the_parent_with_elsas_message() -> None:
    for kind in ("Elsa.ExecuteWorkflow", "Elsa.DispatchWorkflow"):
        parent = sequence("parent", node("run", kind, workflowDefinitionId=literal("missing")))
        flow(parent).start().assert_faulted(
            "No published version of workflow definition with ID missing found."
        )


def test_dispatch_workflow_gives_the_child_its_parent_and_the_wait_in_its_properties() -> None:
    # Given a parent that dispatches the waiting child with an input, and waits
    parent = sequence(
        "parent",
        node(
            "dispatch",
            "Elsa.DispatchWorkflow",
            workflowDefinitionId=literal("child"),
            input=script("({ n: 1 })"),
            waitForCompletion=literal(True, "Boolean"),
            result=RESULT,
        ),
        variables=VARIABLES,
    )
    run = flow(parent).start(instance_id="parent-1")
    # Then its command carries Elsa's child input and properties
    [command] = [c for c in run.results[0].commands if isinstance(c, DispatchWorkflow)]
    assert dict(command.input) == {"n": 1, "ParentInstanceId": "parent-1"}
    assert dict(command.properties) == {"ParentInstanceId": "parent-1", "WaitForCompletion": True}
    # And when the dispatched child finishes, the parent resumes with its output
    [child] = run.children
    assert child.latest.state["properties"] == dict(command.properties)
    child.deliver_event("go")
    run.assert_finished()
    assert run.variables["Result"] == {"answer": 42}


def test_bulk_dispatch_evaluates_the_correlation_function_with_each_item() -> None:
    # Given a bulk dispatch of three items whose correlation id is computed from the item
    parent = sequence(
        "parent",
        node(
            "bulk",
            "Elsa.BulkDispatchWorkflows",
            workflowDefinitionId=literal("child"),
            items=script("[1, 2, 3]"),
            waitForCompletion=literal(False, "Boolean"),
            correlationIdFunction=script("`order-${getItem()}`"),
        ),
    )
    run = flow(parent).start(instance_id="parent-1").assert_finished()
    # Then each child has its own correlation id, its item and its parent
    states = [child.latest.state for child in run.children]
    assert [s["correlationId"] for s in states] == ["order-1", "order-2", "order-3"]
    assert [s["input"] for s in states] == [
        {"ParentInstanceId": "parent-1", "Item": item} for item in (1, 2, 3)
    ]
    assert all(s["properties"] == {"ParentInstanceId": "parent-1"} for s in states)
