"""The shapes Elsa's readers accept: PascalCase names, enums as names, numbers or wrapped
inputs, the legacy sample shapes; and what Elsa refuses, refused at load with its JSON path."""

from __future__ import annotations

from typing import Any

import pytest

from broker.engine.api import Engine, EngineServices
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.model.shapes import camel, original_path, plain_value, workflow_document
from broker.engine.parser import parse_workflow
from broker.errors import WorkflowDefinitionError


def run(document: dict[str, Any]) -> Any:
    definition = parse_workflow(document, file="case.json")
    engine = Engine(DefinitionIndex([definition]), EngineServices())
    return engine.start(definition, instance_id="i1")


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def write_line(activity_id: str, text: str) -> dict[str, Any]:
    return {"id": activity_id, "type": "Elsa.WriteLine", "text": literal(text)}


def document(root: dict[str, Any]) -> dict[str, Any]:
    return {"definitionId": "d", "id": "d-v1", "version": 1, "root": root}


def fork(join_mode: Any) -> dict[str, Any]:
    """A Fork whose first branch writes a line and whose second waits for an event."""
    waits = {"id": "Wait", "type": "Elsa.Event", "eventName": literal("Never")}
    return document(
        {
            "id": "Sequence1",
            "type": "Elsa.Sequence",
            "activities": [
                {
                    "id": "Fork1",
                    "type": "Elsa.Fork",
                    "joinMode": join_mode,
                    "branches": [write_line("A", "a"), waits],
                },
                write_line("End", "end"),
            ],
        }
    )


def test_camel_case_of_pascal_case_names() -> None:
    assert [camel(n) for n in ("CanStartWorkflow", "ID", "text", "TypeName")] == [
        "canStartWorkflow",
        "id",
        "text",
        "typeName",
    ]


def test_a_pascal_case_document_runs_like_its_camel_case_twin() -> None:
    # Given a workflow written with PascalCase property names throughout
    pascal = {
        "DefinitionId": "d",
        "Id": "d-v1",
        "Version": 1,
        "Variables": [{"Id": "v", "Name": "Greeting", "TypeName": "String", "Value": "hi"}],
        "Root": {
            "Id": "Flowchart1",
            "Type": "Elsa.Flowchart",
            "Activities": [
                {
                    "Id": "W1",
                    "Type": "Elsa.WriteLine",
                    "Text": {
                        "TypeName": "String",
                        "Expression": {"Type": "Variable", "Value": {"id": "v"}},
                    },
                },
                {"Id": "W2", "Type": "Elsa.WriteLine", "Text": literal("second")},
            ],
            "Connections": [
                {
                    "Source": {"Activity": "W1", "Port": "Done"},
                    "Target": {"Activity": "W2", "Port": "In"},
                }
            ],
        },
    }
    # When it runs, Then the variable, the connection and both lines were read
    result = run(pascal)
    assert result.write_lines == ("hi", "second"), result.fault


def test_a_camel_case_key_wins_over_its_pascal_case_twin() -> None:
    shaped = workflow_document({"definitionId": "a", "DefinitionId": "b", "root": {}})
    assert shaped["definitionId"] == "a"


@pytest.mark.parametrize(
    "join_mode",
    [
        "WaitAny",
        "waitany",
        1,
        "1",
        literal("WaitAny", "Elsa.Workflows.ForkJoinMode, Elsa.Workflows.Core"),
        literal(1, "Elsa.Workflows.ForkJoinMode, Elsa.Workflows.Core"),
        {"typeName": "String", "expression": {"type": "JavaScript", "value": "'WaitAny'"}},
    ],
    ids=["name", "lower-case", "number", "number-text", "wrapped", "wrapped-number", "script"],
)
def test_fork_join_mode_wait_any_in_every_form_completes_on_the_first_branch(
    join_mode: Any,
) -> None:
    # Given a Fork in WaitAny mode, written in one of Elsa's forms
    # When it runs, Then it completes when the first branch does, without the waiting one
    result = run(fork(join_mode))
    assert result.write_lines == ("a", "end"), result.fault
    assert result.status == "Finished"


