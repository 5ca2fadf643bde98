"""Python activities run by the engine: inline in the step, as a task behind a bookmark, waiting
for an event, retried by their policy; and the versions rule for a call scheduled earlier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.activities import Result, Retry, Wait, activity
from broker.activities.adapter import DECLARED, TASK_BOOKMARK, fit
from broker.activities.declaring import declare
from broker.engine.api import Engine
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.run.ports import EngineServices
from broker.engine.run.results import RunActivity
from broker.engine.testing import WorkflowTest, load_definition
from broker.engine.validation import validate_document
from broker.errors import WorkflowDefinitionError, WorkflowFault
from tests.support.workflows import activity as node
from tests.support.workflows import flowchart, into, literal, set_output, write_workflow


class Busy(Exception):
    """Raised by the flaky activity below."""


@activity("Running.Weigh", category="Test", outputs=("grams",), outcomes=("Light", "Heavy"))
def weigh(kilos: float, limit: float = 10) -> Result:
    return Result({"grams": kilos * 1000}, "Heavy" if kilos > limit else "Light")


@activity("Running.Ship", category="Test", queue="test.shipping", outputs=("label",))
def ship(address: str, express: bool = False) -> dict[str, Any]:
    return {"label": f"{'X' if express else 'S'}:{address}"}


@activity("Running.Park", category="Test")
def park(reason: str) -> Wait:
    return Wait(event="unpark", outputs={"result": reason})


@activity(
    "Running.Flaky", category="Test", retry=Retry(max_attempts=4, initial_delay=2, on=(Busy,))
)
def flaky(n: int) -> int:
    raise Busy(f"busy {n}")


def weigh_flow(tmp_path: Path, kilos: Any) -> Path:
    return write_workflow(
        tmp_path,
        flowchart(
            "weigh",
            [
                node("weigh", "Running.Weigh", kilos=kilos, grams=into("Grams")),
                set_output("light", "size", "light"),
                set_output("heavy", "size", "heavy"),
            ],
            [("weigh", "Light", "light"), ("weigh", "Heavy", "heavy")],
            variables=("Grams",),
        ),
    )


def test_an_inline_activity_sets_its_outputs_and_leaves_by_its_outcome(tmp_path: Path) -> None:
    # Given a flowchart whose custom outcomes lead to two different outputs
    path = weigh_flow(
        tmp_path, {"typeName": "Double", "expression": {"type": "JavaScript", "value": "6 * 2"}}
    )
    # When it runs
    run = WorkflowTest.from_file(path).start()
    # Then the Heavy outcome was followed and the output captured into the variable
    run.assert_finished().assert_output(size="heavy")
    assert run.variables["Grams"] == 12000
    [done] = [e for e in run.journal if e.activity_id == "weigh" and e.event_name == "Completed"]
    assert (done.outcome, done.outputs) == ("Heavy", {"grams": 12000})


def test_the_kit_runs_a_fake_in_place_of_the_real_activity(tmp_path: Path) -> None:
    path = weigh_flow(tmp_path, literal(1))
    fake = WorkflowTest.from_file(
        path, activities={"Running.Weigh": lambda kilos, limit: Result({"grams": 0}, "Heavy")}
    )
    fake.start().assert_finished().assert_output(size="heavy")


def test_a_task_activity_suspends_and_asks_for_its_task_on_its_queue(tmp_path: Path) -> None:
    # Given a workflow with a task-mode activity, run by the engine as the runtime runs it
    path = write_workflow(
        tmp_path,
        flowchart(
            "ship",
            [
                node("ship", "Running.Ship", address=literal("Main St 1")),
                set_output("out", "ok", 1),
            ],
            [("ship", "Done", "out")],
        ),
    )
    definition = load_definition(path)
    engine = Engine(DefinitionIndex([definition]), EngineServices())
    first = engine.start(definition, instance_id="i-1")
    # Then it waits on the activity's bookmark and asks for the task with the evaluated inputs
    assert first.sub_status == "Suspended"
    [bookmark] = first.bookmarks
    [command] = first.commands
    assert bookmark.name == TASK_BOOKMARK
    assert command == RunActivity(
        "Running.Ship", {"address": "Main St 1", "express": False}, bookmark.id, "test.shipping"
    )
    # When the task's answer resumes it (after a JSON round trip, as the runtime stores it)
    answer = {"outputs": {"label": "S:Main St 1"}, "outcome": "Done"}
    state = json.loads(json.dumps(first.state))
    done = engine.resume(state, bookmark_id=bookmark.id, input=answer)
    # Then it finishes with the outputs journaled like a built-in's
    assert (done.status, done.sub_status, done.output) == ("Finished", "Finished", {"ok": 1})
    ended = [e for e in done.journal if e.activity_id == "ship" and e.event_name == "Completed"]
    assert ended[0].outputs == {"label": "S:Main St 1"}
    # And a fault answer faults the workflow at the activity
    failed = engine.resume(state, bookmark_id=bookmark.id, input={"fault": "ValueError: no"})
    assert failed.fault is not None
    assert (failed.fault.activity_id, failed.sub_status) == ("ship", "Faulted")
    assert "ValueError: no" in failed.fault.message


def test_a_waiting_activity_is_resumed_by_its_event(tmp_path: Path) -> None:
    path = write_workflow(
        tmp_path,
        flowchart(
            "park",
            [node("park", "Running.Park", reason=literal("customs")), set_output("out", "ok", 1)],
            [("park", "Done", "out")],
        ),
    )
    run = WorkflowTest.from_file(path).start()
    run.assert_waiting_for("park")
    assert dict(run.bookmarks[0].payload) == {"eventName": "unpark"}
    run.deliver_event("unpark", {"by": "ops"}).assert_finished()
    [done] = [e for e in run.journal if e.activity_id == "park" and e.event_name == "Completed"]
    assert done.outputs == {"result": {"by": "ops"}}


def test_an_exception_the_policy_names_asks_for_a_retry_with_the_declared_policy(
    tmp_path: Path,
) -> None:
    path = write_workflow(
        tmp_path, flowchart("flaky", [node("f", "Running.Flaky", n=literal(3))], [])
    )
    run = WorkflowTest.from_file(path).start()
    assert run.retry_pending is not None
    assert run.retry_pending.policy == {"maxAttempts": 4, "initialDelay": 2, "maxDelay": 60.0}
    assert "Busy: busy 3" in run.retry_pending.error


def test_an_undeclared_outcome_faults_the_activity(tmp_path: Path) -> None:
    path = weigh_flow(tmp_path, literal(1))
    test = WorkflowTest.from_file(
        path, activities={"Running.Weigh": lambda kilos, limit: Result({}, "Medium")}
    )
    test.start().assert_faulted("returned the undeclared outcome 'Medium'")


def test_an_undeclared_output_faults_the_activity_naming_it(tmp_path: Path) -> None:
    path = weigh_flow(tmp_path, literal(1))
    test = WorkflowTest.from_file(
        path,
        activities={"Running.Weigh": lambda kilos, limit: Result({"grams": 1, "kg": 1}, "Light")},
    )
    test.start().assert_faulted("returned the undeclared outputs ['kg'] (declared: grams)")


def test_a_connection_from_an_undeclared_outcome_is_refused_at_publish() -> None:
    document = flowchart(
        "bad-port",
        [node("weigh", "Running.Weigh", kilos=literal(1)), set_output("x", "x", 1)],
        [("weigh", "Medium", "x")],
    )
    with pytest.raises(WorkflowDefinitionError, match="has no port 'Medium'"):
        validate_document(document, file="flow.json")


@pytest.mark.parametrize(
    "kilos",
    [
        None,
        literal(""),
        literal("   "),
        {"typeName": "Double", "expression": {"type": "JavaScript", "value": " \n"}},
    ],
)
def test_a_missing_required_input_is_refused_at_publish_naming_the_activity_and_input(
    kilos: Any,
) -> None:
    inputs = {} if kilos is None else {"kilos": kilos}
    document = flowchart("no-kilos", [node("weigh", "Running.Weigh", **inputs)], [])
    refusal = r"'weigh' \(Running\.Weigh\) misses its required input 'Kilos'"
    with pytest.raises(WorkflowDefinitionError, match=refusal):
        validate_document(document, file="flow.json")


def test_a_required_input_set_to_zero_or_false_is_set() -> None:
    document = flowchart("zero", [node("weigh", "Running.Weigh", kilos=literal(0))], [])
    validate_document(document, file="flow.json")


# The versions rule (docs/activities.md) ------------------------------------------------------


def test_a_call_scheduled_on_the_old_signature_is_fitted_to_the_new_one() -> None:
    # Given the inputs a suspended instance's call was scheduled with, before a new release
    scheduled = {"address": "Main St 1", "weight": 3}

    # When the new signature dropped ``weight`` and added ``express`` with a default
    def ship_v2(address: str, express: bool = True) -> None:
        return None

    declared = declare("Versions.Ship", ship_v2, category="Test")
    # Then the call drops the old input and takes the new default
    assert fit(declared, scheduled) == {"address": "Main St 1", "express": True}


def test_a_new_required_input_faults_a_call_scheduled_without_it() -> None:
    def ship_v3(address: str, carrier: str) -> None:
        return None

    declared = declare("Versions.Ship", ship_v3, category="Test")
    with pytest.raises(WorkflowFault, match="now requires the input 'Carrier'"):
        fit(declared, {"address": "Main St 1"})


def test_every_declared_activity_here_is_in_the_registry_of_declarations() -> None:
    assert {"Running.Weigh", "Running.Ship", "Running.Park", "Running.Flaky"} <= set(DECLARED)


@activity("Running.Refuse", category="Test")
def refuse(reason: str) -> None:
    raise ValueError(reason)


def test_a_python_activitys_failure_is_an_incident_like_a_built_ins(tmp_path: Path) -> None:
    # Given a workflow whose incident strategy continues, and a Python activity that raises
    document = flowchart(
        "refuse",
        [node("refuse", "Running.Refuse", reason=literal("no stock feed"))],
        [],
    )
    document["options"] = {
        "incidentStrategyType": (
            "Elsa.Workflows.IncidentStrategies.ContinueWithIncidentsStrategy, Elsa.Workflows.Core"
        )
    }
    run = WorkflowTest.from_file(write_workflow(tmp_path, document)).start()
    # Then its failure is recorded as an incident naming the activity and the exception
    [incident] = run.latest.incidents
    assert incident.activity_id == "refuse"
    assert "no stock feed" in incident.message
    assert incident.exception is not None
    assert incident.exception["type"] == "ValueError"


def test_an_answer_a_workflow_cannot_hold_faults_the_activity_naming_it(tmp_path: Path) -> None:
    # Given a fake answering an object JSON cannot hold (a datetime, a Decimal, an object)
    path = weigh_flow(tmp_path, literal(1))
    test = WorkflowTest.from_file(
        path,
        activities={"Running.Weigh": lambda kilos, limit: Result({"grams": object()}, "Light")},
    )
    # Then the run faults, naming the activity, instead of failing to save
    test.start().assert_faulted("activity 'Running.Weigh' answered a value a workflow cannot hold")


def test_a_fake_for_a_type_no_activity_declares_is_refused(tmp_path: Path) -> None:
    path = weigh_flow(tmp_path, literal(1))
    for typo in ("Running.Wiegh", "running.weigh"):
        with pytest.raises(ValueError, match=f"{typo!r}: ...}} names no Python activity declared"):
            WorkflowTest.from_file(path, activities={typo: lambda kilos, limit: 0})
