"""Liquid templates: Elsa's workflow objects and Elsa's (and Fluid's) extra filters."""

from __future__ import annotations

import base64
import hashlib

import pytest

from broker.engine.expr.liquid import render_liquid
from broker.errors import ExpressionError
from tests.unit.engine.dict_scope import DictScope


@pytest.fixture
def scope() -> DictScope:
    return DictScope(
        variables={"Total": 12, "Customer": {"Name": "Ada", "Tier": "gold"}},
        inputs={"payload": {"amount": 5}},
    )


def test_the_workflow_object_and_its_top_level_names(scope: DictScope) -> None:
    # Given a template using Elsa's names for the instance
    template = (
        "{{ Workflow.DefinitionId }}/{{ Workflow.Version }}/{{ Workflow.DefinitionVersionId }}"
        " {{ Workflow.Name }} {{ Workflow.Id }} {{ Workflow.CorrelationId }}"
        " {{ WorkflowDefinitionId }} {{ WorkflowDefinitionVersion }} {{ CorrelationId }}"
    )
    # When rendered / Then each resolves
    assert render_liquid(template, scope) == (
        "orders/3/orders-v3 Orders instance-1 request-1 orders 3 request-1"
    )


def test_variables_and_input_through_elsa_objects(scope: DictScope) -> None:
    template = (
        "{{ Variables.Total }} {{ variables.Customer.Name }} {{ Total }}"
        " {{ Input.payload.amount }} {{ Workflow.Variables.Customer.Tier }}"
        " {{ Workflow.Input.payload.amount }}"
    )
    assert render_liquid(template, scope) == "12 Ada 12 5 gold 5"


def test_elsas_base64_filter_reads_values_as_dotnet_text(scope: DictScope) -> None:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    assert render_liquid("{{ 'héllo' | base64 }}", scope) == b64("héllo")
    assert render_liquid("{{ Total | base64 }}", scope) == b64("12")
    assert render_liquid("{{ true | base64 }}", scope) == b64("True")
    assert render_liquid("{{ Variables.Customer | base64 }}", scope) == b64(
        '{"Name":"Ada","Tier":"gold"}'
    )
    assert render_liquid("[{{ Nothing | base64 }}]", scope) == "[]"


def test_elsas_keys_filter_lists_an_objects_keys(scope: DictScope) -> None:
    assert render_liquid("{{ Variables.Customer | keys | join: ',' }}", scope) == "Name,Tier"
    with pytest.raises(ExpressionError, match="keys expects an object"):
        render_liquid("{{ Total | keys }}", scope)


def test_fluid_json_and_digest_filters(scope: DictScope) -> None:
    assert render_liquid("{{ Variables.Customer | json }}", scope) == (
        '{"Name":"Ada","Tier":"gold"}'
    )
    assert render_liquid("{{ 'abc' | md5 }}", scope) == hashlib.md5(b"abc").hexdigest()  # noqa: S324
    assert render_liquid("{{ 'abc' | sha1 }}", scope) == hashlib.sha1(b"abc").hexdigest()  # noqa: S324
    assert render_liquid("{{ 'abc' | sha256 }}", scope) == hashlib.sha256(b"abc").hexdigest()
    assert render_liquid("{{ 'abc' | base64_encode }}", scope) == "YWJj"
