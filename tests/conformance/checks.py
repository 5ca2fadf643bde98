"""The ``expect`` keys of a conformance case, one small checker each.

A checker takes what the run showed and the key's value, and raises ``AssertionError`` naming what
differed. A key absent from ``expect`` is not checked (the upstream test did not assert it)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from broker.engine.run.results import PublishEvent
from broker.engine.testing import WorkflowRun
from tests.conformance.driver import ENTRY_INSTANCE_ID

Checker = Callable[[WorkflowRun, Any, Mapping[str, Any]], None]

#: keys that qualify another key, or only document the case
NOT_CHECKS = frozenset({"writeLinesUnordered", "notes"})


def _why(run: WorkflowRun) -> str:
    result = run.latest
    return f"(status {result.status}/{result.sub_status}, fault {result.fault})"


def check_status(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    assert run.latest.status == value, f"status {run.latest.status!r} {_why(run)}"


def check_sub_status(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    actual = run.latest.sub_status
    assert actual == value, f"subStatus {actual!r} {_why(run)}"


def check_write_lines(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    if expect.get("writeLinesUnordered"):
        missing = [line for line in value if line not in run.lines]
        assert not missing, f"lines {missing} missing from {run.lines} {_why(run)}"
    else:
        assert run.lines == list(value), f"lines {run.lines} {_why(run)}"


def check_variables(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    variables = run.variables
    for name, wanted in value.items():
        actual = variables.get(name)
        assert actual == wanted, f"variable {name!r} is {actual!r} {_why(run)}"


def check_child_instances(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    for wanted in value:
        matches = [c for c in run.child_instances if c.definition_id == wanted["definitionId"]]
        assert matches, f"no child instance of {wanted['definitionId']}"
        if "correlationId" in wanted:
            assert any(c.correlation_id == wanted["correlationId"] for c in matches), matches
        for key, prop in (wanted.get("properties") or {}).items():
            prop = ENTRY_INSTANCE_ID if prop == "$entryInstanceId" else prop
            assert any(c.properties.get(key) == prop for c in matches), (key, matches)


def _count(run: WorkflowRun, activity_id: str, event: str) -> int:
    return sum(1 for e in run.journal if e.activity_id == activity_id and e.event_name == event)


def check_activity_completed_count(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    for activity_id, count in value.items():
        actual = _count(run, activity_id, "Completed")
        assert actual == count, f"{activity_id} completed {actual}x {_why(run)}"


def check_activity_executed_count(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    for activity_id, count in value.items():
        actual = _count(run, activity_id, "Started")
        assert actual == count, f"{activity_id} started {actual}x {_why(run)}"


def check_http_response(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    response = run.latest.http_response
    assert response is not None, f"no HTTP response {_why(run)}"
    content = response["content"]
    if "body" in value:
        body = content if isinstance(content, str) else json.dumps(content)
        assert body == value["body"], f"HTTP body {body!r}"
    if value.get("successStatusCode"):
        assert 200 <= response["statusCode"] < 300, f"HTTP status {response['statusCode']}"
    if "statusCode" in value:
        assert response["statusCode"] == value["statusCode"], f"HTTP {response['statusCode']}"


def check_bookmarks(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    actual = len(run.latest.bookmarks)
    assert actual == value, f"{actual} open bookmarks {_why(run)}"


def check_output(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    output = run.latest.output
    assert isinstance(output, Mapping), f"workflow output {output!r} {_why(run)}"
    for name, wanted in value.items():
        assert name in output, f"no output {name!r} in {dict(output)} {_why(run)}"
        assert output[name] == wanted, f"output {name!r} is {output[name]!r}"


def check_incidents(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    incidents = run.latest.state.get("incidents") or []
    if isinstance(value, int):
        assert len(incidents) == value, f"{len(incidents)} incidents: {incidents}"
        return
    assert len(incidents) == len(value), f"{len(incidents)} incidents: {incidents}"
    for wanted, actual in zip(value, incidents, strict=True):
        if "activityId" in wanted:
            assert actual["activity_id"] == wanted["activityId"], incidents
        if "message" in wanted:
            assert wanted["message"] in actual["message"], incidents


def check_journal(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    records = [f"{e.activity_id}:{e.event_name}" for e in run.journal]
    position = 0
    for wanted in value:
        try:
            position = records.index(wanted, position) + 1
        except ValueError:
            raise AssertionError(f"journal lacks {wanted!r} in order: {records}") from None


def check_fault_message(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    fault = run.latest.fault
    assert fault is not None, f"no fault {_why(run)}"
    assert value in fault.message, f"fault message {fault.message!r}"


def check_http_calls(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    calls = [{"method": c.method, "url": c.url} for c in run.http_calls]
    wanted = [{"method": str(c["method"]).upper(), "url": c["url"]} for c in value]
    assert calls == wanted, f"HTTP calls {calls}"


def check_instance_name(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    actual = run.latest.state.get("name")
    assert actual == value, f"instance name {actual!r} {_why(run)}"


def check_fault_code(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    fault = run.latest.fault
    assert fault is not None, f"no fault {_why(run)}"
    assert fault.code == value, f"fault code {fault.code!r}"


def check_fault_category(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    fault = run.latest.fault
    assert fault is not None, f"no fault {_why(run)}"
    assert fault.category == value, f"fault category {fault.category!r}"


def check_bookmark_due_at(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{activityId: ISO 8601 time}``: the due time of that activity's open bookmark."""
    for activity_id, wanted in value.items():
        due = [b.due_at for b in run.latest.bookmarks if b.activity_id == activity_id]
        assert len(due) == 1, f"{activity_id}: bookmarks due {due}"
        at = due[0]
        assert at is not None, f"{activity_id}: the bookmark has no due time"
        assert at == dt.datetime.fromisoformat(wanted), f"{activity_id} due {at.isoformat()}"


