"""The ``expect`` keys of a conformance case, one small checker each.

A checker takes what the run showed and the key's value, and raises ``AssertionError`` naming what
differed. A key absent from ``expect`` is not checked (the upstream test did not assert it)."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

from broker.engine.run.ports import StoredFile
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


def _children(run: WorkflowRun) -> list[WorkflowRun]:
    """Every child run of the case, executed in-process or dispatched, theirs included."""
    found: list[WorkflowRun] = []
    for child in [*run.executed, *run.children]:
        found.append(child)
        found.extend(_children(child))
    return found


def _placeholder(run: WorkflowRun, value: Any) -> Any:
    """``$entryInstanceId``: the entry instance's id; ``$childInstanceId``: the one child's."""
    if value == "$entryInstanceId":
        return ENTRY_INSTANCE_ID
    if value == "$childInstanceId":
        children = _children(run)
        assert len(children) == 1, f"{len(children)} child instances, not one"
        return children[0].instance_id
    return value


def check_child_instances(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """Each entry: the child instances of ``definitionId`` (``count`` of them, when given), one
    of which has each given ``correlationId``, ``properties``, ``input`` value, no property of
    ``absentProperties``, exactly the input keys ``inputKeys``, and ``subStatus``."""
    children = _children(run)
    for wanted in value:
        matches = [c for c in children if c.latest.state["definitionId"] == wanted["definitionId"]]
        assert matches, f"no child instance of {wanted['definitionId']}"
        states = [c.latest.state for c in matches]
        if "count" in wanted:
            assert len(matches) == wanted["count"], f"{len(matches)} children"
        if "correlationId" in wanted:
            found = [state.get("correlationId") for state in states]
            assert wanted["correlationId"] in found, f"correlation ids {found}"
        for key, prop in (wanted.get("properties") or {}).items():
            prop = _placeholder(run, prop)
            found = [state["properties"].get(key) for state in states]
            assert prop in found, f"property {key}: {found}"
        for key in wanted.get("absentProperties") or ():
            assert all(key not in state["properties"] for state in states), (key, states)
        for key, item in (wanted.get("input") or {}).items():
            item = _placeholder(run, item)
            found = [state["input"].get(key) for state in states]
            assert item in found, f"input {key}: {found}"
        if "inputKeys" in wanted:
            found = [sorted(state["input"]) for state in states]
            assert sorted(wanted["inputKeys"]) in found, f"input keys {found}"
        if "subStatus" in wanted:
            found = [state["subStatus"] for state in states]
            assert wanted["subStatus"] in found, f"sub-statuses {found}"


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
        for part in wanted.get("messageContains") or ():
            assert part in actual["message"], incidents


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


def check_fault_exception(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """Elsa's ExceptionState of the fault: ``type`` equal, ``message`` contained, and the same
    for its ``innerException``."""
    fault = run.latest.fault
    assert fault is not None, f"no fault {_why(run)}"
    _match_exception(fault.exception, value)


def _match_exception(actual: Any, wanted: Mapping[str, Any]) -> None:
    assert isinstance(actual, Mapping), f"no exception state: {actual!r}"
    if "type" in wanted:
        assert actual.get("type") == wanted["type"], f"exception type {actual.get('type')!r}"
    if "message" in wanted:
        message = str(actual.get("message"))
        assert wanted["message"] in message, f"exception message {message!r}"
    if "innerException" in wanted:
        _match_exception(actual.get("innerException"), wanted["innerException"])


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


def check_waiting_for(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``[activityId, ...]``: each of these activities has an open bookmark."""
    actual = {b.activity_id for b in run.latest.bookmarks}
    missing = [activity_id for activity_id in value if activity_id not in actual]
    assert not missing, f"{missing} not waiting; waiting on {sorted(actual)} {_why(run)}"


