"""Child workflows through the runtime, in-process, on SQLite and PostgreSQL: ExecuteWorkflow with
and without ``WaitForCompletion`` (the child runs in the parent's step and is saved as its own
instance), and DispatchWorkflow, each child carrying Elsa's ``ParentInstanceId``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.names import RESUME_INSTANCE, RUN_CHILD, RUN_REQUEST
from broker.runtime.bookmarks import queue as bookmarks
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.steps import runner
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import Bookmark, OutboxRow, Request, WorkflowInstance
from broker.wiring.runtime import Runtime
from tests.support.runtime import (
    drain,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.workflows import activity, literal, obj, workflow, write_workflow

RESULT = {"typeName": "Object", "memoryReference": {"id": "result-var"}}
READ_RESULT = {"expression": {"type": "Variable", "value": "ChildResult"}}


def with_result_variable(document: dict[str, Any]) -> dict[str, Any]:
    return {**document, "variables": [{"id": "result-var", "name": "ChildResult"}]}


def parent_of(definition_id: str, request_type: str, kind: str, *, wait: bool) -> dict[str, Any]:
    """A request type that runs the child ``waiting-child`` with ``kind`` and sets its output
    ``child`` to what the activity's ``result`` was."""
    return with_result_variable(
        workflow(
            definition_id,
            [
                activity(
                    "run-child",
                    kind,
                    workflowDefinitionId=literal("waiting-child"),
                    waitForCompletion=literal(wait),
                    input=obj({"n": 1}),
                    result=RESULT,
                ),
                activity(
                    "out", "Elsa.SetOutput", outputName=literal("child"), outputValue=READ_RESULT
                ),
            ],
            request_type=request_type,
        )
    )


@pytest.fixture
def rt(database_url: str, tmp_path: Path) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    # The child waits for the event "go", then answers 42.
    write_workflow(
        folder,
        workflow(
            "waiting-child",
            [
                activity("go", "Elsa.Event", eventName=literal("go")),
                activity(
                    "answer", "Elsa.SetOutput", outputName=literal("answer"), outputValue=obj(42)
                ),
            ],
        ),
    )
    write_workflow(folder, parent_of("exec-wait", "ExecWait", "Elsa.ExecuteWorkflow", wait=True))
    write_workflow(
        folder, parent_of("exec-no-wait", "ExecNoWait", "Elsa.ExecuteWorkflow", wait=False)
    )
    write_workflow(
        folder, parent_of("dispatch-wait", "DispatchWait", "Elsa.DispatchWorkflow", wait=True)
    )
    write_workflow(
        folder,
        parent_of("dispatch-no-wait", "DispatchNoWait", "Elsa.DispatchWorkflow", wait=False),
    )
    settings = Settings.from_env(
        runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    )
    yield in_process_runtime(settings, tmp_path / "locks")
    dispose_engines()


def instances(rt: Runtime, request_id: str) -> tuple[WorkflowInstance, WorkflowInstance]:
    """The request's instance and its one child."""
    with transaction(rt.factory, write=False) as session:
        parent = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.request_id == request_id)
        ).one()
        child = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.parent_id == parent.id)
        ).one()
        session.expunge_all()
        return parent, child


def waits(rt: Runtime, instance_id: str) -> list[str]:
    with transaction(rt.factory, write=False) as session:
        return sorted(
            session.scalars(select(Bookmark.name).where(Bookmark.instance_id == instance_id))
        )


def release_child(rt: Runtime, child_id: str) -> list[str]:
    """Send the child its event and run everything that follows, as beat and the workers do;
    answers the task names run."""
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id=f"go-{child_id}", name="go", payload=None, instance_id=child_id
        )
    ran: list[str] = []
    for _ in range(3):  # the child's event, then the parent's child-completed stimulus
        with transaction(rt.factory) as session:
            bookmarks.process_due_items(session, rt.settings)
        ran += drain(rt)
    return ran


def result_of(rt: Runtime, request_id: str) -> Any:
    with transaction(rt.factory, write=False) as session:
        return session.get_one(Request, request_id).result


def test_execute_workflow_waiting_for_completion_resumes_the_parent_with_the_childs_output(
    rt: Runtime,
) -> None:
    # Given a request whose workflow executes a child that waits for an event, and waits for it
    request_id = submit_request(rt.factory, rt.registry, "ExecWait")
    # When its first step runs
    assert drain(rt) == [RUN_REQUEST]
    # Then the child ran in that step and was saved as its own instance, suspended on its event,
    # with Elsa's ParentInstanceId in its input and its properties, and WaitForCompletion
    parent, child = instances(rt, request_id)
    assert request_status(rt.factory, request_id) == "Processing"
    assert (child.definition_id, child.sub_status, child.checkpoint) == (
        "waiting-child",
        "Suspended",
        1,
    )
    assert child.state is not None
    assert child.state["input"] == {"n": 1, "ParentInstanceId": parent.id}
    assert child.state["properties"] == {"ParentInstanceId": parent.id, "WaitForCompletion": True}
    assert waits(rt, child.id) == ["Elsa.Event"]
    assert waits(rt, parent.id) == ["Elsa.ExecuteWorkflow"]
    # When the child's event arrives
    ran = release_child(rt, child.id)
    # Then the child finished, its completion resumed the parent, and the parent's result is the
    # child's output (Elsa's result on resumption)
    assert ran == [RESUME_INSTANCE, RESUME_INSTANCE]
    assert request_status(rt.factory, request_id) == "Completed"
    assert result_of(rt, request_id) == {"child": {"answer": 42}}
    _, child = instances(rt, request_id)
    assert (child.status, child.sub_status) == ("Finished", "Finished")


