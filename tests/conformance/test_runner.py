"""The conformance runner itself: each ``expect`` key fails when the run differs, resume steps
reach the bookmark they name, and outbound HTTP is answered from the case's table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.checks import check
from tests.conformance.driver import CaseError, run_case
from tests.conformance.loader import Case


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def make_case(tmp_path: Path, root: dict[str, Any], **expected: Any) -> Case:
    document = {"id": "wf-v1", "definitionId": "wf", "version": 1, "root": root}
    (tmp_path / "wf.json").write_text(json.dumps(document), encoding="utf-8")
    expected = {"entry": "wf.json", "entryDefinitionId": "wf", **expected}
    return Case("runner-case", tmp_path, expected, "project")


def phases(case: Case) -> list[Any]:
    return list(run_case(case))


def sequence(*activities: dict[str, Any]) -> dict[str, Any]:
    return {"id": "Sequence1", "type": "Elsa.Sequence", "activities": list(activities)}


def write_line(activity_id: str, text: str) -> dict[str, Any]:
    return {"id": activity_id, "type": "Elsa.WriteLine", "text": literal(text)}


def test_write_lines_and_journal_order_are_checked(tmp_path: Path) -> None:
    # Given a sequence writing A then B
    case = make_case(tmp_path, sequence(write_line("A", "a"), write_line("B", "b")))
    (phase,) = phases(case)
    # Then the right expectations pass
    check(phase.run, {"writeLines": ["a", "b"], "journal": ["A:Started", "B:Completed"]}, "x")
    check(phase.run, {"activityExecutedCount": {"A": 1}, "bookmarks": 0}, "x")
    # And wrong ones fail, naming the key
    with pytest.raises(AssertionError, match=r"x\.writeLines"):
        check(phase.run, {"writeLines": ["b", "a"]}, "x")
    with pytest.raises(AssertionError, match=r"x\.journal"):
        check(phase.run, {"journal": ["B:Completed", "A:Started"]}, "x")
    with pytest.raises(AssertionError, match="unknown expect keys"):
        check(phase.run, {"writeLine": ["a"]}, "x")


def test_a_resume_step_resumes_the_named_event(tmp_path: Path) -> None:
    # Given a workflow waiting for event "Go"
    event = {"id": "Wait", "type": "Elsa.Event", "eventName": literal("Go")}
    case = make_case(
        tmp_path,
        sequence(write_line("A", "before"), event, write_line("B", "after")),
        runMode="steps",
        resume=[{"bookmark": {"type": "Elsa.Event", "name": "Go"}, "input": {}}],
    )
    # When it runs, Then it first waits, then finishes after the step
    steps = run_case(case)
    first = next(steps)
    check(first.run, {"status": "Running", "bookmarks": 1, "writeLines": ["before"]}, "run")
    second = next(steps)
    check(second.run, {"status": "Finished", "writeLines": ["before", "after"]}, "step")


def test_a_step_naming_no_open_bookmark_is_an_error(tmp_path: Path) -> None:
    event = {"id": "Wait", "type": "Elsa.Event", "eventName": literal("Go")}
    case = make_case(
        tmp_path, sequence(event), runMode="steps", resume=[{"bookmark": {"activityId": "Nope"}}]
    )
    with pytest.raises(CaseError, match="no open bookmark"):
        phases(case)


def test_outbound_http_is_answered_from_the_table(tmp_path: Path) -> None:
    # Given a request to a URL the table answers
    send = {
        "id": "Send",
        "type": "Elsa.SendHttpRequest",
        "url": literal("https://example.test/a", "Uri"),
        "method": literal("GET"),
        "parsedContent": {"typeName": "Object", "memoryReference": {"id": "Body"}},
    }
    root = sequence(send)
    root["variables"] = [{"id": "Body", "name": "Body", "typeName": "Object"}]
    table = [{"method": "GET", "url": "https://example.test/a", "status": 200, "body": {"x": 1}}]
    case = make_case(tmp_path, root, httpRequests=table)
    (phase,) = phases(case)
    # Then the call is recorded and its answer reached the workflow
    check(phase.run, {"httpCalls": [{"method": "GET", "url": "https://example.test/a"}]}, "r")
    with pytest.raises(AssertionError, match="httpCalls"):
        check(phase.run, {"httpCalls": []}, "r")
    assert phase.run.latest.status == "Finished", phase.run.latest.fault


def test_a_loop_that_never_ends_fails_its_case_instead_of_hanging(tmp_path: Path) -> None:
    # Given a While whose condition is always true
    loop = {
        "id": "Loop",
        "type": "Elsa.While",
        "condition": literal(True, "Boolean"),
        "body": write_line("Body", "again"),
    }
    case = make_case(tmp_path, sequence(loop), maxActivityRuns=50)
    # When it runs, Then it fails as a runaway after its bound, naming the case
    with pytest.raises(CaseError, match="more than 50 activity executions"):
        phases(case)
    # And the bound is lifted afterwards: a finite case runs as usual
    (phase,) = phases(make_case(tmp_path, sequence(write_line("A", "a")), maxActivityRuns=50))
    check(phase.run, {"writeLines": ["a"]}, "after")