def check_not_waiting_for(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``[activityId, ...]``: none of these activities has an open bookmark."""
    actual = {b.activity_id for b in run.latest.bookmarks}
    found = [activity_id for activity_id in value if activity_id in actual]
    assert not found, f"{found} waiting; waiting on {sorted(actual)} {_why(run)}"


def check_activity_properties(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{activityId: {name: value}}``: properties of the activity's running execution context
    (Elsa's ``ActivityExecutionContext.Properties``)."""
    contexts = run.latest.state["contexts"].values()
    for activity_id, properties in value.items():
        found = [ctx["props"] for ctx in contexts if ctx.get("node") == activity_id]
        assert found, f"{activity_id} has no running context {_why(run)}"
        for name, wanted in properties.items():
            actual = [props.get(name) for props in found]
            assert wanted in actual, f"{activity_id}.{name} is {actual}"


def check_variable_fields(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{variable: {field: value}}``: fields of an object held by a workflow variable
    (``$childInstanceId`` stands for the one child instance's id)."""
    variables = run.variables
    for name, fields in value.items():
        held = variables.get(name)
        assert isinstance(held, Mapping), f"variable {name!r} is {held!r} {_why(run)}"
        for field, wanted in fields.items():
            wanted = _placeholder(run, wanted)
            assert field in held, f"variable {name!r} has no {field!r}: {dict(held)}"
            assert held[field] == wanted, f"{name}.{field} is {held[field]!r}"


def check_write_line_count(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """How many lines WriteLine wrote over the run, children included."""
    assert len(run.lines) == value, f"{len(run.lines)} lines: {run.lines} {_why(run)}"


def _stored(run: WorkflowRun, reference: Any) -> tuple[StoredFile, bytes]:
    stored = StoredFile.from_json(reference)
    assert stored is not None, f"{reference!r} is not a stored file reference"
    return run.test.files.read(stored.file_id)


def check_file_response(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """The file response the workflow wrote (WriteFileHttpResponse): ``statusCode``,
    ``contentType``, ``contentDisposition`` (a part of it), ``body`` (text), ``bodyBase64``,
    ``eTag`` (null: no ETag header), ``eTagPresent``, ``zipEntries`` (files in the zip)."""
    response = run.latest.http_response
    assert response is not None, f"no HTTP response {_why(run)}"
    headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
    if "statusCode" in value:
        assert response["statusCode"] == value["statusCode"], f"HTTP {response['statusCode']}"
    if "contentType" in value:
        assert response.get("contentType") == value["contentType"], response.get("contentType")
    if "contentDisposition" in value:
        found = headers.get("content-disposition", "")
        assert value["contentDisposition"] in found, f"Content-Disposition {found!r}"
    if "eTag" in value:
        assert headers.get("etag") == value["eTag"], f"ETag {headers.get('etag')!r}"
    if "eTagPresent" in value:
        assert ("etag" in headers) == value["eTagPresent"], f"headers {headers}"
    if {"body", "bodyBase64", "zipEntries"} & set(value):
        _, data = _stored(run, response.get("file"))
        if "body" in value:
            assert data.decode("utf-8") == value["body"], f"body {data!r}"
        if "bodyBase64" in value:
            assert data == base64.b64decode(value["bodyBase64"]), f"body {data!r}"
        if "zipEntries" in value:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                assert len(archive.namelist()) == value["zipEntries"], archive.namelist()


def check_retry_attempts(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{activityId: [attempt numbers]}``: the retries its resilience strategy asked for, in
    order (Elsa's recorded ``RetryAttempt``s, numbered from 0)."""
    for activity_id, numbers in value.items():
        retries = [r for r in run.strategy_retries if r.activity_id == activity_id]
        assert list(range(len(retries))) == numbers, f"{activity_id}: {len(retries)} retries"


def check_stored_files(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{variable: {text?, filename?, contentType?} or null}``: the stored file a variable
    references (DownloadHttpFile's result), or that it holds none."""
    variables = run.variables
    for name, wanted in value.items():
        reference = variables.get(name)
        if wanted is None:
            assert reference is None, f"{name} is {reference!r}"
            continue
        stored, data = _stored(run, reference)
        if "text" in wanted:
            assert data.decode("utf-8") == wanted["text"], f"{name} holds {data!r}"
        if "filename" in wanted:
            assert stored.filename == wanted["filename"], f"{name} is named {stored.filename!r}"
        if "contentType" in wanted:
            assert stored.content_type == wanted["contentType"], stored.content_type


def check_variable_keys(run: WorkflowRun, value: Any, expect: Mapping[str, Any]) -> None:
    """``{variable: [keys]}``: the variable is an object holding these keys (any case)."""
    variables = run.variables
    for name, keys in value.items():
        found = variables.get(name)
        assert isinstance(found, Mapping), f"{name} is {found!r}"
        present = {str(k).lower() for k in found}
        missing = [k for k in keys if k.lower() not in present]
        assert not missing, f"{name} lacks {missing}: {sorted(present)}"


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
    "faultException": check_fault_exception,
    "httpCalls": check_http_calls,
    "instanceName": check_instance_name,
    "faultCode": check_fault_code,
    "faultCategory": check_fault_category,
    "bookmarkDueAt": check_bookmark_due_at,
    "httpResponseHeaders": check_http_response_headers,
    "httpCallHeaders": check_http_call_headers,
    "httpResponseEmpty": check_http_response_empty,
    "activityInputs": check_activity_inputs,
    "waitingFor": check_waiting_for,
    "notWaitingFor": check_not_waiting_for,
    "activityProperties": check_activity_properties,
    "variableFields": check_variable_fields,
    "writeLineCount": check_write_line_count,
    "fileResponse": check_file_response,
    "retryAttempts": check_retry_attempts,
    "storedFiles": check_stored_files,
    "variableKeys": check_variable_keys,
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
