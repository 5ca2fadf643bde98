"""HTTP, e-mail, events, dispatch and composites; RetryLater resumes at the failed activity."""

from __future__ import annotations

import json

import pytest

from broker.engine.parser import parse_workflow
from broker.engine.run.results import DispatchWorkflow, PublishEvent
from broker.errors import OutboundBlocked, RetryLater, WorkflowDefinitionError
from tests.unit.engine.conftest import FIXTURES, Harness


def test_http_request_leaves_through_its_status_port_with_an_idempotency_key(
    harness: Harness,
) -> None:
    result = harness.start("http-call", instance_id="i-1")
    [request] = harness.http.requests
    assert (request.method, json.loads(request.body or b"")) == ("POST", {"amount": 5})
    call = next(e for e in result.journal if e.activity_id == "call")
    assert request.idempotency_key == f"i-1:{call.activity_instance_id}"
    assert result.write_lines == ("before", "after")
    assert result.state["variables"]["Response"] == {"ok": True}


def test_retry_later_runs_the_failed_activity_again_not_the_workflow(harness: Harness) -> None:
    # Given an HTTP call that fails transiently once
    harness.http.failures.append(RetryLater("connect refused", delay=2))
    first = harness.start("http-call")
    assert first.retry is not None
    assert first.retry.activity_id == "call"
    assert (first.status, first.sub_status) == ("Running", "Executing")
    # When the runtime retries from the stored state
    second = harness.engine.retry(json.loads(json.dumps(first.state)))
    # Then only the call and what follows run, with the same idempotency key
    assert second.write_lines == ("after",)
    assert second.sub_status == "Finished"
    keys = {r.idempotency_key for r in harness.http.requests}
    assert len(harness.http.requests) == 2
    assert len(keys) == 1


def test_blocked_outbound_host_faults_the_workflow(harness: Harness) -> None:
    harness.http.failures.append(OutboundBlocked("host not allowed"))
    result = harness.start("http-call")
    assert result.sub_status == "Faulted"
    assert result.fault is not None
    assert result.fault.activity_id == "call"


def test_send_email_goes_through_the_mailer_with_a_stable_message_id(harness: Harness) -> None:
    harness.start("send-email", instance_id="m-1")
    harness.start("send-email", instance_id="m-1")
    first, second = harness.mailer.sent
    assert (first.to, first.subject, first.sender) == (
        ("ap@example.com",),
        "Hi",
        "broker@example.com",
    )
    assert first.message_id == second.message_id


def test_publish_event_emits_a_command_local_when_is_local_says_so(harness: Harness) -> None:
    result = harness.start("publish-event", correlation_id="c-1")
    assert result.commands == (
        PublishEvent(name="done", correlation_id="c-1", payload={"ok": True}),
        PublishEvent(name="mine", correlation_id="c-1", payload=None, local=True),
    )


def test_dispatch_without_wait_emits_a_command_and_moves_on(harness: Harness) -> None:
    result = harness.start("dispatch-no-wait")
    [command] = result.commands
    assert isinstance(command, DispatchWorkflow)
    assert (command.correlation_id, command.wait_for_completion) == ("corr-1", False)
    assert result.sub_status == "Finished"


def test_composite_leaves_through_the_outcome_of_its_complete(harness: Harness) -> None:
    result = harness.start("composite-parent")
    assert result.write_lines == ("approved",)
    assert result.state["variables"]["Total"] == 7


def test_http_request_runs_the_activity_of_its_status_code_then_moves_on(
    harness: Harness,
) -> None:
    # Given a SendHttpRequest with activities for 200 and 404 and one for any other status
    outcomes = {}
    for status in (200, 404, 503, 418):
        harness.http.status = status
        # When the call answers that status
        result = harness.start("http-status-cases", instance_id=f"i-{status}")
        outcomes[status] = result.write_lines
        assert result.sub_status == "Finished"
    # Then the matching case's activity ran, else the unmatched one, and the sequence went on
    assert outcomes == {
        200: ("found", "after"),
        404: ("missing", "after"),
        503: ("unexpected", "after"),
        418: ("unexpected", "after"),
    }


