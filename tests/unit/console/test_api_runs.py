"""Execute and dispatch in the Elsa API: a console user starts a workflow on the runtime."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.console.api import runs
from broker.registry import WorkflowRegistry
from broker.runtime.outbox import pause
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.outbox.publisher import OutboxPublisher
from broker.runtime.steps import runner
from broker.settings import Settings
from broker.store.models import (
    OutboxRow,
    Request,
    RequestEvent,
    StepResult,
    WorkflowInstance,
)
from broker.web.context import EXTENSION, Services
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.workflows import activity, literal, set_output, workflow, write_workflow

Client = Callable[[str | None], FlaskClient]
API = "/elsa/api/workflow-definitions"


@pytest.fixture
def console_database(database_url: str) -> str:
    """These routes touch the store: every test runs on SQLite and on PostgreSQL."""
    return database_url


@pytest.fixture(autouse=True)
def run_workflows(workflow_dir: Path) -> None:
    """A plain workflow, a request-type one and one that faults (before the registry loads)."""
    write_workflow(workflow_dir, workflow("greeter", [set_output("greet", "greeting", "hello")]))
    write_workflow(
        workflow_dir,
        workflow("hello", [set_output("done", "answer", 42)], request_type="Hello"),
    )
    write_workflow(
        workflow_dir,
        workflow("broken", [activity("boom", "Elsa.Fault", message=literal("it broke"))]),
    )


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
def publishing_app(
    api_app: Flask,
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    sender: RecordingSender,
) -> Flask:
    """The API app with a real fast-path publisher whose transport records what it sends."""
    svc: Services = api_app.extensions[EXTENSION]
    api_app.extensions[EXTENSION] = dataclasses.replace(
        svc, publisher=OutboxPublisher(console_settings, session_factory, sender)
    )
    return api_app


@pytest.fixture
def rt(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
    tmp_path: Path,
) -> Runtime:
    """A worker's runtime on the same database, run in-process."""
    return Runtime(
        console_settings,
        factory=session_factory,
        registry=registry,
        sender=RecordingSender(),
        locks=FileLockProvider(tmp_path / "locks"),
    )


@pytest.fixture
def as_designer(publishing_app: Flask, client_as: Client) -> FlaskClient:
    return client_as("designer")


def run_sent(rt: Runtime, row: OutboxRow) -> Outcome:
    """Deliver one sent task to the runner, as the worker's task would."""
    args = dict(row.args)
    if row.task_name == "broker.run_request":
        return runner.run_request(rt, args["request_id"], row.id)
    assert row.task_name == "broker.run_child"
    return runner.run_child(rt, args["instance_id"], row.id)


def instance(factory: sessionmaker[Session], instance_id: str) -> WorkflowInstance | None:
    with factory() as session:
        found = session.get(WorkflowInstance, instance_id)
        if found is not None:
            session.expunge(found)
        return found


def test_dispatch_of_a_request_type_workflow_records_a_request_owned_by_the_console_user(
    as_designer: FlaskClient,
    sender: RecordingSender,
    rt: Runtime,
    session_factory: sessionmaker[Session],
) -> None:
    # When a designer dispatches the request-type workflow with a submission's body as input
    body = {"input": {"keys": {"Order": "A-1"}, "payload": {"n": 1}}, "versionOptions": "Latest"}
    response = as_designer.post(f"{API}/hello/dispatch", json=body)
    # Then Elsa's answer names the instance, and a request owned by console:<user> is queued
    assert response.status_code == 200, response.get_json()
    instance_id = response.get_json()["workflowInstanceId"]
    with session_factory() as session:
        request = session.scalars(select(Request)).one()
        event = session.scalars(select(RequestEvent)).one()
    assert (request.client_id, request.request_type, request.status) == (
        "console:test-designer",
        "Hello",
        "Queued",
    )
    assert (request.keys, request.payload) == ({"Order": "A-1"}, {"n": 1})
    assert (event.event_type, event.source) == ("RequestSubmitted", "console")
    assert "console:test-designer" in (event.message or "")
    # and its run_request task was sent on the fast path; a worker runs it to completion
    (row,) = sender.sent
    assert (row.task_name, row.args) == ("broker.run_request", {"request_id": request.id})
    assert run_sent(rt, row) is Outcome.DONE
    done = instance(session_factory, instance_id)
    assert done is not None
    assert (done.request_id, done.sub_status, done.output) == (
        request.id,
        "Finished",
        {"answer": 42},
    )


