"""Engine micro-benchmark: activities per second, in-process, no I/O.

Run with ``python -m tests.perf.bench_engine``; prints a table and writes var/bench/engine.json.
Not a test: pytest collects nothing here (no ``test_`` names).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from broker.engine.definition import WorkflowDefinition, parse_workflow
from broker.engine.engine import Engine
from broker.engine.lookup import DefinitionIndex

ROOT = Path(__file__).resolve().parents[2]


def literal(value: Any, type_name: str = "String") -> dict[str, Any]:
    return {"typeName": type_name, "expression": {"type": "Literal", "value": value}}


def five_steps() -> WorkflowDefinition:
    return parse_workflow(json.loads((ROOT / "workflows" / "bench-five-steps.json").read_text()))


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


def measure(name: str, definition: WorkflowDefinition, seconds: float = 1.0) -> dict[str, Any]:
    engine = Engine(DefinitionIndex([definition]))

    def run(n: int) -> Any:
        return engine.start(definition, instance_id=f"bench-{n}", input={"keys": {}, "payload": {}})

    sample = run(0)
    assert sample.sub_status == "Finished", sample.fault
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


def main() -> None:
    rows = [
        measure("5-activity sequence", five_steps()),
        measure("100-iteration loop", loop_of(100)),
        measure("10-branch fork/join", fork_join(10)),
    ]
    print(f"{'scenario':<22} {'act/run':>8} {'runs/s':>10} {'activities/s':>14}")
    for row in rows:
        print(
            f"{row['scenario']:<22} {row['activities_per_run']:>8} "
            f"{row['runs_per_second']:>10} {row['activities_per_second']:>14}"
        )
    out = ROOT / "var" / "bench" / "engine.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"engine": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
