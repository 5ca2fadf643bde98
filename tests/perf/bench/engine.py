"""In-process engine speed: activities per second for three shapes of workflow, no I/O.

The scenarios are the shipped 5-step sequence (``workflows/bench-five-steps.json``, the same file
the end-to-end figures run), a 100-iteration ``For`` loop, a 10-branch flowchart fork joined
with ``FlowJoin`` (WaitAll), and a sequence of 5 ``SetVariable`` steps whose values are
JavaScript expressions (the sandbox's cost per evaluation). Each is started again and again for
a fixed time; an activity is counted once per ``Completed`` journal entry, the root excluded.
"""

from __future__ import annotations

import json
import time
from typing import Any

from broker.engine.api import Engine
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.errors import WorkflowFault
from tests.perf.bench import WORKFLOW

FIVE_STEPS = "5-activity sequence"
LOOP = "100-iteration loop"
FORK_JOIN = "10-branch fork/join"
JAVASCRIPT = "5 JavaScript steps"


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def five_steps() -> WorkflowDefinition:
    path = WORKFLOW
    return parse_workflow(json.loads(path.read_text()))


def loop_of(iterations: int) -> WorkflowDefinition:
    body = {
        "id": "body",
        "type": "Elsa.SetVariable",
        "variable": {"id": "v", "name": "V"},
        "value": literal("x"),
    }
    return parse_workflow(
        {
            "id": "loop-v1",
            "definitionId": "loop",
            "name": "loop",
            "variables": [{"id": "v", "name": "V"}],
            "root": {
                "id": "for",
                "type": "Elsa.For",
                "start": literal(1, "Int32"),
                "end": literal(iterations, "Int32"),
                "body": body,
            },
        }
    )


def fork_join(branches: int) -> WorkflowDefinition:
    nodes: list[dict[str, Any]] = [
        {"id": "start", "type": "Elsa.Start"},
        {"id": "join", "type": "Elsa.FlowJoin", "mode": literal("WaitAll")},
        {"id": "end", "type": "Elsa.End"},
    ]
    connections = []
    for index in range(branches):
        nodes.append(
            {
                "id": f"b{index}",
                "type": "Elsa.SetVariable",
                "variable": {"id": "v", "name": "V"},
                "value": literal(index, "Int32"),
            }
        )
        connections += [
            {
                "source": {"activity": "start", "port": "Done"},
                "target": {"activity": f"b{index}", "port": "In"},
            },
            {
                "source": {"activity": f"b{index}", "port": "Done"},
                "target": {"activity": "join", "port": "In"},
            },
        ]
    connections.append(
        {
            "source": {"activity": "join", "port": "Done"},
            "target": {"activity": "end", "port": "In"},
        }
    )
    return parse_workflow(
        {
            "id": "fork-v1",
            "definitionId": "fork",
            "name": "fork",
            "variables": [{"id": "v", "name": "V"}],
            "root": {
                "id": "flow",
                "type": "Elsa.Flowchart",
                "activities": nodes,
                "connections": connections,
            },
        }
    )


def javascript_steps(count: int) -> WorkflowDefinition:
    """``count`` SetVariable steps, each a JavaScript expression over the previous value."""
    steps = [
        {
            "id": f"js{index}",
            "type": "Elsa.SetVariable",
            "variable": {"id": "v", "name": "Total"},
            "value": {
                "typeName": "Int32",
                "expression": {
                    "type": "JavaScript",
                    "value": f"getTotal() + variables.Total % 7 + {index}",
                },
            },
        }
        for index in range(count)
    ]
    return parse_workflow(
        {
            "id": "javascript-v1",
            "definitionId": "javascript",
            "name": "javascript",
            "variables": [{"id": "v", "name": "Total", "typeName": "Int32", "value": 1}],
            "root": {"id": "steps", "type": "Elsa.Sequence", "activities": steps},
        }
    )


def scenarios() -> list[tuple[str, WorkflowDefinition]]:
    return [
        (FIVE_STEPS, five_steps()),
        (LOOP, loop_of(100)),
        (FORK_JOIN, fork_join(10)),
        (JAVASCRIPT, javascript_steps(5)),
    ]


def measure(name: str, definition: WorkflowDefinition, seconds: float = 1.0) -> dict[str, Any]:
    """Start ``definition`` repeatedly for ``seconds``; runs and activities per second."""
    engine = Engine(DefinitionIndex([definition]))

    def run(n: int) -> Any:
        return engine.start(definition, instance_id=f"bench-{n}", input={"keys": {}, "payload": {}})

    sample = run(0)
    if sample.sub_status != "Finished":
        raise WorkflowFault(f"engine scenario {name!r} did not finish: {sample.fault}")
    # Every activity completion is journalled once; the workflow root is not an activity.
    per_run = sum(1 for e in sample.journal if e.event_name == "Completed") - 1
    runs, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        run(runs)
        runs += 1
    return {
        "scenario": name,
        "activities_per_run": per_run,
        "runs": runs,
        "seconds": round(elapsed, 3),
        "runs_per_second": round(runs / elapsed, 1),
        "activities_per_second": round(runs * per_run / elapsed),
    }


def measure_all(seconds: float = 1.0) -> list[dict[str, Any]]:
    """Every scenario, ``seconds`` each."""
    return [measure(name, definition, seconds) for name, definition in scenarios()]
