"""The Elsa 3 conformance corpus, run case by case as its README describes.

The corpus lives outside the project (``ELSA_CORPUS``, else beside the project, see
``tests.support.services.CORPUS``) and is never copied in. Each case folder becomes one test id;
every expectation present in its ``expected.json`` is checked.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from broker.engine.api import Engine, EngineServices
from broker.engine.definition import WorkflowDefinition
from broker.engine.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.results import RunResult
from tests.support.services import CORPUS, require_corpus

CASES = sorted(p.parent.name for p in CORPUS.glob("*/expected.json")) if CORPUS.is_dir() else []
ENTRY_INSTANCE_ID = "entry-instance"
FIXED_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def load_definitions(folder: Path) -> dict[str, WorkflowDefinition]:
    definitions = {}
    for path in sorted(folder.glob("*.json")):
        if path.name == "expected.json":
            continue
        document = json.loads(path.read_text(encoding="utf-8-sig"))
        definitions[path.name] = parse_workflow(document, file=path.name)
    return definitions


def run_until_end(
    engine: Engine,
    entry: WorkflowDefinition,
    expected: Mapping[str, Any],
    options: Mapping[str, Any],
) -> tuple[RunResult, list[str], list[Any], list[Any]]:
    payload = expected.get("input") or {}
    result = engine.start(entry, instance_id=ENTRY_INSTANCE_ID, input=payload, options=options)
    lines, journal, children = (
        list(result.write_lines),
        list(result.journal),
        list(result.child_instances),
    )
    if expected["runMode"] == "untilEnd":
        while result.status != "Finished" and result.bookmarks:
            for bookmark in list(result.bookmarks):
                if not any(b["id"] == bookmark.id for b in result.state["bookmarks"]):
                    continue
                result = engine.resume(result.state, bookmark_id=bookmark.id, input=payload)
                lines += result.write_lines
                journal += result.journal
                children += result.child_instances
    return result, lines, journal, children


def run_trigger(
    engine: Engine,
    entry: WorkflowDefinition,
    expected: Mapping[str, Any],
    options: Mapping[str, Any],
) -> RunResult:
    stimulus = expected["trigger"]["http"]
    for node in entry.triggers():
        if node.type != "Elsa.HttpEndpoint":
            continue
        path = node.inputs["path"].expression or {}
        methods = node.inputs.get("supportedMethods")
        allowed = (
            json.loads(methods.expression["value"]) if methods and methods.expression else ["GET"]
        )
        if (
            str(path.get("value")).strip("/") == stimulus["path"].strip("/")
            and stimulus["method"] in allowed
        ):
            return engine.start(
                entry,
                instance_id=ENTRY_INSTANCE_ID,
                options=options,
                trigger={
                    "activityId": node.id,
                    "method": stimulus["method"],
                    "path": stimulus["path"],
                    "body": stimulus.get("body"),
                },
            )
    pytest.fail(f"no HTTP trigger matches {stimulus}")


@pytest.mark.parametrize("case", CASES or ["corpus-missing"])
def test_elsa_corpus_case(case: str) -> None:
    require_corpus(CASES)
    # Given the case's definitions, registered by version and definition id
    folder = CORPUS / case
    expected = json.loads((folder / "expected.json").read_text(encoding="utf-8-sig"))
    definitions = load_definitions(folder)
    index = DefinitionIndex(definitions.values())
    mode = (expected.get("options") or {}).get("flowchartMode", "CounterBased")
    engine = Engine(index, EngineServices(clock=lambda: FIXED_NOW), flowchart_mode=mode)
    options = {"flowchartMode": mode}
    version_id = expected.get("entryDefinitionVersionId")
    entry = (index.by_version_id(version_id) if version_id else None) or index.by_definition_id(
        expected["entryDefinitionId"]
    )
    assert entry is not None, "the entry definition did not load"

    # When it runs as the case says
    children: list[Any] = []
    if expected["runMode"] == "trigger":
        result = run_trigger(engine, entry, expected, options)
        lines, journal = list(result.write_lines), list(result.journal)
    else:
        result, lines, journal, children = run_until_end(engine, entry, expected, options)

    # Then every stated expectation holds
    expect = expected["expect"]
    if "status" in expect:
        assert result.status == expect["status"], result.fault
    if "subStatus" in expect:
        assert result.sub_status == expect["subStatus"], result.fault
    if "writeLines" in expect:
        if expect.get("writeLinesUnordered"):
            missing = [line for line in expect["writeLines"] if line not in lines]
            assert not missing, (lines, result.fault)
        else:
            assert lines == expect["writeLines"], result.fault
    if "variables" in expect:
        root = result.state["contexts"].get(result.state["rootContextId"])
        variables = root["scope"]["vars"] if root else result.state["variables"]
        for name, value in expect["variables"].items():
            assert variables.get(name) == value, (variables, result.fault)
    if "childInstances" in expect:
        for wanted in expect["childInstances"]:
            matches = [c for c in children if c.definition_id == wanted["definitionId"]]
            assert matches, f"no child instance of {wanted['definitionId']}"
            if "correlationId" in wanted:
                assert any(c.correlation_id == wanted["correlationId"] for c in matches)
            for key, value in (wanted.get("properties") or {}).items():
                value = ENTRY_INSTANCE_ID if value == "$entryInstanceId" else value
                assert any(c.properties.get(key) == value for c in matches)
    if "activityCompletedCount" in expect:
        for activity_id, count in expect["activityCompletedCount"].items():
            completed = [
                e for e in journal if e.activity_id == activity_id and e.event_name == "Completed"
            ]
            assert len(completed) == count, result.fault
    if "httpResponse" in expect:
        response = result.http_response
        assert response is not None, result.fault
        content = response["content"]
        body = content if isinstance(content, str) else json.dumps(content)
        assert body == expect["httpResponse"]["body"]
        if expect["httpResponse"].get("successStatusCode"):
            assert 200 <= response["statusCode"] < 300
