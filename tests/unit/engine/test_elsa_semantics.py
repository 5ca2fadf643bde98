"""Elsa behaviours the ported conformance cases pinned down (docs/conformance.md), one each."""

from __future__ import annotations

import datetime as dt
from typing import Any

from broker.engine.api import Engine, EngineServices
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.run.results import RunResult

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def text(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def line(node_id: str, value: str) -> dict[str, Any]:
    return {"id": node_id, "type": "Elsa.WriteLine", "text": text(value)}


def run(root: dict[str, Any], **options: Any) -> RunResult:
    definition = parse_workflow({"definitionId": "semantics", "version": 1, "root": root})
    engine = Engine(DefinitionIndex([definition]), EngineServices(clock=lambda: NOW), **options)
    return engine.start(definition, instance_id="semantics-1")


def edge(source: str, target: str) -> dict[str, Any]:
    return {"source": {"activity": source, "port": "Done"}, "target": {"activity": target}}


def test_a_fault_records_its_incident_and_the_other_scheduled_branch_still_runs() -> None:
    # Given a Parallel whose second child faults
    result = run(
        {
            "id": "p",
            "type": "Elsa.Parallel",
            "activities": [
                line("a", "before"),
                {"id": "bad", "type": "Elsa.Fault", "message": text("nope")},
                line("b", "after"),
            ],
        }
    )
    # Then the instance faults at that child, with one incident, and the third child ran
    assert result.sub_status == "Faulted"
    assert result.fault is not None
    assert result.fault.activity_id == "bad"
    assert [i.activity_id for i in result.incidents] == ["bad"]
    assert result.write_lines == ("before", "after")


def test_a_counter_mode_wait_any_join_cancels_the_branch_that_waits() -> None:
    # Given a WaitAny join fed by a quick branch and one waiting for an event
    result = run(
        {
            "id": "f",
            "type": "Elsa.Flowchart",
            "start": "s",
            "activities": [
                line("s", "start"),
                line("quick", "quick"),
                {"id": "slow", "type": "Elsa.Event", "eventName": text("never")},
                {"id": "j", "type": "Elsa.FlowJoin", "mode": text("WaitAny")},
                line("after", "after"),
            ],
            "connections": [
                edge("s", "quick"),
                edge("s", "slow"),
                edge("quick", "j"),
                edge("slow", "j"),
                edge("j", "after"),
            ],
        }
    )
    # Then the workflow goes on past the join and nothing is left waiting
    assert result.write_lines == ("start", "quick", "after")
    assert result.sub_status == "Finished"
    assert result.bookmarks == ()


def test_a_start_at_time_already_reached_does_not_wait() -> None:
    result = run({"id": "at", "type": "Elsa.StartAt", "dateTime": text(NOW.isoformat())})
    assert result.sub_status == "Finished"
    assert result.bookmarks == ()


def test_a_loop_body_reads_current_value_and_current_index_as_variables() -> None:
    result = run(
        {
            "id": "loop",
            "type": "Elsa.ForEach",
            "items": {"typeName": "Object", "expression": {"type": "Object", "value": '["a","b"]'}},
            "body": {
                "id": "w",
                "type": "Elsa.WriteLine",
                "text": {
                    "typeName": "String",
                    "expression": {
                        "type": "JavaScript",
                        "value": "getCurrentIndex() + ':' + getVariable('CurrentValue')",
                    },
                },
            },
        }
    )
    assert result.write_lines == ("0:a", "1:b")


def test_a_for_each_whose_items_evaluate_to_null_faults() -> None:
    result = run(
        {
            "id": "loop",
            "type": "Elsa.ForEach",
            "items": text(None, "Object"),
            "body": line("w", "never"),
        }
    )
    assert result.sub_status == "Faulted"
    assert result.write_lines == ()
