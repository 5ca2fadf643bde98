"""Structured control flow: Sequence, If, Switch, loops, Break, Fork, outputs, faults."""

from __future__ import annotations

import dataclasses
import json

from broker.engine.api import Engine
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from tests.unit.engine.conftest import Harness


def test_sequence_runs_children_in_order(harness: Harness) -> None:
    # Given a sequence of three WriteLines / When it runs
    result = harness.start("sequence")
    # Then the lines come out in order and the workflow finishes
    assert result.write_lines == ("one", "two", "three")
    assert (result.status, result.sub_status) == ("Finished", "Finished")


def test_if_runs_the_else_branch_when_the_condition_is_false(harness: Harness) -> None:
    result = harness.start("if-else")
    assert result.write_lines == ("else", "after")


def test_switch_runs_the_first_matching_case_only(harness: Harness) -> None:
    result = harness.start("switch")
    assert result.write_lines == ("second",)


def test_for_each_runs_the_body_per_item_and_binds_the_current_value(harness: Harness) -> None:
    result = harness.start("for-each")
    assert result.write_lines == ("tick", "tick", "tick")
    assert result.state["variables"]["Last"] == "c"


def test_for_counts_from_start_to_end_inclusive(harness: Harness) -> None:
    assert harness.start("for-loop").write_lines == ("tick", "tick", "tick")


def test_while_with_a_false_condition_skips_its_body(harness: Harness) -> None:
    assert harness.start("while-false").write_lines == ("after",)


def test_break_ends_the_innermost_loop(harness: Harness) -> None:
    result = harness.start("break-loop")
    assert result.write_lines == ("tick",)
    assert result.sub_status == "Finished"


def test_fork_wait_all_waits_for_every_branch(harness: Harness) -> None:
    # Given a fork whose second branch waits for an event
    first = harness.start("fork-wait-all")
    assert first.write_lines == ("left", "right")
    assert first.sub_status == "Suspended"
    # When the event arrives
    second = harness.engine.resume(first.state, bookmark_id=first.bookmarks[0].id)
    # Then the fork completes and the sequence continues
    assert second.write_lines == ("after",)
    assert second.sub_status == "Finished"


def test_set_variable_and_set_output_reach_the_result(harness: Harness) -> None:
    result = harness.start("set-output")
    assert result.state["variables"]["Greeting"] == "hello"
    assert result.output == {"Answer": 42}


def test_fault_activity_faults_the_workflow_with_code_and_category(harness: Harness) -> None:
    result = harness.start("fault")
    assert (result.status, result.sub_status) == ("Finished", "Faulted")
    assert result.fault is not None
    assert (result.fault.message, result.fault.code, result.fault.category) == (
        "nope",
        "E1",
        "business",
    )
    assert result.fault.activity_id == "f"
    assert result.write_lines == ("before",)
    assert result.bookmarks == ()


def test_incident_strategy_continue_records_an_incident_and_goes_on(harness: Harness) -> None:
    result = harness.start("fault-continue")
    # As in Elsa, the faulted activity never completes, so the flowchart stays open (Suspended)
    assert (result.status, result.sub_status) == ("Running", "Suspended")
    assert [i.activity_id for i in result.incidents] == ["bad"]
    assert result.write_lines == ("before", "other branch")
    # And a retry runs the faulted activity again (it faults again: a second incident)
    again = harness.engine.retry(result.state)
    assert again.sub_status == "Suspended"
    assert [i.activity_id for i in again.incidents] == ["bad"]
    assert len(again.state["incidents"]) == 2


def test_finish_ends_the_workflow_at_once(harness: Harness) -> None:
    result = harness.start("finish")
    assert result.write_lines == ("before",)
    assert result.sub_status == "Finished"


def test_ids_are_deterministic_for_the_same_instance(harness: Harness) -> None:
    first = harness.start("sequence", instance_id="same")
    second = harness.start("sequence", instance_id="same")
    assert [e.activity_instance_id for e in first.journal] == [
        e.activity_instance_id for e in second.journal
    ]


