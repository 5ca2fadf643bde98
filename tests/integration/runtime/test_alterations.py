"""Elsa's alterations API on the console: retry, run, submit, dry-run and plans, on faulted and
waiting instances, in process on SQLite and PostgreSQL (``drain`` stands in for the worker).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, g, request
from flask.testing import FlaskClient
from sqlalchemy import select

from broker.console import auth
from broker.console.api import blueprint
from broker.console.roles import ROLES, Principal
from broker.console.tokens import TokenIssuer
from broker.outbound.http_client import OutboundHttp
from broker.runtime import ids
from broker.runtime.ports import NullPublisher
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, WorkflowInstance
from broker.web.context import EXTENSION, Services
from broker.wiring.runtime import Runtime
from tests.support.runtime import (
    drain,
    event_types,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.sink import Sink
from tests.support.workflows import (
    activity,
    approval,
    literal,
    set_output,
    sink_workflow,
    workflow,
    write_workflow,
)

REFUSED_URL = "http://192.168.77.1/ledger"  # private, outside the allowlist: never sent


def target_call() -> dict[str, Any]:
    """Request type ``TargetCall``: POSTs to the URL in its variable ``Target``."""
    doc = workflow(
        "target-call",
        [
            activity(
                "call",
                "Elsa.SendHttpRequest",
                url={"typeName": "String", "expression": {"type": "Variable", "value": "Target"}},
                method=literal("POST"),
            ),
            set_output("out", "done", True),
        ],
        request_type="TargetCall",
    )
    doc["variables"] = [
        {"id": "target-var", "name": "Target", "typeName": "String", "value": REFUSED_URL}
    ]
    return doc


def loose_call() -> dict[str, Any]:
    """``target_call`` without a request type: its instances serve no request."""
    doc = target_call()
    doc.update(id="loose-call-v1", definitionId="loose-call", name="loose-call")
    doc["customProperties"] = {}
    return doc


@pytest.fixture
def rt(database_url: str, tmp_path: Path, sink: Sink) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    write_workflow(folder, sink_workflow("call", "Call", sink.url("/effect")))
    write_workflow(folder, target_call())
    write_workflow(folder, loose_call())
    write_workflow(folder, approval())
    env = runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    runtime: Runtime = in_process_runtime(Settings.from_env(env), tmp_path / "locks")
    # Loopback refused, as a private address is in production, until a test allowlists it.
    runtime._http = OutboundHttp(runtime.settings, allowlist=[])
    yield runtime
    dispose_engines()


@pytest.fixture
def api(rt: Runtime) -> Flask:
    """The Elsa API blueprint on the runtime's database; the role comes from ``X-Test-Role``."""
    app = Flask("alterations-test")
    app.extensions[EXTENSION] = Services(
        settings=rt.settings,
        session_factory=rt.factory,
        publisher=NullPublisher(),
        registry=rt.registry,
    )
    # Alterations and retries run on the parts the console's context hands them.
    app.extensions[auth.EXTENSION] = auth.ConsoleContext(
        session_factory=rt.factory,
        tokens=TokenIssuer("test-secret", access_ttl=60, refresh_ttl=60),
        session_lifetime=60,
        registry=rt.registry,
        operations=rt,
    )
    app.register_blueprint(blueprint)

    @app.before_request
    def _principal() -> None:
        role = request.headers.get("X-Test-Role")
        if role in ROLES:
            g.console_principal = Principal(name=f"test-{role}", role=role, kind="key")  # type: ignore[arg-type]

    return app


def client(api: Flask, role: str | None = "operator") -> FlaskClient:
    found = api.test_client()
    if role is not None:
        found.environ_base["HTTP_X_TEST_ROLE"] = role
    return found


def faulted(rt: Runtime, request_type: str) -> tuple[str, str]:
    """A request of ``request_type`` run until it faulted; answers it and its instance id."""
    request_id = submit_request(rt.factory, rt.registry, request_type)
    drain(rt)
    assert request_status(rt.factory, request_id) == "Faulted"
    return request_id, ids.instance_id_for_request(request_id)


def test_retry_completes_a_faulted_instance_once_its_cause_is_fixed(
    rt: Runtime, api: Flask, sink: Sink
) -> None:
    # Given a request faulted by a refused URL, and the operator who then allowlists it
    request_id, instance_id = faulted(rt, "Call")
    rt._http = OutboundHttp(rt.settings, allowlist=["127.0.0.1:*"])
    # When the operator retries the instance's faulted activities
    answer = client(api).post(
        "/elsa/api/alterations/workflows/retry", json={"workflowInstanceIds": [instance_id]}
    )
    # Then the answer is Elsa's RunAlterationsResult list
    assert answer.status_code == 200, answer.get_json()
    (result,) = answer.get_json()["results"]
    assert result["workflowInstanceId"] == instance_id
    assert (result["isSuccessful"], result["workflowHasScheduledWork"]) == (True, True), result
    # ... and the instance resumes at the failed call and completes the same request
    drain(rt)
    assert request_status(rt.factory, request_id) == "Completed"
    assert len(sink.calls) == 1
    assert event_types(rt.factory, request_id)[-4:] == [
        "RequestFaulted",
        "WorkflowAltered",
        "RequestReplayed",
        "RequestCompleted",
    ]
    # ... through its dead letter, which is spent
    with transaction(rt.factory, write=False) as session:
        letter = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).one()
        assert not letter.replayable


