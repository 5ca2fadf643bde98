"""Builders of Elsa workflow documents for the tests, and the few workflows several tiers submit.

``workflow`` wraps activities in a published sequence; ``literal``/``obj`` are input
expressions; ``write_workflow`` saves a document where the registry finds it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def literal(value: Any) -> dict[str, Any]:
    return {"typeName": "Object", "expression": {"type": "Literal", "value": value}}


def obj(value: Any) -> dict[str, Any]:
    return {
        "typeName": "Object",
        "expression": {"type": "Object", "value": json.dumps(value)},
    }


def activity(activity_id: str, kind: str, **inputs: Any) -> dict[str, Any]:
    return {"id": activity_id, "type": kind, "version": 1, **inputs}


def workflow(
    definition_id: str,
    activities: list[dict[str, Any]],
    *,
    request_type: str | None = None,
    **custom: Any,
) -> dict[str, Any]:
    properties = dict(custom)
    if request_type:
        properties["requestType"] = request_type
    return {
        "id": f"{definition_id}-v1",
        "definitionId": definition_id,
        "name": definition_id,
        "version": 1,
        "isPublished": True,
        "isLatest": True,
        "customProperties": properties,
        "root": {
            "id": "root",
            "type": "Elsa.Sequence",
            "version": 1,
            "activities": activities,
        },
    }


def flowchart(
    definition_id: str,
    activities: list[dict[str, Any]],
    connections: list[tuple[str, str, str]],
    *,
    request_type: str | None = None,
    variables: tuple[str, ...] = (),
    **custom: Any,
) -> dict[str, Any]:
    """A published workflow whose root is a flowchart; ``connections`` are (source activity,
    its port, target activity)."""
    document = workflow(definition_id, [], request_type=request_type, **custom)
    document["variables"] = [{"id": v, "name": v, "typeName": "Object"} for v in variables]
    document["root"] = {
        "id": "flow",
        "type": "Elsa.Flowchart",
        "version": 1,
        "activities": activities,
        "connections": [
            {"source": {"activity": s, "port": p}, "target": {"activity": t, "port": "In"}}
            for s, p, t in connections
        ],
    }
    return document


def into(variable: str) -> dict[str, Any]:
    """An output bound to the workflow variable ``variable``."""
    return {"typeName": "Object", "memoryReference": {"id": variable}}


def post_to(activity_id: str, url: str, content: Any = None) -> dict[str, Any]:
    return activity(
        activity_id,
        "Elsa.SendHttpRequest",
        url=literal(url),
        method=literal("POST"),
        content=obj(content or {"from": activity_id}),
    )


def resilient(
    node: dict[str, Any], strategy_id: str | None = None, **inline: Any
) -> dict[str, Any]:
    """``node`` with a resilience strategy (Elsa.Resilience): a configured one by id, or one
    written inline (an Object expression holding an ``HttpResilienceStrategy``)."""
    if strategy_id is not None:
        config: dict[str, Any] = {"mode": "Identifier", "strategyId": strategy_id}
    else:
        body = {"$type": "HttpResilienceStrategy", "id": "inline", **inline}
        config = {
            "mode": "Expression",
            "expression": {"type": "Object", "value": json.dumps(body)},
        }
    custom = dict(node.get("customProperties") or {})
    custom["resilienceStrategy"] = config
    return {**node, "customProperties": custom}


def set_output(activity_id: str, name: str, value: Any) -> dict[str, Any]:
    return activity(activity_id, "Elsa.SetOutput", outputName=literal(name), outputValue=obj(value))


def write_workflow(folder: Path, document: Mapping[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{document['definitionId']}.json"
    path.write_text(json.dumps(document, indent=2))
    return path


def sink_workflow(definition_id: str, request_type: str, url: str, **custom: Any) -> dict[str, Any]:
    """A request type whose workflow POSTs once to ``url`` and then sets an output."""
    return workflow(
        definition_id,
        [post_to("call", url), set_output("out", "result", {"ok": True})],
        request_type=request_type,
        **custom,
    )


def approval() -> dict[str, Any]:
    """Request type ``Approval``: waits for the event ``approval``, then sets its decision."""
    return workflow(
        "approval",
        [
            activity("wait", "Elsa.Event", eventName=literal("approval")),
            set_output("out", "decision", "approved"),
        ],
        request_type="Approval",
    )


def delayed(time_span: str) -> dict[str, Any]:
    """Request type ``Delayed``: waits ``time_span`` (``hh:mm:ss``) on a timer, then finishes."""
    return workflow(
        "delayed",
        [
            activity("delay", "Elsa.Delay", timeSpan=literal(time_span)),
            set_output("out", "result", "later"),
        ],
        request_type="Delayed",
    )


def parent(child: str) -> dict[str, Any]:
    """Request type ``Parent``: dispatches the workflow ``child`` and waits for it to finish."""
    return workflow(
        "parent",
        [
            activity(
                "dispatch",
                "Elsa.DispatchWorkflow",
                workflowDefinitionId=literal(child),
                waitForCompletion=literal(True),
                input=obj({"n": 1}),
            ),
            set_output("out", "parent", "done"),
        ],
        request_type="Parent",
    )


#: the two ways a definition nests deep: activities inside activities, or a deep literal value
DEEP_SHAPES = ("activities", "value")


def deep_definition_text(
    depth: int, shape: str = "value", *, definition_id: str = "deep", request_type: str = "Deep"
) -> str:
    """The JSON text of a definition nesting about ``depth`` levels deep (written as text: a
    document that deep cannot even be serialized by ``json.dumps``), a request-type workflow
    that is valid but for its depth."""
    if shape == "activities":
        # Each Sequence adds two levels: the activity object and its activities list.
        levels = depth // 2
        opening = '{"id": "s%d", "type": "Elsa.Sequence", "version": 1, "activities": ['
        inner = "".join(opening % n for n in range(levels)) + "]}" * levels
        body = f'"activities": [{inner}]'
    elif shape == "value":
        value = "[" * depth + "]" * depth
        expression = f'{{"type": "Literal", "value": {value}}}'
        body = (
            '"activities": [{"id": "write", "type": "Elsa.WriteLine", "version": 1, '
            f'"text": {{"typeName": "Object", "expression": {expression}}}}}]'
        )
    else:
        raise ValueError(shape)
    return (
        f'{{"definitionId": "{definition_id}", "name": "{definition_id}", "version": 1, '
        f'"isPublished": true, "customProperties": {{"requestType": "{request_type}"}}, '
        f'"root": {{"id": "root", "type": "Elsa.Sequence", "version": 1, {body}}}}}'
    )