def test_dispatch_of_a_plain_workflow_starts_an_instance_pinned_to_the_chosen_version(
    as_designer: FlaskClient,
    sender: RecordingSender,
    rt: Runtime,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> None:
    body = {"instanceId": "my-run-1", "correlationId": "c-9", "input": {"who": "Ada"}}
    response = as_designer.post(f"{API}/greeter/dispatch", json=body)
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {"workflowInstanceId": "my-run-1"}
    pending = instance(session_factory, "my-run-1")
    greeter = registry.get_definition("greeter")
    assert pending is not None
    assert greeter is not None
    assert (pending.status, pending.sub_status, pending.definition_version_id) == (
        "Running",
        "Pending",
        greeter.version_id,
    )
    assert pending.correlation_id == "c-9"
    with session_factory() as session:
        start = session.get(StepResult, ("my-run-1", "pending-start"))
        assert start is not None
        assert start.output["input"] == {"who": "Ada"}
        assert start.output["startedBy"] == "test-designer"
        assert session.scalar(select(func.count()).select_from(Request)) == 0
    # The row was published and marked dispatched; the worker runs the instance to the end
    (row,) = sender.sent
    assert run_sent(rt, row) is Outcome.DONE
    finished = instance(session_factory, "my-run-1")
    assert finished is not None
    assert (finished.status, finished.sub_status) == ("Finished", "Finished")
    assert finished.output == {"greeting": "hello"}
    # and the instance viewer's records show what the activity evaluated
    records = as_designer.get(
        "/elsa/api/activity-executions/list?workflowInstanceId=my-run-1"
    ).get_json()["items"]
    greet = next(r for r in records if r["activityId"] == "greet")
    assert greet["activityState"] == {"OutputName": "greeting", "OutputValue": "hello"}
    # The same instance id again is refused
    again = as_designer.post(f"{API}/greeter/dispatch", json=body)
    assert again.status_code == 409


@pytest.mark.parametrize(
    ("definition_id", "output"), [("greeter", {"greeting": "hello"}), ("hello", {"answer": 42})]
)
def test_execute_waits_for_the_worker_and_answers_the_workflow_state(
    as_designer: FlaskClient,
    sender: RecordingSender,
    rt: Runtime,
    definition_id: str,
    output: dict[str, object],
) -> None:
    # Given a worker that runs whatever the fast path sends
    stop = threading.Event()

    def worker() -> None:
        done: set[str] = set()
        while not stop.is_set():
            for row in list(sender.sent):
                if row.id not in done:
                    done.add(row.id)
                    run_sent(rt, row)
            stop.wait(0.05)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        # When a designer executes a workflow, plain or request-type (Studio's Run sends Latest)
        response = as_designer.post(
            f"{API}/{definition_id}/execute", json={"versionOptions": "Latest"}
        )
    finally:
        stop.set()
        thread.join(10)
    # Then the answer is the finished state, with the headers Studio reads
    assert response.status_code == 200, response.get_json()
    state = response.get_json()["workflowState"]
    assert (state["status"], state["subStatus"]) == ("Finished", "Finished")
    assert state["output"] == output
    assert response.headers["x-elsa-workflow-instance-id"] == state["id"]
    assert response.headers["x-elsa-workflow-cannot-start"] == "False"


def test_execute_answers_500_with_the_state_when_the_workflow_faults(
    as_designer: FlaskClient, sender: RecordingSender, rt: Runtime
) -> None:
    thread = threading.Thread(target=lambda: _run_when_sent(sender, rt), daemon=True, name="worker")
    thread.start()
    response = as_designer.post(f"{API}/broken/execute")
    thread.join(10)
    assert response.status_code == 500
    state = response.get_json()["workflowState"]
    assert state["subStatus"] == "Faulted"
    assert state["fault"]["message"] == "it broke"
    # Elsa's ExceptionState of the Fault activity's FaultException, in the fault and its incident
    assert state["fault"]["exception"]["type"] == "FaultException"
    assert [(i["activityId"], i["exception"]["type"]) for i in state["incidents"]] == [
        ("boom", "FaultException")
    ]
    # The viewer's record of the activity carries the fault's message
    records = as_designer.get(
        f"/elsa/api/activity-executions/list?workflowInstanceId={state['id']}"
    ).get_json()["items"]
    boom = next(r for r in records if r["activityId"] == "boom")
    assert boom["status"] == "Faulted"
    assert boom["exception"]["message"] == "it broke"
    assert boom["exception"]["type"] == "FaultException"


def _run_when_sent(sender: RecordingSender, rt: Runtime) -> None:
    for _ in range(200):
        if sender.sent:
            run_sent(rt, sender.sent[0])
            return
        threading.Event().wait(0.05)


def test_execute_without_a_worker_answers_the_pending_state_in_bounded_time(
    as_designer: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "EXECUTE_WAIT_SECONDS", 0.3)
    response = as_designer.post(f"{API}/hello/execute", json={"input": {"keys": {}}})
    assert response.status_code == 200
    state = response.get_json()["workflowState"]
    assert (state["status"], state["subStatus"]) == ("Running", "Pending")
    assert state["id"] == response.headers["x-elsa-workflow-instance-id"]
    assert state["correlationId"]  # the request id


@pytest.fixture
def counts(session_factory: sessionmaker[Session]) -> Callable[[], tuple[int, int, int]]:
    def count() -> tuple[int, int, int]:
        with session_factory() as session:
            return tuple(  # type: ignore[return-value]
                session.scalar(select(func.count()).select_from(t)) or 0
                for t in (Request, WorkflowInstance, OutboxRow)
            )

    return count


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("hello/dispatch", {"input": {"amount": 5}}, "input"),
        ("hello/dispatch", {"input": {"keys": {"a": 1}}}, "input.keys"),
        ("hello/dispatch", {"correlationId": "mine"}, "correlationId"),
        ("greeter/dispatch", {"input": [1, 2]}, "input"),
        ("greeter/dispatch", {"variables": {"x": 1}}, "variables"),
        ("greeter/dispatch", {"triggerActivityId": "greet"}, "triggerActivityId"),
        ("greeter/execute", {"instanceId": "x"}, "instanceId"),
        ("greeter/dispatch", {"versionOptions": "Sometimes"}, "versionOptions"),
        ("greeter/dispatch", {"instanceId": "x" * 65}, "instanceId"),
    ],
)
def test_bad_start_options_are_refused_naming_the_field_and_change_nothing(
    as_designer: FlaskClient,
    counts: Callable[[], tuple[int, int, int]],
    path: str,
    body: dict[str, object],
    field: str,
) -> None:
    response = as_designer.post(f"{API}/{path}", json=body)
    assert response.status_code == 400
    message = response.get_json()["errors"]["generalErrors"][0]
    assert f"'{field}'" in message
    assert counts() == (0, 0, 0)