@pytest.mark.parametrize("join_mode", ["WaitAll", 0, literal("WaitAll"), None])
def test_fork_join_mode_wait_all_in_every_form_waits_for_every_branch(join_mode: Any) -> None:
    result = run(fork(join_mode))
    assert result.write_lines == ("a",), result.fault
    assert result.status == "Running"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("WaitSome", "$.root.activities[0].joinMode"),
        (7, "$.root.activities[0].joinMode"),
        (literal("Sometimes"), "$.root.activities[0].joinMode.expression.value"),
        (
            {"typeName": "String", "expression": "WaitAny"},
            "$.root.activities[0].joinMode.expression",
        ),
    ],
)
def test_an_enum_elsa_cannot_read_is_refused_at_load_naming_its_path(value: Any, path: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as raised:
        parse_workflow(fork(value), file="case.json")
    assert raised.value.path == path


@pytest.mark.parametrize("mode", ["WaitAny", 2, literal("2"), literal("WaitAny")])
def test_flow_join_mode_numbers_follow_elsas_enum_order(mode: Any) -> None:
    # Given a flowchart whose join is written as WaitAny (FlowJoinMode's third member, 2)
    root = {
        "id": "F",
        "type": "Elsa.Flowchart",
        "activities": [
            {"id": "Start", "type": "Elsa.Start"},
            write_line("A", "a"),
            {"id": "Wait", "type": "Elsa.Event", "eventName": literal("Never")},
            {"id": "Join", "type": "Elsa.FlowJoin", "mode": mode},
            write_line("End", "end"),
        ],
        "connections": [
            {"source": "Start", "target": "A", "sourcePort": "Done", "targetPort": "In"},
            {"source": "Start", "target": "Wait", "sourcePort": "Done", "targetPort": "In"},
            {"source": "A", "target": "Join", "sourcePort": "Done", "targetPort": "In"},
            {"source": "Wait", "target": "Join", "sourcePort": "Done", "targetPort": "In"},
            {"source": "Join", "target": "End", "sourcePort": "Done", "targetPort": "In"},
        ],
    }
    # When it runs, Then the join goes on after the first arrival
    assert run(document(root)).write_lines == ("a", "end")


@pytest.mark.parametrize(
    "flags",
    [
        {"customProperties": {"CanStartWorkflow": True}},
        {"customProperties": {"canStartWorkflow": True}},
        {"CanStartWorkflow": True},
        {"applicationProperties": {"CanStartWorkflow": True}},
        {"customProperties": {"canStartWorkflow": "True"}},
    ],
    ids=["custom-pascal", "custom-camel", "top-pascal", "application-properties", "text"],
)
def test_a_trigger_flag_is_read_in_every_case_and_place(flags: dict[str, Any]) -> None:
    endpoint = {"id": "Http1", "type": "Elsa.HttpEndpoint", "path": literal("hello"), **flags}
    root = {"id": "F", "type": "Elsa.Flowchart", "activities": [endpoint]}
    definition = parse_workflow(document(root), file="case.json")
    assert [node.id for node in definition.triggers()] == ["Http1"]


def test_the_legacy_sample_shape_with_only_a_name_and_a_root_runs() -> None:
    # Given the shape of elsa-samples' console JSON workflow: no ids, no version, no flags
    sample = {
        "name": "Hello World",
        "root": {
            "id": "Flowchart1",
            "type": "Elsa.Flowchart",
            "activities": [write_line("WriteLine1", "Hello World!")],
        },
    }
    # When it is read and run, Then it runs as its only activity says
    definition = parse_workflow(sample, file="HelloWorld.json")
    assert definition.definition_id == "Hello World"
    assert run(sample).write_lines == ("Hello World!",)


def test_the_legacy_exported_shape_with_pascal_case_custom_properties_runs() -> None:
    # Given an older export: top-level usableAsActivity, applicationProperties on the flowchart,
    # PascalCase flags in customProperties, Elsa 3.0's storage driver name, a Literal "True"
    sample = {
        "id": "f608",
        "definitionId": "0b1b",
        "name": "main",
        "version": 6,
        "variables": [
            {
                "id": "516",
                "name": "fromSub",
                "typeName": "String",
                "isArray": False,
                "value": "",
                "storageDriverTypeName": "Elsa.Workflows.Services.WorkflowStorageDriver, "
                "Elsa.Workflows.Core",
            }
        ],
        "customProperties": {},
        "usableAsActivity": False,
        "isLatest": True,
        "isPublished": True,
        "root": {
            "type": "Elsa.Flowchart",
            "version": 1,
            "id": "Flowchart1",
            "applicationProperties": {"NotFoundConnectionsKey": [], "CanStartWorkflow": False},
            "start": "WriteLine1",
            "activities": [
                {
                    **write_line("WriteLine1", "from a legacy export"),
                    "customProperties": {"CanStartWorkflow": False, "RunAsynchronously": False},
                }
            ],
            "connections": [],
        },
    }
    result = run(sample)
    assert result.write_lines == ("from a legacy export",), result.fault


def test_payload_serializer_islands_and_references_read_as_plain_json() -> None:
    # Given values as Elsa's payload serializer writes them (JsonSerialization, Polymorphism)
    island = {
        "StatusCode": "Created",
        "Content": {"_island": '[{"path": "folder1"}]', "_type": "JArray"},
        "_type": "ObjectMap",
    }
    referenced = {
        "$id": "1",
        "items": {"$id": "2", "$values": [{"$id": "3", "text": "a"}], "_type": "List<Model>"},
        "again": {"$ref": "3"},
    }
    # When read, Then the markers are gone and the values are plain JSON
    assert plain_value(island) == {"StatusCode": "Created", "Content": [{"path": "folder1"}]}
    assert plain_value(referenced) == {"items": [{"text": "a"}], "again": {"text": "a"}}


def test_a_variable_value_in_payload_form_is_read_as_plain_json() -> None:
    document = {
        "definitionId": "d",
        "variables": [{"id": "v", "name": "V", "typeName": "Object", "value": {"$values": [1]}}],
        "root": {"id": "S", "type": "Elsa.Sequence"},
    }
    definition = parse_workflow(document)
    assert definition.variables[0].value == [1]


def test_a_generic_activity_type_name_is_read_as_its_activity() -> None:
    # Given "Elsa.SetVariable<Int32>", the name Elsa's serializer writes for SetVariable<int>
    root = {
        "id": "S",
        "type": "Elsa.Sequence",
        "variables": [{"id": "n", "name": "N", "typeName": "Int32", "value": 0}],
        "activities": [
            {
                "id": "Set",
                "type": "Elsa.SetVariable<Int32>",
                "variable": {"id": "n", "name": "N", "typeName": "Int32"},
                "value": literal(7, "Int32"),
            },
            {
                "id": "W",
                "type": "Elsa.WriteLine",
                "text": {
                    "typeName": "String",
                    "expression": {"type": "Variable", "value": {"id": "n", "name": "N"}},
                },
            },
        ],
    }
    assert run(document(root)).write_lines == ("7",)


def test_a_bare_value_where_an_input_belongs_is_read_as_a_literal() -> None:
    root = {"id": "W", "type": "Elsa.WriteLine", "text": "plain text"}
    assert run(document(root)).write_lines == ("plain text",)


def test_a_refused_pascal_case_document_is_named_by_its_own_spelling() -> None:
    # Given a PascalCase file whose Fork has a JoinMode Elsa cannot read
    pascal = {
        "DefinitionId": "d",
        "Root": {"Id": "F", "Type": "Elsa.Fork", "JoinMode": "Sometimes", "Branches": []},
    }
    # When it is read, Then the error's path is the file's own: $.Root.JoinMode
    with pytest.raises(WorkflowDefinitionError) as raised:
        parse_workflow(pascal, file="case.json")
    assert raised.value.path == "$.Root.JoinMode"


def test_a_path_that_leaves_the_document_keeps_its_remainder() -> None:
    document_ = {"Root": {"Activities": [{"Text": {}}]}}
    assert original_path(document_, "$.root.activities[0].text.expression.type") == (
        "$.Root.Activities[0].Text.expression.type"
    )
    assert original_path(document_, "$.root.activities[3].id") == "$.Root.Activities[3].id"
