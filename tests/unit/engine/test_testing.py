"""The authors' testing kit (``broker.engine.testing``), and the example in workflows/README.md."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import pytest

from broker.engine.parser import parse_workflow
from broker.engine.run.ports import HttpRequest
from broker.engine.testing import HttpAnswer, HttpTable, WorkflowTest
from broker.errors import RetryLater
from tests.support.services import PROJECT_ROOT


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def sequence(*activities: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": f"wf-{extra.get('definitionId', 'main')}",
        "definitionId": extra.get("definitionId", "main"),
        "name": extra.get("definitionId", "main"),
        "version": 1,
        "isPublished": True,
        "outputs": extra.get("outputs", []),
        "root": {
            "id": "root",
            "type": "Elsa.Sequence",
            "version": 1,
            "activities": list(activities),
        },
    }


def write_line(activity_id: str, text: str) -> dict[str, Any]:
    return {"id": activity_id, "type": "Elsa.WriteLine", "version": 1, "text": literal(text)}


def workflow_test(document: dict[str, Any], **kwargs: Any) -> WorkflowTest:
    return WorkflowTest(parse_workflow(document), **kwargs)


def test_the_readme_example_runs_as_an_authors_test_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the pytest file that workflows/README.md shows an author
    readme = (PROJECT_ROOT / "workflows" / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Testing a workflow", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None, "the README shows no pytest file"
    module = types.ModuleType("test_invoice_process")
    monkeypatch.chdir(PROJECT_ROOT)
    exec(compile(code.group(1), "workflows/README.md", "exec"), module.__dict__)  # noqa: S102
    tests = [value for name, value in vars(module).items() if name.startswith("test_")]
    # When each of its tests runs, then each passes
    assert len(tests) >= 3
    for test in tests:
        test()


def test_a_call_the_table_does_not_know_fails_naming_what_it_knows() -> None:
    table = HttpTable({"GET https://a.example/x": 200, "https://b.example/": {"ok": True}})
    assert table.send(HttpRequest("get", "https://a.example/x")).status_code == 200
    assert table.send(HttpRequest("PUT", "https://b.example/")).content == {"ok": True}
    with pytest.raises(AssertionError, match=r"no answer for POST https://c.example/ .*GET https"):
        table.send(HttpRequest("POST", "https://c.example/"))
    assert [call.method for call in table.calls] == ["get", "PUT", "POST"]


def test_an_answer_carries_its_status_body_and_headers() -> None:
    response = HttpAnswer(404, "gone", {"X-Id": "7"}).response()
    assert (response.status_code, response.body, response.headers["X-Id"]) == (404, b"gone", "7")
    assert json.loads(HttpAnswer(body=[1, 2]).response().body) == [1, 2]


def test_timers_fire_at_once_and_the_clock_moves_to_their_due_time() -> None:
    # Given a workflow that waits a day between two lines
    delay = {"id": "wait", "type": "Elsa.Delay", "version": 1, "timeSpan": literal("1.00:00:00")}
    flow = workflow_test(sequence(write_line("a", "before"), delay, write_line("b", "after")))
    # When it starts, it waits on the delay
    run = flow.start().assert_waiting_for("wait")
    assert run.lines == ["before"]
    # And when its timers fire, it finishes without waiting a day
    run.fire_timers().assert_finished()
    assert run.lines == ["before", "after"]
    assert flow.now.day == 2
    run.assert_journal("a:Completed", "wait:Resumed", "b:Completed")


def test_run_task_is_answered_from_the_task_table() -> None:
    task = {
        "id": "task",
        "type": "Elsa.RunTask",
        "version": 1,
        "taskName": literal("acme.double"),
        "payload": {"typeName": "Object", "expression": {"type": "Object", "value": '{"n": 21}'}},
    }
    given: list[Any] = []

    def double(payload: Any) -> Any:
        given.append(payload)
        return {"n": payload["n"] * 2}

    run = workflow_test(sequence(task), tasks={"acme.double": double}).start()
    run.assert_finished()
    assert given == [{"n": 21}]


def test_a_wait_on_an_event_no_bookmark_has_fails_saying_what_waits() -> None:
    event = {"id": "approval", "type": "Elsa.Event", "version": 1, "eventName": literal("approve")}
    run = workflow_test(sequence(event)).start().assert_waiting_for("approval")
    with pytest.raises(AssertionError, match=r"no bookmark waits for the event 'reject'.*approval"):
        run.deliver_event("reject")
    run.deliver_event("approve", {"ok": True}).assert_finished()


def test_a_journal_out_of_order_fails() -> None:
    run = workflow_test(sequence(write_line("a", "1"), write_line("b", "2"))).start()
    run.assert_journal("a:Completed", "b:Completed")
    with pytest.raises(AssertionError, match="'a:Completed' is not in the journal"):
        run.assert_journal("b:Completed", "a:Completed")


def test_a_child_it_waits_for_runs_in_process(tmp_path: Path) -> None:
    # Given a parent that dispatches a child and waits for it, and the child's file
    child = sequence(write_line("c", "child ran"), definitionId="child")
    dispatch = {
        "id": "dispatch",
        "type": "Elsa.DispatchWorkflow",
        "version": 1,
        "workflowDefinitionId": literal("child"),
        "waitForCompletion": literal(True, "Boolean"),
    }
    parent = sequence(dispatch, write_line("p", "parent done"))
    (tmp_path / "child.json").write_text(json.dumps(child))
    (tmp_path / "parent.json").write_text(json.dumps(parent))
    # When the parent runs
    flow = WorkflowTest.from_file(tmp_path / "parent.json", uses=[tmp_path / "child.json"])
    run = flow.start()
    # Then the child ran and the parent went on after it
    run.assert_finished()
    assert run.lines == ["child ran", "parent done"]
    assert [child.status for child in run.children] == ["Finished"]


def test_outputs_and_faults_are_asserted() -> None:
    set_output = {
        "id": "out",
        "type": "Elsa.SetOutput",
        "version": 1,
        "outputName": literal("answer"),
        "outputValue": literal("42"),
    }
    run = workflow_test(
        sequence(set_output, outputs=[{"name": "answer", "type": "String"}])
    ).start()
    run.assert_output(answer="42")
    with pytest.raises(AssertionError, match="output 'answer' is '42'"):
        run.assert_output(answer="41")
    fault = {"id": "f", "type": "Elsa.Fault", "version": 1, "message": literal("boom")}
    faulted = workflow_test(sequence(fault)).start().assert_faulted("boom")
    with pytest.raises(AssertionError, match="Finished/Faulted"):
        faulted.assert_finished()


def test_an_error_answer_fails_the_call_and_otherwise_answers_what_the_table_lacks() -> None:
    # Given a table with a failing server, and a catch-all answer for every other URL
    table = HttpTable(
        {"GET https://down.example/": HttpAnswer(error="timeout")},
        otherwise=HttpAnswer(error="connect"),
    )
    # When each is called, Then each fails as that server would, and the call is recorded
    with pytest.raises(RetryLater) as slow:
        table.send(HttpRequest("GET", "https://down.example/"))
    with pytest.raises(RetryLater) as gone:
        table.send(HttpRequest("POST", "https://nowhere.example/"))
    assert (slow.value.reason, gone.value.reason) == ("timeout", "connect")
    assert len(table.calls) == 2
    # And an answer with no body has an empty one, with no content type
    empty = HttpAnswer(204).response()
    assert (empty.body, empty.content, dict(empty.headers)) == (b"", None, {})


def test_a_failing_server_leads_the_request_through_its_failure_port() -> None:
    # Given a flowchart whose HTTP call ends in "Failed to connect" when no server answers
    send = {
        "id": "send",
        "type": "Elsa.FlowSendHttpRequest",
        "version": 1,
        "url": literal("https://ledger.example/", "Uri"),
        "method": literal("GET"),
    }
    document = sequence()
    document["root"] = {
        "id": "flow",
        "type": "Elsa.Flowchart",
        "version": 1,
        "activities": [send, write_line("down", "no ledger")],
        "connections": [
            {
                "source": {"activity": "send", "port": "Failed to connect"},
                "target": {"activity": "down", "port": "In"},
            }
        ],
    }
    table = HttpTable(otherwise=HttpAnswer(error="connect"))
    # When it runs against the table, Then it took the failure port
    run = workflow_test(document, http=table).start().assert_finished()
    assert run.lines == ["no ledger"]
    assert [call.url for call in run.http_calls] == ["https://ledger.example/"]


def test_a_workflow_is_called_through_its_http_endpoint() -> None:
    # Given a workflow started by GET /workflows/hello that writes its response
    endpoint = {
        "id": "endpoint",
        "type": "Elsa.HttpEndpoint",
        "version": 1,
        "path": literal("hello"),
        "supportedMethods": {
            "typeName": "String[]",
            "expression": {"type": "Object", "value": '["GET"]'},
        },
        "customProperties": {"canStartWorkflow": True},
    }
    respond = {
        "id": "respond",
        "type": "Elsa.WriteHttpResponse",
        "version": 1,
        "content": literal("Hello!"),
    }
    flow = workflow_test(sequence(endpoint, respond))
    # When it is called as the broker routes a call (method and path in any case)
    run = flow.call_endpoint("get", "/Hello/", instance_id="call-1").assert_finished()
    # Then the response is what it wrote
    assert run.latest.http_response is not None
    assert run.latest.http_response["content"] == "Hello!"
    assert run.latest.state["trigger"]["activityId"] == "endpoint"
    # And a route it does not serve fails the test, naming the route
    with pytest.raises(AssertionError, match="no HttpEndpoint trigger serves POST hello"):
        flow.call_endpoint("POST", "hello")


def test_every_file_may_be_given_and_each_step_and_in_process_child_is_kept() -> None:
    # Given a parent that executes a child in-process and then waits for an event, both files
    # given as the definitions in use (the parent among them) and a forced flowchart mode
    child = parse_workflow(sequence(write_line("c", "child ran"), definitionId="child"))
    execute = {
        "id": "execute",
        "type": "Elsa.ExecuteWorkflow",
        "version": 1,
        "workflowDefinitionId": literal("child"),
        "waitForCompletion": literal(True, "Boolean"),
    }
    event = {"id": "go", "type": "Elsa.Event", "version": 1, "eventName": literal("go")}
    parent = parse_workflow(sequence(execute, event))
    flow = WorkflowTest(parent, uses=[child, parent], flowchart_mode="TokenBased")
    assert [d.definition_id for d in flow.definitions] == ["child", "main"]
    # When it runs to the event and the event comes
    run = flow.start().assert_waiting_for("go").deliver_event("go").assert_finished()
    # Then each step's result is kept in order, and the child the engine ran is listed
    assert [result.sub_status for result in run.results] == ["Suspended", "Finished"]
    assert [(c.definition_id, c.status) for c in run.child_instances] == [("child", "Finished")]
    assert run.lines == ["child ran"]
    assert run.latest.state["flowchartMode"] == "TokenBased"


def test_read_line_reads_the_kits_standard_input_a_line_at_a_time_then_null() -> None:
    # Given a workflow that reads three lines into variables, and a standard input of two
    def read(activity_id: str, variable: str) -> dict[str, Any]:
        result = {"typeName": "String", "memoryReference": {"id": variable}}
        return {"id": activity_id, "type": "Elsa.ReadLine", "version": 1, "result": result}

    document = {
        **sequence(read("r1", "A"), read("r2", "B"), read("r3", "C")),
        "variables": [{"id": name, "name": name, "typeName": "String"} for name in "ABC"],
    }
    run = workflow_test(document, standard_in=["first", "second"]).start().assert_finished()
    # Then each ReadLine took the next line, and the one past the end read null
    assert run.variables == {"A": "first", "B": "second", "C": None}


def test_an_in_process_child_that_waits_is_a_run_of_its_own_that_wakes_its_parent() -> None:
    # Given a parent that executes a child waiting for an event, and waits for it
    child = parse_workflow(
        sequence(
            {"id": "go", "type": "Elsa.Event", "version": 1, "eventName": literal("go")},
            write_line("c", "child done"),
            definitionId="child",
        )
    )
    execute = {
        "id": "execute",
        "type": "Elsa.ExecuteWorkflow",
        "version": 1,
        "workflowDefinitionId": literal("child"),
        "waitForCompletion": literal(True, "Boolean"),
    }
    parent = parse_workflow(sequence(execute, write_line("p", "parent done")))
    run = WorkflowTest(parent, uses=[child]).start().assert_waiting_for("execute")
    # When the child's own run gets its event
    [child_run] = run.executed
    child_run.deliver_event("go").assert_finished()
    # Then the parent went on after it, and both wrote to the one log
    run.assert_finished()
    assert run.lines == ["child done", "parent done"]
