"""Expression evaluation by type: Literal, Object, Json, Variable, Input, JavaScript, Liquid."""

from __future__ import annotations

from typing import Any

import pytest

from broker.engine.expr.expressions import evaluate
from broker.errors import ExpressionError
from tests.unit.engine.dict_scope import DictScope


@pytest.fixture
def scope() -> DictScope:
    return DictScope(
        variables={"Counter": 3, "Customer": {"Name": "Ada"}},
        inputs={"keys": {"id": "k1"}, "payload": {"amount": 5}},
    )


def expr(kind: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "value": value}


@pytest.mark.parametrize("expression", [None, {}, {"type": None, "value": "x"}])
def test_a_missing_expression_is_none(expression: Any, scope: DictScope) -> None:
    assert evaluate(expression, scope) is None


def test_literals_are_converted_to_the_type_name(scope: DictScope) -> None:
    assert evaluate(expr("Literal", "True"), scope, type_name="Boolean") is True
    assert evaluate(expr("Literal", "4"), scope, type_name="Int32") == 4
    assert evaluate(expr("Literal", "00:00:05"), scope, type_name="TimeSpan") == 5.0
    assert evaluate(expr("Literal", "WaitAll"), scope, type_name="FlowJoinMode") == "WaitAll"
    assert evaluate(expr("Literal", "Dummy Text"), scope, type_name="String") == "Dummy Text"
    assert evaluate(expr("Literal", 7), scope) == 7


@pytest.mark.parametrize("kind", ["Object", "Json"])
def test_object_and_json_expressions_parse_json_text(kind: str, scope: DictScope) -> None:
    assert evaluate(expr(kind, '["One","Two"]'), scope, type_name="Object") == ["One", "Two"]
    assert evaluate(expr(kind, {"parsed": True}), scope) == {"parsed": True}
    assert evaluate(expr(kind, '["GET"]'), scope, type_name="String[]") == ["GET"]


def test_invalid_json_is_an_expression_error(scope: DictScope) -> None:
    with pytest.raises(ExpressionError, match="invalid JSON") as caught:
        evaluate(expr("Object", "{oops"), scope)
    assert caught.value.activity_id == "activity-1"


@pytest.mark.parametrize(
    "reference", ["Counter", {"id": "v1", "name": "Counter"}, {"name": "Counter"}]
)
def test_variable_expressions_read_the_named_variable(reference: Any, scope: DictScope) -> None:
    assert evaluate(expr("Variable", reference), scope, type_name="String") == "3"


def test_an_unknown_variable_is_an_expression_error(scope: DictScope) -> None:
    with pytest.raises(ExpressionError, match="no variable named 'Nope'"):
        evaluate(expr("Variable", "Nope"), scope)


def test_input_expressions_read_workflow_input(scope: DictScope) -> None:
    assert evaluate(expr("Input", "keys"), scope) == {"id": "k1"}
    assert evaluate(expr("Input", "absent"), scope) is None


def test_javascript_expressions_run_with_elsa_functions(scope: DictScope) -> None:
    # Given the request's keys as workflow input
    expression = expr("JavaScript", "`${getInput('keys').id}:${getCounter() + 1}`")
    # When evaluated / Then the script saw input and variables
    assert evaluate(expression, scope) == "k1:4"


def test_javascript_results_are_converted_to_the_type_name(scope: DictScope) -> None:
    assert evaluate(expr("JavaScript", "getCounter() > 1"), scope, type_name="String") == "True"
    assert evaluate(expr("JavaScript", "'12'"), scope, type_name="Int32") == 12


def test_javascript_limits_are_passed_through(scope: DictScope) -> None:
    with pytest.raises(ExpressionError, match=r"time limit of 0\.1s"):
        evaluate(expr("JavaScript", "for (;;) {}"), scope, js_time_limit=0.1)


def test_liquid_templates_see_variables_input_and_ids(scope: DictScope) -> None:
    # Given a template using Elsa's Liquid names
    template = (
        "{{ Variables.Customer.Name }} {{ Customer.Name | upcase }} {{ Input.payload.amount"
        " | plus: Counter }} {{ CorrelationId }} {{ WorkflowInstanceId }}"
    )
    # When rendered / Then each name resolves
    assert evaluate(expr("Liquid", template), scope) == "Ada ADA 8 request-1 instance-1"


def test_liquid_undefined_names_render_empty(scope: DictScope) -> None:
    assert evaluate(expr("Liquid", "[{{ Variables.Nope }}]"), scope) == "[]"


@pytest.mark.parametrize(
    "template", ["{% if %}", "{{ x | no_such_filter }}", "{% for i in (1..1000000) %}{% endfor %}"]
)
def test_liquid_errors_are_expression_errors(template: str, scope: DictScope) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(expr("Liquid", template), scope)
    assert caught.value.expression_type == "Liquid"
    assert caught.value.activity_id == "activity-1"


@pytest.mark.parametrize("kind", ["C#", "CSharp", "Python", "Cobol"])
def test_unsupported_expression_types_are_refused(kind: str, scope: DictScope) -> None:
    with pytest.raises(ExpressionError, match="not supported") as caught:
        evaluate(expr(kind, "1 + 1"), scope)
    assert caught.value.expression_type == kind


def test_a_value_that_does_not_convert_is_an_expression_error(scope: DictScope) -> None:
    with pytest.raises(ExpressionError, match="Int32") as caught:
        evaluate(expr("Literal", "four"), scope, type_name="Int32")
    assert isinstance(caught.value.__cause__, ValueError)
    assert caught.value.activity_id == "activity-1"
