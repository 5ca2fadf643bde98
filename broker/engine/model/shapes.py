"""The shapes Elsa's readers accept, brought to the one the parser reads: property names become
camelCase; values and the author's own keys (custom properties, metadata) stay as written."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from broker.errors import BadRequest, WorkflowDefinitionError
from broker.safety.bounded import WORKFLOW_LIMITS, WORKFLOW_MAX_DEPTH, decode_json, nesting_depth


def check_nesting(document: Any, *, file: str | None = None) -> None:
    """``WorkflowDefinitionError`` when ``document`` nests deeper than ``WORKFLOW_MAX_DEPTH``:
    checked without recursion, before any reader or walker of the definition recurses into it."""
    depth = nesting_depth(document, stop_after=WORKFLOW_MAX_DEPTH)
    if depth > WORKFLOW_MAX_DEPTH:
        raise WorkflowDefinitionError(
            f"the definition nests deeper than {WORKFLOW_MAX_DEPTH} levels (Elsa's limit)",
            file=file,
        )


def json_text(text: str) -> Any:
    """JSON written inside a definition's string (an Object or Json expression, a serialized
    island), read by the bounded reader: ``ValueError`` when it is malformed, nests too deep or
    holds what JSON may not."""
    try:
        return decode_json(text, WORKFLOW_LIMITS, field="value")
    except BadRequest as exc:
        raise ValueError(exc.message) from None


#: Keys of an activity object that are structure or designer data, never inputs.
STRUCTURAL_KEYS = frozenset(
    {
        "id",
        "type",
        "name",
        "version",
        "customProperties",
        "metadata",
        "nodeId",
        "canStartWorkflow",
        "runAsynchronously",
        "source",
        "line",
        "activities",
        "connections",
        "variables",
        "cases",
        "branches",
        "properties",
        "displayName",
        "description",
        "applicationProperties",
    }
)


def camel(name: str) -> str:
    """``"CanStartWorkflow"`` -> ``"canStartWorkflow"``; ``"ID"`` -> ``"id"``."""
    if name.isupper():
        return name.lower()
    return name[:1].lower() + name[1:]


def camel_keys(value: Any) -> Any:
    """The mapping with its own keys camelCased (a camelCase key wins over its PascalCase
    twin); anything else unchanged."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = camel(key) if isinstance(key, str) else key
        if name in out and name != key:
            continue  # the PascalCase twin of a key already read
        out[name] = item
    return out


#: the flags Elsa keeps in ``customProperties`` (older exports write them in PascalCase, and in
#: ``applicationProperties``); other keys there are the author's, kept as written
_FLAGS = frozenset({"canStartWorkflow", "runAsynchronously"})


