"""Trigger indexing: which activities of a workflow can start it, and on what stimulus
(docs/design.md, section 1)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from broker.engine.activities.catalog import TRIGGER_NAMES
from broker.engine.model import shapes
from broker.names import (
    CRON,
    EVENT,
    HTTP_ENDPOINT,
    START_AT,
    TIMER,
    WEBHOOK_EVENT,
)

# Every accepted spelling of a trigger activity type, mapped to the one name stored in the index,
# comes from the activities' ``@activity(..., trigger=...)`` declarations.
__all__ = [
    "CRON",
    "EVENT",
    "HTTP_ENDPOINT",
    "START_AT",
    "TIMER",
    "TRIGGER_NAMES",
    "WEBHOOK_EVENT",
    "TriggerSpec",
    "canonical_json",
    "index_triggers",
    "trigger_hash",
]

PLACEHOLDER_REASON = "Trigger should have a payload"

# Keys under which an activity never holds a nested activity; skipping them keeps expression
# objects (which also carry a "type") from being mistaken for activities.
_NOT_ACTIVITIES = frozenset({"expression", "metadata", "memoryReference", "customProperties"})


@dataclasses.dataclass(frozen=True)
class TriggerSpec:
    """One indexed trigger; ``payload`` and ``hash`` are None for a placeholder."""

    activity_id: str
    activity_type: str  # as the file spells it
    name: str  # the canonical trigger name, e.g. Elsa.HttpEndpoint
    payload: dict[str, Any] | None
    hash: str | None
    path: str  # JSON path of the activity, for error messages

    @property
    def is_placeholder(self) -> bool:
        return self.payload is None


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def trigger_hash(name: str, payload: Mapping[str, Any]) -> str:
    """SHA-256 hex of the trigger name followed by the canonical JSON of its payload."""
    return hashlib.sha256((name + canonical_json(payload)).encode("utf-8")).hexdigest()


def index_triggers(document: Mapping[str, Any]) -> list[TriggerSpec]:
    """Every trigger of a workflow document, placeholders included, in document order."""
    specs: list[TriggerSpec] = []
    root = document.get("root")
    if not isinstance(root, Mapping):
        return specs
    for path, activity in _walk_activities(root, "$.root"):
        specs.extend(_activity_triggers(activity, path))
    return specs


def _walk_activities(node: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(node, Mapping):
        if isinstance(node.get("type"), str) and isinstance(node.get("id"), str):
            yield path, node
        for key, value in node.items():
            if key not in _NOT_ACTIVITIES and isinstance(value, Mapping | list):
                yield from _walk_activities(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk_activities(item, f"{path}[{index}]")


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _activity_triggers(activity: Mapping[str, Any], path: str) -> list[TriggerSpec]:
    props = activity.get("customProperties")
    props = props if isinstance(props, Mapping) else {}
    legacy = activity.get("applicationProperties")  # where older exports kept the flag
    legacy = legacy if isinstance(legacy, Mapping) else {}
    can_start = props.get(
        "canStartWorkflow", activity.get("canStartWorkflow", legacy.get("canStartWorkflow"))
    )
    name = TRIGGER_NAMES.get(str(activity["type"]))
    if name is None or not _truthy(can_start):
        return []
    if props.get("registersTriggers") is False:
        return []
    try:
        payloads = _PAYLOADS[name](activity)
    except (ValueError, TypeError):
        payloads = None
    base = {
        "activity_id": activity["id"],
        "activity_type": activity["type"],
        "name": name,
        "path": path,
    }
    if not payloads:
        return [TriggerSpec(payload=None, hash=None, **base)]
    return [TriggerSpec(payload=p, hash=trigger_hash(name, p), **base) for p in payloads]


# Input values ------------------------------------------------------------------------------------


class NotLiteral(ValueError):
    """Raised when an input is an expression that can only be evaluated at run time."""


def literal_input(activity: Mapping[str, Any], *names: str) -> Any:
    """The literal value of the first named input that is set, else None.

    Understands Elsa 3 inputs (``{"typeName", "expression": {"type", "value"}}``), plain JSON
    values, and Elsa 2's ``properties`` list (``{"name", "syntax", "expressions"}``). Raises
    ``NotLiteral`` when the input is a run-time expression (JavaScript, Liquid, Variable, ...).
    """
    for name in names:
        if name in activity and activity[name] is not None:
            return _literal_value(activity[name])
    legacy = activity.get("properties")
    if isinstance(legacy, list):
        wanted = {n.lower() for n in names}
        for prop in legacy:
            if isinstance(prop, Mapping) and str(prop.get("name", "")).lower() in wanted:
                return _legacy_value(prop)
    return None


def _literal_value(raw: Any) -> Any:
    if not isinstance(raw, Mapping) or "expression" not in raw:
        return raw
    expression = raw["expression"]
    if expression is None:
        return None
    if not isinstance(expression, Mapping):
        raise NotLiteral("an expression must be an object")
    return _expression_value(str(expression.get("type")), expression.get("value"))


def _legacy_value(prop: Mapping[str, Any]) -> Any:
    syntax = str(prop.get("syntax") or "Literal")
    expressions = prop.get("expressions")
    if not isinstance(expressions, Mapping):
        return None
    return _expression_value(syntax, expressions.get(syntax))


def _expression_value(kind: str, value: Any) -> Any:
    if kind == "Literal":
        return value
    if kind in ("Object", "Json"):
        return shapes.json_text(value) if isinstance(value, str) else value
    raise NotLiteral(f"{kind} expressions are evaluated at run time")


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("expected text")
    text = str(value).strip()
    if not text:
        raise ValueError("empty")
    return text


# Payloads per trigger name -----------------------------------------------------------------------


def _http_payloads(activity: Mapping[str, Any]) -> list[dict[str, Any]]:
    path = _text(literal_input(activity, "path")).lower()
    methods = literal_input(activity, "supportedMethods", "methods", "method")
    if methods is None:
        methods = ["GET"]  # Elsa's default for HttpEndpoint
    if isinstance(methods, str) and methods.strip().startswith("["):
        # a literal list written as JSON text ("[\"GET\"]"), which Elsa converts to the list
        try:
            methods = json.loads(methods)
        except ValueError as exc:
            raise ValueError("supportedMethods must be a JSON list of methods") from exc
    if isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, list) or not methods:
        raise ValueError("supportedMethods must be a non-empty list")
    unique = dict.fromkeys(_text(m).lower() for m in methods)
    return [{"path": path, "method": method} for method in unique]


def _event_payloads(activity: Mapping[str, Any]) -> list[dict[str, Any]]:
    name = literal_input(activity, "eventName", "signal", "signalName")
    return [{"eventName": _text(name)}]


def _webhook_payloads(activity: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"eventType": _text(literal_input(activity, "eventType"))}]


def _timer_payloads(activity: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"interval": _text(literal_input(activity, "interval", "timeout"))}]


def _cron_payloads(activity: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"cronExpression": _text(literal_input(activity, "cronExpression"))}]


def _start_at_payloads(activity: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"executeAt": _text(literal_input(activity, "dateTime", "executeAt"))}]


_PAYLOADS: dict[str, Callable[[Mapping[str, Any]], list[dict[str, Any]]]] = {
    HTTP_ENDPOINT: _http_payloads,
    EVENT: _event_payloads,
    TIMER: _timer_payloads,
    CRON: _cron_payloads,
    START_AT: _start_at_payloads,
    WEBHOOK_EVENT: _webhook_payloads,
}
