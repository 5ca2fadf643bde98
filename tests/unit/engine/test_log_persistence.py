"""The journal keeps the inputs an activity evaluated and the outputs it set, unless the
workflow's or the activity's log persistence excludes them (Elsa's two spellings)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.engine.api import Engine, EngineServices
from broker.engine.model.log_persistence import mode_of, policy_for
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.run.results import JournalEntry, RunResult
from tests.unit.engine.conftest import NOW, FakeHttp, FakeMailer

STRATEGY = "Elsa.Workflows.LogPersistence.Strategies.{}, Elsa.Workflows.Core"


def strategy(name: str) -> dict[str, str]:
    return {"evaluationMode": "Strategy", "strategyType": STRATEGY.format(name)}


def text(value: Any) -> dict[str, Any]:
    return {"typeName": "String", "expression": {"type": "Literal", "value": value}}


def run(
    workflow_properties: dict[str, Any] | None = None,
    js_properties: dict[str, Any] | None = None,
) -> RunResult:
    """A workflow that writes a line and runs a script returning 6 * 7."""
    document = {
        "id": "io-v1",
        "definitionId": "io",
        "version": 1,
        "customProperties": workflow_properties or {},
        "root": {
            "id": "s",
            "type": "Elsa.Sequence",
            "activities": [
                {"id": "say", "type": "Elsa.WriteLine", "text": text("hello")},
                {
                    "id": "js",
                    "type": "Elsa.RunJavaScript",
                    "script": text("return 6 * 7"),
                    "customProperties": js_properties or {},
                },
            ],
        },
    }
    definition = parse_workflow(document)
    services = EngineServices(http=FakeHttp(), mailer=FakeMailer(), clock=lambda: NOW)
    engine = Engine(DefinitionIndex([definition]), services)
    return engine.start(definition, instance_id="io-1")


def completed(result: RunResult, activity_id: str) -> JournalEntry:
    return next(
        e for e in result.journal if e.activity_id == activity_id and e.event_name == "Completed"
    )


def test_by_default_the_completed_entry_carries_inputs_and_outputs() -> None:
    result = run()
    say, js = completed(result, "say"), completed(result, "js")
    assert say.inputs == {"text": "hello"}
    assert say.outputs is None
    assert js.inputs == {"script": "return 6 * 7"}
    assert js.outputs == {"result": 42}
    # The Started entries carry nothing: the activities completed in the same step
    assert all(e.inputs is None for e in result.journal if e.event_name == "Started")


def test_a_workflow_default_of_exclude_keeps_nothing() -> None:
    result = run({"logPersistenceConfig": {"default": strategy("Exclude")}})
    assert all(e.inputs is None and e.outputs is None for e in result.journal)


def test_an_activity_may_include_what_its_workflow_excludes() -> None:
    result = run(
        {"logPersistenceMode": {"default": "Exclude"}},
        {"logPersistenceConfig": {"default": strategy("Include")}},
    )
    assert completed(result, "say").inputs is None
    assert completed(result, "js").outputs == {"result": 42}


def test_one_input_or_output_may_be_excluded_by_name() -> None:
    result = run(
        js_properties={
            "logPersistenceMode": {"inputs": {"script": 2}},  # the legacy enum number
            "logPersistenceConfig": {"outputs": {"result": strategy("Exclude")}},
        }
    )
    js = completed(result, "js")
    assert (js.inputs, js.outputs) == (None, None)
    assert completed(result, "say").inputs == {"text": "hello"}


def test_a_waiting_activity_records_its_inputs_on_its_started_entry() -> None:
    document = {
        "id": "w-v1",
        "definitionId": "w",
        "version": 1,
        "root": {"id": "e", "type": "Elsa.Event", "eventName": text("approval")},
    }
    definition = parse_workflow(document)
    services = EngineServices(http=FakeHttp(), mailer=FakeMailer(), clock=lambda: NOW)
    result = Engine(DefinitionIndex([definition]), services).start(definition, instance_id="w-1")
    started = [e for e in result.journal if e.activity_id == "e"]
    assert [e.event_name for e in started] == ["Started"]
    assert started[0].inputs == {"eventName": "approval"}


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("Include", "Include"),
        ("exclude", "Exclude"),
        (0, "Inherit"),
        (1, "Include"),
        (strategy("Inherit"), "Inherit"),
        (strategy("Configuration"), "Inherit"),
        ({"evaluationMode": "Expression", "expression": {"type": "JavaScript"}}, "Exclude"),
        (None, None),
        (True, None),
    ],
)
def test_modes_in_both_spellings(value: Any, mode: str | None) -> None:
    assert mode_of(value) == mode


def test_inherit_defers_to_the_activity_then_the_workflow_then_include() -> None:
    inherit = {"logPersistenceConfig": {"default": strategy("Inherit")}}
    assert policy_for(inherit, inherit).keeps("inputs", "Text")
    excluded = {"logPersistenceMode": {"default": "Exclude"}}
    assert not policy_for(excluded, inherit).keeps("inputs", "Text")
    assert policy_for(excluded, {"logPersistenceMode": {"inputs": {"text": "Include"}}}).keeps(
        "inputs", "Text"
    )