def test_run_modifies_a_variable_and_schedules_the_faulted_activity(
    rt: Runtime, api: Flask, sink: Sink
) -> None:
    # Given a request faulted because the URL in its variable is refused
    rt._http = OutboundHttp(rt.settings, allowlist=["127.0.0.1:*"])
    request_id, instance_id = faulted(rt, "TargetCall")
    # When an operator sets the variable to a good URL and schedules the call again
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={
            "workflowInstanceIds": [instance_id],
            "alterations": [
                {"type": "ModifyVariable", "variableId": "target-var", "value": sink.url("/ok")},
                {"type": "ScheduleActivity", "activityId": "call"},
            ],
        },
    )
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["results"][0]["isSuccessful"] is True
    drain(rt)
    # Then the call went to the new URL and the request completed
    assert request_status(rt.factory, request_id) == "Completed"
    assert [path for path, _ in sink.calls] == ["/ok"]


def test_submit_runs_a_plan_on_the_instances_its_filter_selects(
    rt: Runtime, api: Flask, sink: Sink
) -> None:
    # Given two faulted requests of one workflow, its cause fixed
    first, first_instance = faulted(rt, "Call")
    second, second_instance = faulted(rt, "Call")
    rt._http = OutboundHttp(rt.settings, allowlist=["127.0.0.1:*"])
    operator = client(api)
    plan_filter = {"definitionIds": ["call"], "subStatuses": ["Faulted"]}
    # When an operator dry-runs, then submits, a plan for that filter
    dry = operator.post("/elsa/api/alterations/dry-run", json=plan_filter)
    assert dry.status_code == 200
    assert sorted(dry.get_json()["workflowInstanceIds"]) == sorted(
        [first_instance, second_instance]
    )
    submitted = operator.post(
        "/elsa/api/alterations/submit",
        json={
            "alterations": [{"type": "ScheduleActivity", "activityId": "call"}],
            "filter": plan_filter,
        },
    )
    assert submitted.status_code == 200, submitted.get_json()
    plan_id = submitted.get_json()["planId"]
    # Then the plan has one completed job per instance
    shown = operator.get(f"/elsa/api/alterations/{plan_id}").get_json()
    assert shown["plan"]["status"] == "Completed"
    assert shown["plan"]["alterations"][0]["type"] == "ScheduleActivity"
    assert sorted(j["workflowInstanceId"] for j in shown["jobs"]) == sorted(
        [first_instance, second_instance]
    )
    assert {j["status"] for j in shown["jobs"]} == {"Completed"}
    # ... and both requests complete
    drain(rt)
    assert request_status(rt.factory, first) == "Completed"
    assert request_status(rt.factory, second) == "Completed"


def test_cancel_cancels_a_waiting_request_with_its_alteration_in_the_history(
    rt: Runtime, api: Flask
) -> None:
    # Given a request waiting for an event
    request_id = submit_request(rt.factory, rt.registry, "Approval")
    drain(rt)
    instance_id = ids.instance_id_for_request(request_id)
    # When an operator runs a Cancel alteration on its instance
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={"workflowInstanceIds": [instance_id], "alterations": [{"type": "Cancel"}]},
    )
    assert answer.status_code == 200, answer.get_json()
    # Then the request is cancelled, after the alteration in its history
    assert request_status(rt.factory, request_id) == "Cancelled"
    assert event_types(rt.factory, request_id)[-2:] == ["WorkflowAltered", "RequestCancelled"]


def test_migrate_moves_a_waiting_instance_to_another_version(
    rt: Runtime, api: Flask, tmp_path: Path
) -> None:
    # Given a request waiting on version 1, and a version 2 of its workflow with the same wait
    request_id = submit_request(rt.factory, rt.registry, "Approval")
    drain(rt)
    instance_id = ids.instance_id_for_request(request_id)
    newer = approval()
    newer["root"]["activities"][-1] = set_output("out", "decision", "migrated")
    write_workflow(tmp_path / "wf", newer)
    rt.registry.load()
    current = rt.registry.get_definition("approval")
    assert current is not None
    assert current.version == 2
    # When an operator migrates the instance to version 2
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={
            "workflowInstanceIds": [instance_id],
            "alterations": [{"type": "Migrate", "targetVersion": 2}],
        },
    )
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["results"][0]["isSuccessful"] is True
    # Then the instance runs on version 2
    with transaction(rt.factory, write=False) as session:
        instance = session.get(WorkflowInstance, instance_id)
        assert instance is not None
        assert (instance.version, instance.definition_version_id) == (2, current.version_id)
    # ... and a version without its open activity is refused, leaving it unchanged
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={
            "workflowInstanceIds": [instance_id],
            "alterations": [{"type": "Migrate", "targetVersion": 9}],
        },
    )
    (result,) = answer.get_json()["results"]
    assert result["isSuccessful"] is False
    assert "version 9 not found" in result["log"]["logEntries"][-1]["message"]


