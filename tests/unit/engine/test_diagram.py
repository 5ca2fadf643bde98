"""Mermaid diagrams of workflow documents."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from broker.engine.model.diagram import to_mermaid
from tests.support.services import CORPUS, require_corpus

CORPUS_FILES = sorted(p for p in CORPUS.glob("*/*.json") if p.name != "expected.json")


def flowchart(
    *activities: dict[str, Any],
    connections: list[Any] | None = None,
    root_type: str = "Elsa.Flowchart",
) -> dict[str, Any]:
    root: dict[str, Any] = {"id": "root", "type": root_type, "activities": list(activities)}
    if connections is not None:
        root["connections"] = connections
    return {"definitionId": "d", "root": root}


def test_seed_style_approval_workflow_draws_shapes_subgraph_and_labels() -> None:
    # Given the seed's example: an endpoint, an If with True/False ports, a Sequence that waits
    document = flowchart(
        {"id": "HttpEndpoint1", "type": "Elsa.Http.HttpEndpoint", "displayName": "Receive"},
        {"id": "If1", "type": "Elsa.If", "displayName": "Approved?"},
        {
            "id": "Sequence1",
            "type": "Elsa.Sequence",
            "displayName": "Approval Path",
            "activities": [
                {"id": "Email1", "type": "Elsa.Email.SendEmail", "displayName": "Notify"},
                {"id": "Signal1", "type": "Elsa.Primitives.SignalReceived", "displayName": "Wait"},
            ],
        },
        {"id": "Reject1", "type": "Elsa.WriteHttpResponse", "displayName": "Reject"},
        connections=[
            {"source": "HttpEndpoint1", "target": "If1", "sourcePort": "Done", "targetPort": "In"},
            {"source": {"activity": "If1", "port": "True"}, "target": {"activity": "Sequence1"}},
            {"source": {"activity": "If1", "port": "False"}, "target": {"activity": "Reject1"}},
        ],
    )
    # When drawn / Then the text is exactly the elsa-to-mermaid style
    assert to_mermaid(document) == (
        "flowchart TD\n"
        "\n"
        '    HttpEndpoint1(["Receive"])\n'
        '    If1{"Approved?"}\n'
        '    subgraph Sequence1["Approval Path"]\n'
        '        Email1["Notify"]\n'
        '        Signal1[/"Wait"/]\n'
        "        Email1 --> Signal1\n"
        "    end\n"
        '    Reject1["Reject"]\n'
        "\n"
        "    HttpEndpoint1 --> If1\n"
        "    If1 -->|True| Sequence1\n"
        "    If1 -->|False| Reject1\n"
    )


def test_a_single_activity_root_is_one_node() -> None:
    document = {"root": {"id": "w1", "type": "Elsa.WriteLine", "name": "WriteLine1"}}
    assert to_mermaid(document) == 'flowchart TD\n\n    w1["WriteLine1"]\n'


def test_timers_and_endpoints_are_rounded_and_waits_are_parallelograms() -> None:
    # Given one activity of each kind, labelled by name, display text or type
    document = flowchart(
        {"id": "a", "type": "Elsa.Start"},
        {"id": "b", "type": "Elsa.Delay", "metadata": {"displayText": "Wait 5s"}},
        {"id": "c", "type": "Elsa.Event", "name": "Approved"},
        {"id": "d", "type": "Elsa.RunTask"},
        {
            "id": "e",
            "type": "Elsa.DispatchWorkflow",
            "waitForCompletion": {
                "typeName": "Boolean",
                "expression": {"type": "Literal", "value": "True"},
            },
        },
        {"id": "f", "type": "Elsa.DispatchWorkflow"},
        {"id": "g", "type": "Elsa.FlowFork"},
        {"id": "h", "type": "Elsa.Finish"},
    )
    # When drawn
    lines = to_mermaid(document).splitlines()
    # Then each has its shape
    assert lines[2:] == [
        '    a(["Start"])',
        '    b(["Wait 5s"])',
        '    c[/"Approved"/]',
        '    d[/"RunTask"/]',
        '    e[/"DispatchWorkflow"/]',
        '    f["DispatchWorkflow"]',
        '    g{"FlowFork"}',
        '    h(["Finish"])',
    ]


def test_labels_and_ids_are_escaped_for_mermaid() -> None:
    # Given hostile ids and labels
    document = flowchart(
        {"id": "a-b.c", "type": "Elsa.WriteLine", "displayName": 'say "hi" <b>#1</b>\nnext'},
        {"id": "end", "type": "Elsa.End"},
        {"id": "a_b_c", "type": "Elsa.WriteLine", "name": "x|y"},
        connections=[{"source": "a-b.c", "target": "end", "sourcePort": 'Odd "port"'}],
    )
    # When drawn
    text = to_mermaid(document)
    # Then ids are sanitised, unique and not reserved, and labels cannot break out
    assert text == (
        "flowchart TD\n"
        "\n"
        '    a_b_c["say #quot;hi#quot; #lt;b#gt;#35;1#lt;/b#gt; next"]\n'
        '    a_end(["End"])\n'
        '    a_b_c_2["x#124;y"]\n'
        "\n"
        '    a_b_c -->|"Odd #quot;port#quot;"| a_end\n'
    )


def test_a_sequence_root_chains_its_children_and_held_activities_get_labelled_edges() -> None:
    # Given a Sequence root whose If holds then/else activities
    document = flowchart(
        {"id": "w1", "type": "Elsa.WriteLine", "name": "Before"},
        {
            "id": "if1",
            "type": "Elsa.If",
            "name": "Check",
            "then": {"id": "t1", "type": "Elsa.WriteLine", "name": "Yes"},
            "else": {"id": "e1", "type": "Elsa.WriteLine", "name": "No"},
        },
        root_type="Elsa.Sequence",
    )
    # When drawn / Then children are chained and the held ones hang off the If
    assert to_mermaid(document) == (
        "flowchart TD\n"
        "\n"
        '    w1["Before"]\n'
        '    if1{"Check"}\n'
        '    t1["Yes"]\n'
        '    e1["No"]\n'
        "\n"
        "    if1 -->|Then| t1\n"
        "    if1 -->|Else| e1\n"
        "    w1 --> if1\n"
    )


def test_connections_to_unknown_activities_are_skipped() -> None:
    document = flowchart(
        {"id": "a", "type": "Elsa.WriteLine"}, connections=[{"source": "a", "target": "ghost"}]
    )
    assert "ghost" not in to_mermaid(document)


def test_a_document_without_root_is_an_empty_flowchart() -> None:
    assert to_mermaid({}) == "flowchart TD\n\n"


@pytest.mark.parametrize(
    "path", CORPUS_FILES or [CORPUS / "corpus-missing"], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_every_corpus_workflow_draws_a_consistent_diagram(path: Path) -> None:
    require_corpus(CORPUS_FILES)
    # Given a workflow file from Elsa's own tests
    document = json.loads(path.read_text(encoding="utf-8-sig"))
    # When drawn
    text = to_mermaid(document)
    # Then it is a flowchart whose edges join declared nodes and whose subgraphs are closed
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    declared = {
        m.group(1)
        for line in lines
        if (m := re.match(r"\s*(?:subgraph )?([A-Za-z0-9_]+)[\[({]", line))
    }
    for line in lines:
        edge = re.match(r"\s*([A-Za-z0-9_]+) -->(?:\|[^|]*\|)? ([A-Za-z0-9_]+)$", line)
        if edge:
            assert {edge.group(1), edge.group(2)} <= declared, line
    assert sum(line.strip().startswith("subgraph ") for line in lines) == sum(
        line.strip() == "end" for line in lines
    )


def test_the_executed_path_and_the_faulted_activity_are_styled() -> None:
    # Given a flowchart a -> b -> c where a and b ran and b faulted
    document = {
        "root": {
            "type": "Elsa.Flowchart",
            "activities": [
                {"id": "a-1", "type": "Elsa.WriteLine"},
                {"id": "b-1", "type": "Elsa.WriteLine"},
                {"id": "c-1", "type": "Elsa.WriteLine"},
            ],
            "connections": [
                {"source": {"activity": "a-1", "port": "Done"}, "target": {"activity": "b-1"}},
                {"source": {"activity": "b-1", "port": "Done"}, "target": {"activity": "c-1"}},
            ],
        }
    }
    text = to_mermaid(document, executed=["a-1", "b-1", "unknown"], faulted="b-1")
    # Then both nodes are marked, only the edge between them is the path, b is faulted
    assert "    class a_1,b_1 executed" in text
    assert "    linkStyle 0 stroke:#15803d,stroke-width:3px" in text
    assert "    class b_1 faulted" in text
    # And without a run the drawing is unchanged
    assert "classDef" not in to_mermaid(document)


def test_a_pascal_case_file_is_drawn_like_its_camel_case_twin() -> None:
    pascal = {
        "Root": {
            "Id": "F",
            "Type": "Elsa.Flowchart",
            "Activities": [{"Id": "Hello", "Type": "Elsa.WriteLine"}],
            "Connections": [],
        }
    }
    camel = {
        "root": {
            "id": "F",
            "type": "Elsa.Flowchart",
            "activities": [{"id": "Hello", "type": "Elsa.WriteLine"}],
            "connections": [],
        }
    }
    assert "Hello" in to_mermaid(pascal)
    assert to_mermaid(pascal) == to_mermaid(camel)


def test_a_state_machine_draws_its_states_and_transitions_activities_beside_it() -> None:
    # Given a StateMachine whose state and transition hold activities
    machine = {
        "id": "Machine",
        "type": "Elsa.StateMachine",
        "states": [{"name": "New", "entry": {"id": "In", "type": "Elsa.WriteLine"}}],
        "transitions": [
            {"from": "New", "to": "Done", "trigger": {"id": "Go", "type": "Elsa.Event"}},
        ],
    }
    diagram = to_mermaid(flowchart(machine))
    # Then each is drawn with an edge labelled by the state or transition and its role
    assert "Machine -->|New entry| In" in diagram
    assert 'Machine -->|"New-#gt;Done trigger"| Go' in diagram  # ">" escaped for Mermaid