def test_a_draft_cannot_run_and_an_unknown_definition_is_404(
    as_designer: FlaskClient, counts: Callable[[], tuple[int, int, int]]
) -> None:
    model = as_designer.get(f"{API}/by-definition-id/greeter").get_json()
    assert as_designer.post(API, json={"model": model}).status_code == 200  # a draft v2
    draft = as_designer.post(f"{API}/greeter/dispatch", json={"versionOptions": "Latest"})
    assert draft.status_code == 400
    assert "draft" in draft.get_json()["errors"]["generalErrors"][0]
    # Studio's Run (execute) learns it from the header it reads
    run = as_designer.post(f"{API}/greeter/execute", json={"versionOptions": "Latest"})
    assert run.status_code == 400
    assert run.headers["x-elsa-workflow-cannot-start"] == "True"
    assert "draft" in run.get_json()["errors"]["generalErrors"][0]
    # the published version still runs
    assert as_designer.post(f"{API}/greeter/dispatch").status_code == 200
    assert as_designer.post(f"{API}/nope/dispatch").status_code == 404
    assert counts()[1] == 1


def test_running_needs_a_designer_and_a_running_runtime(
    publishing_app: Flask,
    client_as: Client,
    session_factory: sessionmaker[Session],
    counts: Callable[[], tuple[int, int, int]],
) -> None:
    assert client_as(None).post(f"{API}/greeter/dispatch").status_code == 401
    assert client_as("viewer").post(f"{API}/greeter/execute").status_code == 403
    with session_factory.begin() as session:
        pause.set_paused(session, True)
    pause.forget_paused()
    try:
        assert client_as("designer").post(f"{API}/greeter/dispatch").status_code == 503
        assert client_as("designer").post(f"{API}/hello/dispatch").status_code == 503
    finally:
        pause.forget_paused()
    assert counts() == (0, 0, 0)