def test_studio_incident_strategy_option_continue_goes_on_and_fault_stops(
    harness: Harness,
) -> None:
    # Given a workflow whose options.incidentStrategyType is Elsa's ContinueWithIncidentsStrategy
    result = harness.start("fault-continue-option")
    # Then the fault is an incident and the other branch still runs (the faulted one stays open)
    assert result.sub_status == "Suspended"
    assert [i.activity_id for i in result.incidents] == ["bad"]
    assert result.write_lines == ("before", "other branch")
    # And with Elsa's FaultStrategy the same workflow faults
    definition = harness.index.by_definition_id("fault-continue-option")
    assert definition is not None
    faulting = dataclasses.replace(
        definition,
        options={
            "incidentStrategyType": (
                "Elsa.Workflows.IncidentStrategies.FaultStrategy, Elsa.Workflows.Core"
            )
        },
    )
    faulted = harness.engine.start(faulting, instance_id="fault-option-2")
    assert faulted.sub_status == "Faulted"
    # (the other branch was already scheduled: Elsa runs scheduled work before the step ends)
    assert faulted.write_lines == ("before", "other branch")
    assert faulted.fault is not None
    assert faulted.fault.activity_id == "bad"
    # And that fault is recorded as an incident too, as Elsa records every fault
    assert [i.activity_id for i in faulted.incidents] == ["bad"]


def test_parallel_completes_when_every_child_completed(harness: Harness) -> None:
    # Given a Parallel whose second child waits for an event
    first = harness.start("parallel")
    # Then the first child ran and the Parallel waits for the second
    assert first.write_lines == ("a",)
    assert first.sub_status == "Suspended"
    [bookmark] = first.bookmarks
    # When the event arrives (state saved as JSON in between), the Parallel completes
    done = harness.engine.resume(
        json.loads(json.dumps(first.state)), bookmark_id=bookmark.id, input=None
    )
    assert done.write_lines == ("b", "after")
    assert done.sub_status == "Finished"


def test_break_outside_a_loop_ends_every_enclosing_sequence() -> None:
    # Given nested sequences with a Break in the inner one, and no loop around them
    def line(text: str) -> dict[str, object]:
        text_input = {"typeName": "String", "expression": {"type": "Literal", "value": text}}
        return {"id": text, "type": "Elsa.WriteLine", "text": text_input}

    inner = {
        "id": "Inner",
        "type": "Elsa.Sequence",
        "activities": [line("in"), {"id": "B", "type": "Elsa.Break"}, line("skipped")],
    }
    outer = {
        "id": "Outer",
        "type": "Elsa.Sequence",
        "activities": [line("out"), inner, line("after")],
    }
    definition = parse_workflow({"definitionId": "d", "root": outer})
    # When it runs, Then both sequences stop (Elsa's break signal reaches each) and it finishes
    result = Engine(DefinitionIndex([definition])).start(definition, instance_id="i")
    assert result.write_lines == ("out", "in")
    assert (result.status, result.sub_status) == ("Finished", "Finished")


def test_a_containers_variable_starts_at_its_default_converted_to_its_type() -> None:
    # Given a Sequence declaring a Boolean and an Int32 variable with Elsa's text defaults
    document = {
        "definitionId": "locals",
        "id": "locals-v1",
        "root": {
            "id": "seq",
            "type": "Elsa.Sequence",
            "variables": [
                {"id": "b", "name": "Flag", "typeName": "Boolean", "value": "True"},
                {"id": "n", "name": "Count", "typeName": "Int32", "value": "41"},
            ],
            "activities": [
                {
                    "id": "w",
                    "type": "Elsa.WriteLine",
                    "text": {
                        "expression": {
                            "type": "JavaScript",
                            "value": "return `${typeof getFlag()} ${getCount() + 1}`;",
                        }
                    },
                }
            ],
        },
    }
    definition = parse_workflow(document)
    # When it runs, Then the script reads a boolean and a number, not their text
    result = Engine(DefinitionIndex([definition])).start(definition, instance_id="i")
    assert result.write_lines == ("boolean 42",)


def test_an_instance_started_with_a_name_keeps_it() -> None:
    # Given a workflow writing its instance's name, When it starts with a name of its starter's
    document = {
        "definitionId": "named",
        "id": "named-v1",
        "name": "Definition name",
        "root": {
            "id": "w",
            "type": "Elsa.WriteLine",
            "text": {
                "expression": {"type": "JavaScript", "value": "return getWorkflowInstanceName();"}
            },
        },
    }
    definition = parse_workflow(document)
    engine = Engine(DefinitionIndex([definition]))
    given = engine.start(definition, instance_id="i", name="Chosen")
    # Then the script reads it and the state keeps it; without one, the definition's name
    assert given.write_lines == ("Chosen",)
    assert given.state["name"] == "Chosen"
    assert engine.start(definition, instance_id="j").write_lines == ("Definition name",)
