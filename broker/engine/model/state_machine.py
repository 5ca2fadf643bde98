"""The JSON shape of Elsa's StateMachine: its states and transitions, read as plain data, and the
activities they hold, read as ports of the state machine named by their place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.engine.model import shapes
from broker.engine.model.definition import Activity
from broker.errors import WorkflowDefinitionError

#: the activity whose states and transitions hold activities
STATE_MACHINE = "Elsa.StateMachine"

ReadActivity = Callable[[Any, str], Activity]
Refuse = Callable[[str, str], WorkflowDefinitionError]


def read_state_machine(
    doc: Mapping[str, Any], path: str, out: dict[str, Any], read: ReadActivity, refuse: Refuse
) -> None:
    """Fill the parser's ``out`` (``ports``, ``plain``) for the StateMachine ``doc`` at ``path``:
    its states' ``entry``/``exit`` and transitions' ``trigger``/``action`` become ports named by
    their place (``states[0].entry``), read with the parser's ``read``; the states and transitions
    stay plain data naming those ports. A problem is refused with its JSON path."""
    states = []
    for index, raw in enumerate(_list(doc, "states", path, refuse)):
        where = f"{path}.states[{index}]"
        item = shapes.camel_keys(raw)
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise refuse("a state needs a name", where)
        state: dict[str, Any] = {"name": item["name"]}
        for key in ("entry", "exit"):
            state[key] = _held(
                item.get(key), f"states[{index}].{key}", f"{where}.{key}", out, read, refuse
            )
        states.append(state)
    transitions = []
    for index, raw in enumerate(_list(doc, "transitions", path, refuse)):
        where = f"{path}.transitions[{index}]"
        item = shapes.camel_keys(raw)
        if not isinstance(item, Mapping):
            raise refuse("a transition must be an object", where)
        for key in ("from", "to"):
            if not isinstance(item.get(key), str):
                raise refuse(f"a transition needs a {key} state name", f"{where}.{key}")
        name = item.get("name")
        if name is not None and not isinstance(name, str):
            raise refuse("a transition name must be a string", f"{where}.name")
        transition: dict[str, Any] = {
            "name": name,
            "displayName": item.get("displayName"),
            "from": item["from"],
            "to": item["to"],
            "condition": _condition(item.get("condition"), f"{where}.condition", refuse),
        }
        for key in ("trigger", "action"):
            transition[key] = _held(
                item.get(key), f"transitions[{index}].{key}", f"{where}.{key}", out, read, refuse
            )
        transitions.append(transition)
    out["plain"]["states"] = states
    out["plain"]["transitions"] = transitions
    for key in ("initialState", "currentState"):
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            raise refuse(f"{key} must be a state name", f"{path}.{key}")


def _list(doc: Mapping[str, Any], key: str, path: str, refuse: Refuse) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise refuse(f"{key} must be a list", f"{path}.{key}")
    return value


def _held(
    value: Any, port: str, where: str, out: dict[str, Any], read: ReadActivity, refuse: Refuse
) -> str | None:
    """The activity a state or transition holds, as the port ``port`` (None when it holds none)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise refuse("must be an activity", where)
    out["ports"][port] = read(shapes.activity(value), where)
    return port


def _condition(value: Any, path: str, refuse: Refuse) -> dict[str, Any] | None:
    """A transition's ``Input<bool>`` condition (a bare boolean as a literal), or None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"typeName": "Boolean", "expression": {"type": "Literal", "value": value}}
    value = shapes.member(value)
    expression = value.get("expression") if isinstance(value, Mapping) else None
    if expression is None and isinstance(value, Mapping) and "expression" in value:
        return None  # an unset input: no condition
    if not isinstance(expression, Mapping) or not isinstance(expression.get("type"), str):
        raise refuse("a condition must be an expression", path)
    return {"typeName": value.get("typeName"), "expression": dict(expression)}
