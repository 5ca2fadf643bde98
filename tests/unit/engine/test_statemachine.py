"""Elsa's StateMachine activity (``broker.engine.activities.statemachine``): read from Elsa's JSON,
run through states and transitions, and saved mid-run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.engine.activities.catalog import CATALOG, declaration_for
from broker.engine.parser import parse_workflow
from broker.engine.testing import WorkflowTest
from broker.errors import WorkflowDefinitionError


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def write_line(activity_id: str, text: str) -> dict[str, Any]:
    return {"id": activity_id, "type": "Elsa.WriteLine", "version": 1, "text": literal(text)}


def event(activity_id: str) -> dict[str, Any]:
    return {
        "id": activity_id,
        "type": "Elsa.Event",
        "version": 1,
        "eventName": literal(activity_id),
    }


def document(machine: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "sm-v1",
        "definitionId": "sm",
        "name": "sm",
        "version": 1,
        "isPublished": True,
        "root": {"id": "root", "type": "Elsa.Sequence", "version": 1, "activities": [machine]},
        **extra,
    }


def order_machine(trigger: Any = write_line, **pay: Any) -> dict[str, Any]:
    """New -> Paid -> Closed, or New -> Closed; each entry, exit, trigger and action writes a
    line (``trigger`` builds the triggers)."""
    return {
        "id": "machine",
        "type": "Elsa.StateMachine",
        "version": 1,
        "initialState": "New",
        "states": [
            {"name": "New", "entry": write_line("new-in", "enter new"), "exit": None},
            {"name": "Paid", "entry": write_line("paid-in", "enter paid")},
            {"name": "Closed"},
        ],
        "transitions": [
            {
                "name": "Pay",
                "from": "New",
                "to": "Paid",
                "trigger": trigger("pay", "pay trigger"),
                "condition": literal(True, "Boolean"),
                "action": write_line("pay-action", "pay action"),
                **pay,
            },
            {
                "name": "Cancel",
                "from": "New",
                "to": "Closed",
                "trigger": trigger("cancel", "cancel trigger"),
            },
            {"name": "Close", "from": "Paid", "to": "Closed", "trigger": trigger("close", "close")},
        ],
    }


def run_of(machine: dict[str, Any], **extra: Any) -> Any:
    return WorkflowTest(parse_workflow(document(machine, **extra))).start()


def test_a_machine_of_instant_activities_runs_its_first_transition_to_the_final_state() -> None:
    # Given a machine whose triggers complete at once
    run = run_of(order_machine())
    # Then the first armed trigger wins, the other is cancelled before it runs, and each state's
    # entry, the action and the next trigger run in Elsa's order, until Closed ends the machine
    run.assert_finished()
    assert run.lines == [
        "enter new",
        "pay trigger",
        "pay action",
        "enter paid",
        "close",
    ]
    assert "cancel:Started" not in [f"{e.activity_id}:{e.event_name}" for e in run.journal]


def test_a_false_condition_rearms_its_trigger_and_another_transition_may_win() -> None:
    # Given a machine whose triggers wait for events, and Pay's condition reads a variable
    machine = order_machine(
        trigger=lambda activity_id, _text: event(activity_id),
        condition={
            "typeName": "Boolean",
            "expression": {"type": "JavaScript", "value": "getAllowed()"},
        },
    )
    variables = [{"id": "allowed", "name": "Allowed", "typeName": "Boolean", "value": False}]
    run = run_of(machine, variables=variables)
    run.assert_waiting_for("pay", "cancel")
    # When Pay fires while its condition is false
    run.deliver_event("pay")
    # Then it is armed again, the machine stays in New, and Cancel still waits
    run.assert_waiting_for("pay", "cancel")
    assert "pay action" not in run.lines
    # When Cancel fires, Pay's trigger is cancelled and the machine ends in Closed
    run.deliver_event("cancel").assert_finished()
    assert run.lines == ["enter new"]
    assert "pay:Cancelled" in [f"{e.activity_id}:{e.event_name}" for e in run.journal]


def test_the_current_state_survives_a_save_in_the_middle_of_the_machine() -> None:
    # Given a machine waiting in New for its triggers
    flow = WorkflowTest(
        parse_workflow(
            document(order_machine(trigger=lambda activity_id, _text: event(activity_id)))
        )
    )
    run = flow.start()
    # When its state goes through JSON (as the runtime stores it) and Pay fires
    state = json.loads(json.dumps(run.latest.state))
    [pay] = [b for b in run.bookmarks if b.activity_id == "pay"]
    resumed = flow.engine.resume(state, bookmark_id=pay.id)
    # Then it continues in Paid, waiting for Close, with CurrentState kept on its context
    assert [b.activity_id for b in resumed.bookmarks] == ["close"]
    [machine] = [c for c in resumed.state["contexts"].values() if c["node"] == "machine"]
    assert machine["props"]["CurrentState"] == "Paid"


def test_a_machine_whose_initial_state_is_unknown_completes_at_once() -> None:
    machine = {**order_machine(), "initialState": "Nowhere"}
    run = run_of(machine).assert_finished()
    assert run.lines == []


def test_the_machine_is_read_from_pascal_case_json_as_older_exports_write_it() -> None:
    # Given a machine whose properties are written in PascalCase
    machine = {
        "Id": "machine",
        "Type": "Elsa.StateMachine",
        "Version": 1,
        "InitialState": "Only",
        "States": [{"Name": "Only", "Entry": write_line("in", "entered")}],
        "Transitions": [],
    }
    # Then it runs its only state's entry and completes
    assert run_of(machine).assert_finished().lines == ["entered"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"states": [{"entry": None}]}, "$.root.activities[0].states[0]"),
        ({"transitions": [{"from": "New"}]}, "$.root.activities[0].transitions[0].to"),
        (
            {"transitions": [{"from": "New", "to": "Paid", "condition": {"expression": 3}}]},
            "$.root.activities[0].transitions[0].condition",
        ),
        ({"states": [{"name": "New", "entry": "write"}]}, "$.root.activities[0].states[0].entry"),
    ],
)
def test_a_malformed_machine_is_refused_at_load_naming_its_path(
    change: dict[str, Any], path: str
) -> None:
    with pytest.raises(WorkflowDefinitionError) as refused:
        parse_workflow(document({**order_machine(), **change}))
    assert refused.value.path == path


def test_an_activity_held_by_the_machine_shares_the_workflows_ids() -> None:
    # Given a machine whose state entry reuses the id of another activity of the workflow
    machine = order_machine()
    machine["states"][1]["entry"] = write_line("machine", "same id as the machine")
    # Then the file is refused, as any duplicate activity id is
    with pytest.raises(WorkflowDefinitionError, match="duplicate activity id"):
        parse_workflow(document(machine))


def test_studio_finds_the_machine_in_its_flow_category() -> None:
    found = declaration_for(CATALOG["Elsa.StateMachine"])
    assert found is not None
    assert (found.spec.category, found.spec.description) == (
        "Flow",
        "Executes a state machine made of named states and trigger-driven transitions.",
    )