def check_http_response_headers(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{name: value}``: headers of the HTTP response the workflow wrote (names any case)."""
    response = run.latest.http_response
    assert response is not None, f"no HTTP response {_why(run)}"
    headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
    for name, wanted in value.items():
        assert headers.get(name.lower()) == wanted, f"response header {name}: {headers}"


def check_http_call_headers(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``[{name: value}, ...]``: headers each outbound call carried, in call order."""
    calls = run.http_calls
    assert len(calls) == len(value), f"{len(calls)} HTTP calls"
    for call, wanted in zip(calls, value, strict=True):
        headers = {str(k).lower(): v for k, v in call.headers.items()}
        for name, text in wanted.items():
            assert headers.get(name.lower()) == text, f"{call.url} header {name}: {headers}"


def check_http_response_empty(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``true``: the HTTP response the workflow wrote has no body."""
    response = run.latest.http_response
    assert response is not None, f"no HTTP response {_why(run)}"
    empty = response["content"] in (None, "", b"")
    assert empty == bool(value), f"HTTP body {response['content']!r}"


def check_activity_inputs(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{activityId: {input: value}}``: the inputs the activity evaluated, as its journal
    records them (Elsa's ``ActivityState``)."""
    for activity_id, inputs in value.items():
        recorded: dict[str, Any] = {}
        for entry in run.journal:
            if entry.activity_id == activity_id and entry.inputs:
                recorded.update(entry.inputs)
        for name, wanted in inputs.items():
            assert name in recorded, f"{activity_id} recorded no input {name!r}: {recorded}"
            assert recorded[name] == wanted, f"{activity_id}.{name} is {recorded[name]!r}"


def check_dispatched_children(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``[{"definitionId", "count", "correlationId", "subStatus"}]``: the instances the run
    dispatched (DispatchWorkflow, BulkDispatchWorkflows), which the kit runs in-process."""
    children = [(c.latest.state, c.sub_status) for c in run.children]
    seen = [(s.get("definitionId"), s.get("correlationId"), sub) for s, sub in children]
    for wanted in value:
        matches = [c for c in seen if c[0] == wanted["definitionId"]]
        if "count" in wanted:
            assert len(matches) == wanted["count"], f"dispatched {seen}"
        else:
            assert matches, f"no dispatched instance of {wanted['definitionId']}: {seen}"
        if "correlationId" in wanted:
            assert all(c[1] == wanted["correlationId"] for c in matches), f"dispatched {seen}"
        if "subStatus" in wanted:
            assert all(c[2] == wanted["subStatus"] for c in matches), f"dispatched {seen}"


def check_started_activities(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``[activityId, ...]``: exactly the activities that started, in order (the workflow's own
    record too): nothing else was scheduled."""
    started = [e.activity_id for e in run.journal if e.event_name == "Started"]
    assert started == list(value), f"started {started} {_why(run)}"


def _published(run: WorkflowRun) -> list[dict[str, Any]]:
    found = []
    for result in run.results:
        for command in result.commands:
            if isinstance(command, PublishEvent):
                found.append(
                    {
                        "name": command.name,
                        "correlationId": command.correlation_id,
                        "instanceId": ENTRY_INSTANCE_ID if command.local else None,
                        "payload": command.payload,
                    }
                )
    return found


def check_published_events(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``[{"name", "correlationId", "instanceId", "payload"}]``: the events the run published, in
    order, as Elsa's ``IEventPublisher`` receives them (``instanceId``: ``$entryInstanceId`` for a
    local event, else null); only the keys given are compared."""
    published = _published(run)
    assert len(published) == len(value), f"published {published} {_why(run)}"
    for wanted, actual in zip(value, published, strict=True):
        for key, item in wanted.items():
            item = ENTRY_INSTANCE_ID if item == "$entryInstanceId" else item
            assert actual[key] == item, f"published {key} {actual[key]!r}: {published}"


def check_dispatched_inputs(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{"definitionId", "key", "values"}``: the dispatched instances of the definition, each
    with its own input, whose ``key`` entries are ``values`` (in any order)."""
    inputs = [
        c.latest.state.get("input") or {}
        for c in run.children
        if c.latest.state.get("definitionId") == value["definitionId"]
    ]
    found = sorted(str(i.get(value["key"])) for i in inputs)
    assert found == sorted(value["values"]), f"dispatched inputs {inputs}"
    for name, item in (value.get("shared") or {}).items():
        assert all(i.get(name) == item for i in inputs), f"dispatched inputs {inputs}"


#: every ``expect`` key and its checker; new keys go at the end, one function each
CHECKS: dict[str, Checker] = {
    "status": check_status,
    "subStatus": check_sub_status,
    "writeLines": check_write_lines,
    "variables": check_variables,
    "childInstances": check_child_instances,
    "activityCompletedCount": check_activity_completed_count,
    "httpResponse": check_http_response,
    "bookmarks": check_bookmarks,
    "output": check_output,
    "incidents": check_incidents,
    "activityExecutedCount": check_activity_executed_count,
    "journal": check_journal,
    "faultMessage": check_fault_message,
    "httpCalls": check_http_calls,
    "instanceName": check_instance_name,
    "faultCode": check_fault_code,
    "faultCategory": check_fault_category,
    "bookmarkDueAt": check_bookmark_due_at,
    "httpResponseHeaders": check_http_response_headers,
    "httpCallHeaders": check_http_call_headers,
    "httpResponseEmpty": check_http_response_empty,
    "activityInputs": check_activity_inputs,
    "dispatchedChildren": check_dispatched_children,
    "startedActivities": check_started_activities,
    "publishedEvents": check_published_events,
    "dispatchedInputs": check_dispatched_inputs,
}


def check(run: WorkflowRun, expect: Mapping[str, Any], label: str) -> None:
    """Check every key of ``expect``; an unknown key is an error in the case, never ignored."""
    unknown = sorted(set(expect) - set(CHECKS) - NOT_CHECKS)
    if unknown:
        raise AssertionError(f"{label}: unknown expect keys {unknown}")
    for key, value in expect.items():
        if key in CHECKS:
            try:
                CHECKS[key](run, value, expect)
            except AssertionError as exc:
                raise AssertionError(f"{label}.{key}: {exc}") from None
