"""Parsing Elsa 3 JSON: shapes accepted, errors reported with file and JSON path."""

from __future__ import annotations

from typing import Any

import pytest

from broker.engine.model.definition import pascal_case
from broker.engine.parser import parse_workflow
from broker.errors import WorkflowDefinitionError


def flowchart(connections: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "definitionId": "d",
        "id": "v1",
        "name": "Demo",
        "root": {
            "id": "f",
            "type": "Elsa.Flowchart",
            "connections": connections,
            "activities": [
                {"id": "a", "type": "Elsa.WriteLine"},
                {"id": "b", "type": "Elsa.Http.HttpEndpoint"},
            ],
            **extra,
        },
    }


def test_both_connection_forms_parse_to_the_same_graph() -> None:
    nested = parse_workflow(
        flowchart(
            [
                {
                    "source": {"activity": "a", "port": "Done"},
                    "target": {"activity": "b", "port": "In"},
                }
            ]
        )
    )
    flat = parse_workflow(
        flowchart([{"source": "a", "target": "b", "sourcePort": "Done", "targetPort": "In"}])
    )
    assert nested.root.connections == flat.root.connections


def test_seed_aliases_map_to_catalog_names() -> None:
    definition = parse_workflow(flowchart([]))
    assert definition.nodes["b"].type == "Elsa.HttpEndpoint"


def test_unknown_connection_target_is_reported_with_its_path() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_workflow(flowchart([{"source": "a", "target": "zz"}]), file="demo.json")
    assert caught.value.path == "$.root.connections[0]"
    assert caught.value.file == "demo.json"


def test_expression_without_a_type_is_refused() -> None:
    document = flowchart([])
    document["root"]["activities"][0]["text"] = {"expression": {"value": "x"}}
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_workflow(document)
    assert caught.value.path == "$.root.activities[0].text.expression"


def test_duplicate_activity_ids_are_refused() -> None:
    document = flowchart([])
    document["root"]["activities"][1]["id"] = "a"
    with pytest.raises(WorkflowDefinitionError, match="duplicate activity id"):
        parse_workflow(document)


def test_older_properties_bag_becomes_inputs() -> None:
    document = flowchart([])
    document["root"]["activities"][0]["properties"] = [
        {"name": "Text", "syntax": "Literal", "expressions": {"Literal": "hi"}}
    ]
    node = parse_workflow(document).nodes["a"]
    assert node.inputs["text"].expression == {"type": "Literal", "value": "hi"}


def test_custom_properties_carry_request_type_and_retry() -> None:
    document = flowchart(
        [],
    )
    document["customProperties"] = {"requestType": "InvoiceProcess", "retry": {"maxAttempts": 3}}
    definition = parse_workflow(document)
    assert definition.request_type == "InvoiceProcess"
    assert definition.retry_policy == {"maxAttempts": 3}


def test_usable_as_activity_names_the_type_in_pascal_case() -> None:
    document = flowchart([])
    document["name"] = "Subworkflow test"
    document["usableAsActivity"] = True
    definition = parse_workflow(document)
    assert definition.usable_as_activity
    assert definition.activity_type_name == "SubworkflowTest" == pascal_case("Subworkflow test")


@pytest.mark.parametrize("start", [[], {"id": "a"}, 3])
def test_a_flowchart_start_that_is_not_an_id_is_refused_with_its_path(start: Any) -> None:
    document = flowchart([])
    document["root"]["start"] = start
    with pytest.raises(WorkflowDefinitionError, match="start must be an activity id") as caught:
        parse_workflow(document)
    assert caught.value.path == "$.root.start"


def test_an_array_variable_is_read_as_its_element_type_array() -> None:
    # Given Elsa's spelling of a string[] variable: the element type and isArray, its default
    # value as JSON array text
    document = flowchart([])
    document["variables"] = [
        {"id": "v", "name": "Items", "typeName": "String", "isArray": True, "value": '["A","B"]'},
        {"id": "w", "name": "Name", "typeName": "String", "isArray": False, "value": "x"},
    ]
    # When it is parsed, Then the variable's type is the array type (its value converts to a list)
    found = {v.name: v.type_name for v in parse_workflow(document).variables}
    assert found == {"Items": "String[]", "Name": "String"}


def test_a_variable_without_a_name_is_named_by_its_place_among_the_unnamed() -> None:
    # Given a container's variables, two of them without a name
    document = flowchart([])
    document["variables"] = [
        {"id": "a", "name": "First", "typeName": "Int32"},
        {"id": "b", "name": "", "typeName": "Int32"},
        {"id": "c", "name": "  ", "typeName": "String"},
    ]
    # Then they are Variable1 and Variable2, as Elsa's container names them
    names = [v.name for v in parse_workflow(document).variables]
    assert names == ["First", "Variable1", "Variable2"]