def test_a_status_code_case_without_a_code_is_refused_with_its_path() -> None:
    document = {
        "id": "bad-v1",
        "definitionId": "bad",
        "root": {
            "id": "call",
            "type": "Elsa.SendHttpRequest",
            "expectedStatusCodes": [{"statusCode": "ok", "activity": None}],
        },
    }
    where = r"root\.expectedStatusCodes\[0\]\.statusCode"
    with pytest.raises(WorkflowDefinitionError, match=where):
        parse_workflow(document, file="bad.json")


def test_bulk_dispatch_keys_items_waits_by_default_and_runs_each_childs_port(
    harness: Harness,
) -> None:
    # Given two items: a plain value and an object
    first = harness.start("bulk-dispatch", instance_id="p-1")
    # Then two children are dispatched with Elsa's inputs, and the parent waits (the default)
    inputs = [dict(c.input) for c in first.commands if isinstance(c, DispatchWorkflow)]
    assert inputs == [
        {"base": True, "ParentInstanceId": "p-1", "Item": 1},
        {"base": True, "ParentInstanceId": "p-1", "n": 2},
    ]
    assert first.sub_status == "Suspended"
    one, two = first.bookmarks
    # When the first child finishes, its ChildCompleted port runs; the activity still waits
    state = json.loads(json.dumps(first.state))
    done_one = {"WorkflowInstanceId": "c-1", "WorkflowSubStatus": "Finished", "WorkflowOutput": 1}
    second = harness.engine.resume(state, bookmark_id=one.id, input=done_one)
    assert second.write_lines == ("completed",)
    assert second.sub_status == "Suspended"
    # And when the second faults, its ChildFaulted port runs and the activity completes
    faulted = {"WorkflowInstanceId": "c-2", "WorkflowSubStatus": "Faulted", "WorkflowOutput": None}
    third = harness.engine.resume(
        json.loads(json.dumps(second.state)), bookmark_id=two.id, input=faulted
    )
    assert third.write_lines == ("faulted", "after")
    bulk = [e for e in third.journal if e.activity_id == "bulk" and e.event_name == "Completed"]
    assert [e.outcome for e in bulk] == ["Completed,Done"]


@pytest.mark.parametrize(("reason", "line"), [("connect", "offline"), ("timeout", "slow")])
def test_flow_http_failure_leaves_through_its_connected_port(
    harness: Harness, reason: str, line: str
) -> None:
    # Given Failed to connect and Timeout connected in the flowchart
    harness.http.failures.append(RetryLater("no luck", reason=reason))
    result = harness.start("http-failure-ports")
    # Then the failure is an outcome, not a retry, and the Authorization header was sent
    assert result.retry is None
    assert result.write_lines == (line,)
    [request] = harness.http.requests
    assert request.headers["Authorization"] == "Bearer s3cr3t"


def test_http_failure_without_a_port_for_it_is_retried(harness: Harness) -> None:
    # Given a SendHttpRequest with a failedToConnect port and no timeout port
    harness.http.failures.append(RetryLater("refused", reason="connect"))
    refused = harness.start("http-failure-port", instance_id="a")
    assert refused.retry is None
    assert refused.write_lines == ("offline", "after")
    # When the call times out instead, the retry policy applies
    harness.http.failures.append(RetryLater("slow", reason="timeout"))
    timed_out = harness.start("http-failure-port", instance_id="b")
    assert timed_out.retry is not None
    assert timed_out.write_lines == ()


def test_an_authorization_value_without_a_scheme_faults_unless_validation_is_off(
    harness: Harness,
) -> None:
    document = json.loads((FIXTURES / "http-failure-ports.json").read_text(encoding="utf-8"))
    call = document["root"]["activities"][0]
    call["authorization"]["expression"]["value"] = "Bearer\nbad"
    faulted = harness.engine.start(parse_workflow(document), instance_id="c")
    assert faulted.sub_status == "Faulted"
    assert harness.http.requests == []
    call["disableAuthorizationHeaderValidation"] = {
        "typeName": "Boolean",
        "expression": {"type": "Literal", "value": True},
    }
    call["authorization"]["expression"]["value"] = "opaque-token"
    sent = harness.engine.start(parse_workflow(document), instance_id="d")
    assert sent.write_lines == ("ok",)
    assert harness.http.requests[0].headers["Authorization"] == "opaque-token"