def test_execute_workflow_not_waiting_completes_at_once_and_the_child_goes_on_alone(
    rt: Runtime,
) -> None:
    # Given a request whose workflow executes a child that waits, without waiting for it
    request_id = submit_request(rt.factory, rt.registry, "ExecNoWait")
    # When its first step runs
    drain(rt)
    # Then the request completed with Elsa's ExecuteWorkflowResult of the running child
    parent, child = instances(rt, request_id)
    assert request_status(rt.factory, request_id) == "Completed"
    assert result_of(rt, request_id) == {
        "child": {
            "workflowDefinitionVersionId": None,
            "workflowInstanceId": child.id,
            "correlationId": None,
            "status": "Running",
            "subStatus": "Suspended",
            "output": None,
        }
    }
    # And the child knows its parent but not a waiting one, and waits on its own
    assert child.state is not None
    assert child.state["properties"] == {"ParentInstanceId": parent.id}
    assert child.state["input"]["ParentInstanceId"] == parent.id
    assert waits(rt, child.id) == ["Elsa.Event"]
    # When its event arrives later, the child finishes and nothing resumes the finished parent
    assert release_child(rt, child.id) == [RESUME_INSTANCE]
    _, child = instances(rt, request_id)
    assert child.sub_status == "Finished"
    assert request_status(rt.factory, request_id) == "Completed"


def test_a_redelivered_parent_step_does_not_run_its_executed_child_twice(rt: Runtime) -> None:
    # Given a parent whose step ran its child in-process and was saved
    request_id = submit_request(rt.factory, rt.registry, "ExecWait")
    with transaction(rt.factory, write=False) as session:
        row_id = session.scalars(
            select(OutboxRow.id).where(
                OutboxRow.request_id == request_id, OutboxRow.task_name == RUN_REQUEST
            )
        ).one()
    drain(rt)
    parent, child = instances(rt, request_id)
    # When the same request's task is delivered again
    again = runner.run_request(rt, request_id, row_id)
    # Then it finds its work done: still one child, at its first checkpoint
    assert again is Outcome.SKIPPED
    again_parent, again_child = instances(rt, request_id)
    assert (again_parent.checkpoint, again_child.id, again_child.checkpoint) == (
        parent.checkpoint,
        child.id,
        1,
    )


def test_dispatch_workflow_gives_the_child_its_parent_and_resumes_with_its_output(
    rt: Runtime,
) -> None:
    # Given a request whose workflow dispatches the waiting child and waits for it
    request_id = submit_request(rt.factory, rt.registry, "DispatchWait")
    # When the parent's step and then the child's first step run
    assert drain(rt) == [RUN_REQUEST, RUN_CHILD]
    # Then the child, its id chosen before dispatch, started with ParentInstanceId in its input
    # and Elsa's properties
    parent, child = instances(rt, request_id)
    assert child.state is not None
    assert child.state["input"] == {"n": 1, "ParentInstanceId": parent.id}
    assert child.state["properties"] == {"ParentInstanceId": parent.id, "WaitForCompletion": True}
    # When the child's event arrives, the parent resumes with the child's output
    release_child(rt, child.id)
    assert request_status(rt.factory, request_id) == "Completed"
    assert result_of(rt, request_id) == {"child": {"answer": 42}}


def test_dispatch_workflow_not_waiting_finishes_the_parent_before_its_child_runs(
    rt: Runtime,
) -> None:
    # Given a request whose workflow dispatches the child without waiting
    request_id = submit_request(rt.factory, rt.registry, "DispatchNoWait")
    with transaction(rt.factory, write=False) as session:
        row_id = session.scalars(
            select(OutboxRow.id).where(
                OutboxRow.request_id == request_id, OutboxRow.task_name == RUN_REQUEST
            )
        ).one()
    # When only the parent's step runs
    assert runner.run_request(rt, request_id, row_id) is Outcome.DONE
    # Then the parent is done while its child has not started (Elsa's fire and forget)
    parent, child = instances(rt, request_id)
    assert request_status(rt.factory, request_id) == "Completed"
    assert (child.checkpoint, child.sub_status) == (0, "Pending")
    # When the child runs and gets its event, it finishes after its parent, on its own
    assert drain(rt) == [RUN_CHILD]
    release_child(rt, child.id)
    parent, child = instances(rt, request_id)
    assert child.sub_status == "Finished"
    assert child.state is not None
    assert child.state["properties"] == {"ParentInstanceId": parent.id}
    assert parent.finished_at is not None
    assert child.finished_at is not None
    assert child.finished_at >= parent.finished_at
