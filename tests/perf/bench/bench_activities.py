"""The bench's Python activities and the two five-step workflows built of them: one of inline
activities, one of task-mode activities (each step its own Celery task). The bench's worker
loads this module through ``BROKER_TASK_MODULES``."""

from __future__ import annotations

from typing import Any

from broker.activities import activity

#: this module, as the stack's BROKER_TASK_MODULES names it
MODULE = __name__
INLINE_TYPE = "BenchPythonInline"
TASK_TYPE = "BenchPythonTasks"
REQUEST_TYPES = (INLINE_TYPE, TASK_TYPE)
STEPS = ("one", "two", "three", "four", "five")


@activity("Bench.Step", category="Bench", outputs=("next",))
def step(n: int) -> dict[str, Any]:
    return {"next": n + 1}


@activity("Bench.TaskStep", category="Bench", outputs=("next",), run="task")
def task_step(n: int) -> dict[str, Any]:
    return {"next": n + 1}


def workflow(request_type: str, activity_type: str) -> dict[str, Any]:
    """Five steps in a sequence, each adding one to the variable N, then the output."""
    nodes: list[dict[str, Any]] = [
        {
            "id": name,
            "type": activity_type,
            "n": {"typeName": "Int32", "expression": {"type": "Variable", "value": "N"}},
            "next": {"typeName": "Object", "memoryReference": {"id": "n"}},
        }
        for name in STEPS
    ]
    nodes.append(
        {
            "id": "out",
            "type": "Elsa.SetOutput",
            "outputName": {"typeName": "String", "expression": {"type": "Literal", "value": "n"}},
            "outputValue": {"typeName": "Object", "expression": {"type": "Variable", "value": "N"}},
        }
    )
    definition_id = request_type.lower()
    return {
        "id": f"{definition_id}-v1",
        "definitionId": definition_id,
        "name": request_type,
        "version": 1,
        "isPublished": True,
        "isLatest": True,
        "customProperties": {"requestType": request_type},
        "variables": [{"id": "n", "name": "N", "typeName": "Int32", "value": "0"}],
        "root": {"id": "steps", "type": "Elsa.Sequence", "activities": nodes},
    }


def workflows() -> dict[str, dict[str, Any]]:
    """The two workflows by file name."""
    return {
        "bench-python-inline.json": workflow(INLINE_TYPE, "Bench.Step"),
        "bench-python-tasks.json": workflow(TASK_TYPE, "Bench.TaskStep"),
    }