def flag_keys(value: Any) -> Any:
    """``customProperties`` with Elsa's own flags camelCased, every other key as written."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = camel(key) if isinstance(key, str) and camel(key) in _FLAGS else key
        if name in out and name != key:
            continue
        out[name] = item
    return out


def workflow_document(doc: Any) -> Any:
    """A workflow definition document in the camelCase shape."""
    if not isinstance(doc, Mapping):
        return doc
    out = camel_keys(doc)
    if "options" in out:
        out["options"] = camel_keys(out["options"])
    for key in ("variables", "inputs", "outputs"):
        if isinstance(out.get(key), list):
            out[key] = [camel_keys(item) for item in out[key]]
    if "root" in out:
        out["root"] = activity(out["root"])
    return out


def activity(node: Any) -> Any:
    """An activity object (and everything it holds) in the camelCase shape."""
    if not isinstance(node, Mapping):
        return node
    out = camel_keys(node)
    for key, value in list(out.items()):
        if key == "metadata":
            continue
        if key in ("customProperties", "applicationProperties"):
            out[key] = flag_keys(value)
        elif key in ("activities", "branches"):
            out[key] = [activity(item) for item in value] if isinstance(value, list) else value
        elif key == "connections" and isinstance(value, list):
            out[key] = [connection(item) for item in value]
        elif key == "variables" and isinstance(value, list):
            out[key] = [camel_keys(item) for item in value]
        elif key in ("cases", "expectedStatusCodes") and isinstance(value, list):
            out[key] = [case(item) for item in value]
        elif key == "properties" and isinstance(value, list):
            out[key] = [camel_keys(item) for item in value]  # Elsa 2's property bag
        else:
            out[key] = member(value)
    return out


def member(value: Any) -> Any:
    """An activity property: an input wrapper, an embedded activity, or a plain value."""
    if isinstance(value, list):
        return [activity(item) if looks_like_activity(item) else item for item in value]
    if not isinstance(value, Mapping):
        return value
    if looks_like_activity(value):
        return activity(value)
    if looks_like_input(value):
        out = camel_keys(value)
        for key in ("expression", "memoryReference"):
            if isinstance(out.get(key), Mapping):
                out[key] = camel_keys(out[key])
        return out
    return value


def connection(value: Any) -> Any:
    out = camel_keys(value)
    if isinstance(out, dict):
        for key in ("source", "target"):
            if isinstance(out.get(key), Mapping):
                out[key] = camel_keys(out[key])
    return out


def case(value: Any) -> Any:
    out = camel_keys(value)
    if isinstance(out, dict):
        if isinstance(out.get("condition"), Mapping):
            out["condition"] = member(out["condition"])
            if looks_like_expression(out["condition"]):
                out["condition"] = camel_keys(out["condition"])
        if "activity" in out:
            out["activity"] = activity(out["activity"])
    return out


def _lower_keys(value: Mapping[str, Any]) -> set[str]:
    return {str(key).lower() for key in value}


def looks_like_activity(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    keys = _lower_keys(value)
    return "type" in keys and "typename" not in keys and ("id" in keys or "activities" in keys)


def looks_like_input(value: Mapping[str, Any]) -> bool:
    keys = _lower_keys(value)
    return bool(keys & {"expression", "memoryreference"}) or keys == {"typename"}


def looks_like_expression(value: Mapping[str, Any]) -> bool:
    return _lower_keys(value) <= {"type", "value"} and "type" in _lower_keys(value)


def plain_value(value: Any) -> Any:
    """A value as Elsa's payload serializer writes it, as plain JSON: ``{"_island": "<json>",
    "_type": "JsonObject"}`` is the parsed JSON, ``{"$values": [...]}`` the list,
    ``{"$ref": "6"}`` the value with ``"$id": "6"`` (null for a reference back into a list
    still being read: JSON has no cycles); ``_type`` and ``$id`` markers go."""
    return _plain(value, {})


def _plain(value: Any, seen: dict[str, Any]) -> Any:
    if isinstance(value, list):
        return [_plain(item, seen) for item in value]
    if not isinstance(value, Mapping):
        return value
    if isinstance(value.get("$ref"), str) and len(value) == 1:
        return seen.get(value["$ref"])
    if isinstance(value.get("_island"), str):
        try:
            result: Any = _plain(json_text(value["_island"]), seen)
        except ValueError:
            result = value["_island"]
    elif "$values" in value and isinstance(value["$values"], list):
        result = [_plain(item, seen) for item in value["$values"]]
    else:
        result = {}
        if isinstance(value.get("$id"), str):
            seen[value["$id"]] = result  # registered first: its members may refer to it
        for key, item in value.items():
            if key not in ("_type", "$id"):
                result[key] = _plain(item, seen)
    if isinstance(value.get("$id"), str):
        seen[value["$id"]] = result
    return result


_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def original_path(document: Any, path: str) -> str:
    """A JSON path into the camelCase shape, spelled as ``document`` spells it (``$.Root.Text``
    for a PascalCase file); the part that cannot be followed is kept as it is."""
    if not path.startswith("$"):
        return path
    node, out, position = document, "$", 1
    for match in _SEGMENT.finditer(path, 1):
        if match.start() != position:
            break
        key, index = match.group(1), match.group(2)
        if index is not None:
            if not isinstance(node, list) or int(index) >= len(node):
                break
            node, out = node[int(index)], f"{out}[{index}]"
        else:
            if not isinstance(node, Mapping):
                break
            actual = key if key in node else next((k for k in node if camel(str(k)) == key), None)
            if actual is None:
                break
            node, out = node[actual], f"{out}.{actual}"
        position = match.end()
    return out + path[position:]