def test_alterations_refuse_bad_input_with_the_field_named_and_change_nothing(
    rt: Runtime, api: Flask
) -> None:
    _, instance_id = faulted(rt, "Call")
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={"workflowInstanceIds": [instance_id], "alterations": [{"type": "Teleport"}]},
    )
    assert answer.status_code == 400
    assert "alterations[0].type" in answer.get_json()["errors"]["generalErrors"][0]
    answer = client(api).post("/elsa/api/alterations/workflows/retry", json={})
    assert answer.status_code == 400
    assert "workflowInstanceIds" in answer.get_json()["errors"]["generalErrors"][0]
    with transaction(rt.factory, write=False) as session:
        instance = session.get(WorkflowInstance, instance_id)
        assert instance is not None
        assert instance.sub_status == "Faulted"


@pytest.mark.parametrize("role", [None, "viewer", "designer"])
def test_alterations_are_for_operators_only(rt: Runtime, api: Flask, role: str | None) -> None:
    caller = client(api, role)
    body = {"workflowInstanceIds": ["x"], "alterations": [{"type": "Cancel"}]}
    expected = 401 if role is None else 403
    assert caller.post("/elsa/api/alterations/workflows/retry", json=body).status_code == expected
    assert caller.post("/elsa/api/alterations/run", json=body).status_code == expected
    assert caller.post("/elsa/api/alterations/submit", json=body).status_code == expected
    assert caller.post("/elsa/api/alterations/dry-run", json={}).status_code == expected
    assert caller.get("/elsa/api/alterations/some-plan").status_code == expected


def test_a_modified_variables_value_never_reaches_the_clients_audit_trail(
    rt: Runtime, api: Flask
) -> None:
    # Given a faulted request whose client reads its audit trail
    request_id, instance_id = faulted(rt, "TargetCall")
    big = "v" * 1_000_000
    # When an operator sets its variable to a 1 MB value
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={
            "workflowInstanceIds": [instance_id],
            "alterations": [{"type": "ModifyVariable", "variableId": "target-var", "value": big}],
        },
    )
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["results"][0]["isSuccessful"] is True
    # Then the client's trail names the alteration and the variable, never the value
    from broker.runtime.requests.queries import list_events

    with transaction(rt.factory, write=False) as session:
        events = list_events(session, request_id, None)
    (altered,) = [e for e in events if e["eventType"] == "WorkflowAltered"]
    assert altered["properties"]["alterations"] == [
        {"type": "ModifyVariable", "variableId": "target-var"}
    ]
    assert len(json.dumps(altered)) < 2000
    assert "vvvv" not in json.dumps(events)


def test_an_alteration_of_an_instance_serving_no_request_is_in_the_operator_audit(
    rt: Runtime, api: Flask
) -> None:
    # Given a workflow a designer started from the console: an instance serving no request
    started = client(api, "designer").post(
        "/elsa/api/workflow-definitions/loose-call/dispatch", json={}
    )
    assert started.status_code == 200, started.get_json()
    instance_id = started.get_json()["workflowInstanceId"]
    drain(rt)
    # When an operator alters it
    answer = client(api).post(
        "/elsa/api/alterations/run",
        json={
            "workflowInstanceIds": [instance_id],
            "alterations": [
                {"type": "ModifyVariable", "variableId": "target-var", "value": "x" * 50}
            ],
        },
    )
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["results"][0]["isSuccessful"] is True, answer.get_json()["results"][0][
        "log"
    ]
    # Then the operator audit lists it: who, what, on which instance, when; never the value
    listed = client(api).get("/elsa/api/audit/operator-actions?action=alteration")
    assert listed.status_code == 200, listed.get_json()
    (entry,) = listed.get_json()["items"]
    assert entry["action"] == "alteration.run"
    assert entry["target"] == instance_id
    assert entry["actor"] == "console:test-operator"
    assert entry["at"]
    assert entry["summary"]["requestId"] is None
    assert entry["summary"]["alterations"] == [
        {"type": "ModifyVariable", "variableId": "target-var"}
    ]
    assert "xxxxx" not in json.dumps(listed.get_json())
    # ... and only operators may list it
    assert client(api, "designer").get("/elsa/api/audit/operator-actions").status_code == 403
