"""Faults and incidents worded as Elsa words them: the input-evaluation wrapper, the exception
recorded with its type and inner exception, the Fault activity's message."""

from __future__ import annotations

import datetime as dt
from typing import Any

from broker.engine.api import Engine, EngineServices
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.run.results import RunResult

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
INPUT_EVALUATION = (
    "UnregisteredClrType:Elsa.Workflows.Exceptions.InputEvaluationException, Elsa.Workflows.Core"
)


def js(code: str, type_name: str = "Object") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "JavaScript", "value": code}}


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def run(root: dict[str, Any], variables: list[dict[str, Any]] | None = None) -> RunResult:
    definition = parse_workflow(
        {"definitionId": "wording", "version": 1, "variables": variables or [], "root": root}
    )
    engine = Engine(DefinitionIndex([definition]), EngineServices(clock=lambda: NOW))
    return engine.start(definition, instance_id="wording-1")


def test_an_input_that_fails_to_evaluate_faults_with_elsas_wrapper() -> None:
    # Given an If whose condition throws
    result = run(
        {
            "id": "If1",
            "type": "Elsa.If",
            "condition": js("throw new Error('boom')", "Boolean"),
            "then": {"id": "Then", "type": "Elsa.WriteLine", "text": literal("then")},
        }
    )
    # Then the fault reads as Elsa's InputEvaluationException, naming the input, with the
    # script's error (Jint's JavaScriptException) as its inner exception
    assert result.sub_status == "Faulted"
    assert result.fault is not None
    assert result.fault.message == "Failed to evaluate activity input 'Condition'"
    assert result.fault.exception == {
        "type": INPUT_EVALUATION,
        "message": "Failed to evaluate activity input 'Condition'",
        "innerException": {
            "type": "JavaScriptException",
            "message": "boom",
            "innerException": None,
        },
    }
    assert result.write_lines == ()
    # And the incident says the same
    assert [(i.activity_id, i.message) for i in result.incidents] == [
        ("If1", "Failed to evaluate activity input 'Condition'")
    ]
    assert result.incidents[0].exception == result.fault.exception


def test_a_literal_that_cannot_be_converted_is_an_input_evaluation_failure() -> None:
    result = run(
        {
            "id": "Loop",
            "type": "Elsa.For",
            "start": literal("one", "Int32"),
            "end": literal(3, "Int32"),
            "body": {"id": "Body", "type": "Elsa.WriteLine", "text": literal("tick")},
        }
    )
    assert result.fault is not None
    assert result.fault.message == "Failed to evaluate activity input 'Start'"
    assert result.write_lines == ()


def test_a_script_that_throws_in_runjavascript_faults_with_the_errors_message() -> None:
    # Given RunJavaScript, whose script Elsa runs itself (no input wrapper)
    result = run(
        {"id": "Js1", "type": "Elsa.RunJavaScript", "script": literal("throw new Error('boom')")}
    )
    # Then the message is the JavaScript error's, as Jint's JavaScriptException has it
    assert result.fault is not None
    assert result.fault.message == "boom"
    assert result.fault.exception is not None
    assert result.fault.exception["type"] == "JavaScriptException"


def test_a_thrown_value_that_is_not_an_error_reads_as_the_value() -> None:
    result = run({"id": "Js1", "type": "Elsa.RunJavaScript", "script": literal("throw 'plain'")})
    assert result.fault is not None
    assert result.fault.message == "plain"


def test_a_script_over_its_time_limit_reads_as_a_timeout() -> None:
    definition = parse_workflow(
        {
            "definitionId": "slow",
            "version": 1,
            "root": {
                "id": "Js1",
                "type": "Elsa.RunJavaScript",
                "script": literal("while (true) {}"),
            },
        }
    )
    engine = Engine(
        DefinitionIndex([definition]), EngineServices(clock=lambda: NOW), js_time_limit=0.2
    )
    result = engine.start(definition, instance_id="slow-1")
    assert result.fault is not None
    assert result.fault.message == "The operation has timed out."
    assert result.fault.exception is not None
    assert result.fault.exception["type"] == "TimeoutException"


def test_a_fault_without_a_message_has_dotnets_default_message() -> None:
    result = run({"id": "F", "type": "Elsa.Fault"})
    assert result.fault is not None
    assert result.fault.message == (
        "Exception of type 'Elsa.Workflows.Exceptions.FaultException' was thrown."
    )
    assert (result.fault.code, result.fault.category) == ("0", "General")
    assert result.fault.exception is not None
    assert result.fault.exception["type"] == "FaultException"


def test_a_fault_with_a_message_faults_with_it() -> None:
    result = run({"id": "F", "type": "Elsa.Fault", "message": literal("Invalid request")})
    assert result.fault is not None
    assert result.fault.message == "Invalid request"
    assert result.fault.exception == {
        "type": "FaultException",
        "message": "Invalid request",
        "innerException": None,
    }


def test_a_while_reading_a_variable_named_current_value_reaches_its_break() -> None:
    # Given a While whose body counts a variable named CurrentValue through its generated
    # accessors and breaks at 3 (the hanging workflow)
    counter = {"id": "CurrentValue", "name": "CurrentValue", "typeName": "Int32", "value": 0}
    result = run(
        {
            "id": "Loop",
            "type": "Elsa.While",
            "condition": literal(True, "Boolean"),
            "body": {
                "id": "Body",
                "type": "Elsa.Sequence",
                "activities": [
                    {
                        "id": "Count",
                        "type": "Elsa.RunJavaScript",
                        "script": literal("setCurrentValue(getCurrentValue() + 1)"),
                    },
                    {
                        "id": "Check",
                        "type": "Elsa.If",
                        "condition": js("getCurrentValue() >= 3", "Boolean"),
                        "then": {"id": "Stop", "type": "Elsa.Break"},
                    },
                ],
            },
        },
        variables=[counter],
    )
    # Then it ends, having counted to 3
    assert (result.status, result.sub_status) == ("Finished", "Finished")
    assert result.state["variables"]["CurrentValue"] == 3


def test_a_loops_current_value_wins_over_a_workflow_variable_of_that_name() -> None:
    # Given a workflow variable CurrentValue and a ForEach, whose body declares its own
    result = run(
        {
            "id": "Loop",
            "type": "Elsa.ForEach",
            "items": literal('["a", "b"]', "Object"),
            "body": {"id": "Say", "type": "Elsa.WriteLine", "text": js("getCurrentValue()")},
        },
        variables=[{"id": "CurrentValue", "name": "CurrentValue", "value": "outer"}],
    )
    # Then the body reads the loop's, the innermost, as in Elsa
    assert result.write_lines == ("a", "b")
