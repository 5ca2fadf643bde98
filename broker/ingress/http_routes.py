"""Which ``HttpEndpoint`` serves a call to ``/workflows/{path}``, as Elsa's route table decides
(route templates matched segment by segment, their values the endpoint's ``RouteData``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

#: ``{name}``, ``{name?}`` (optional), ``{*name}`` or ``{**name}`` (the rest of the path); a
#: constraint or default after ``:`` or ``=`` is not checked (``{id:int}`` matches any segment)
_OPTIONAL, _CATCH_ALL = "?", "*"


def _parameter(segment: str) -> tuple[str, str] | None:
    """(name, kind) of a parameter segment, kind '' / '?' / '*'; None for a literal."""
    if not (segment.startswith("{") and segment.endswith("}")):
        return None
    inner = segment[1:-1].strip()
    kind = ""
    if inner.startswith("*"):
        kind, inner = _CATCH_ALL, inner.lstrip("*")
    name = inner.split(":", 1)[0].split("=", 1)[0]
    if name.endswith("?"):
        kind, name = kind or _OPTIONAL, name[:-1]
    return (name, kind) if name else None


def match_route(template: str, path: str) -> dict[str, str] | None:
    """The route values when ``path`` matches ``template`` (both without the base path), else
    None. ``path`` is the decoded request path, in the caller's case."""
    wanted = [s for s in template.strip("/").split("/") if s] if template.strip("/") else []
    given = [s for s in path.strip("/").split("/") if s] if path.strip("/") else []
    values: dict[str, str] = {}
    for index, segment in enumerate(wanted):
        parameter = _parameter(segment)
        if parameter is None:
            if index >= len(given) or given[index].casefold() != segment.casefold():
                return None
            continue
        name, kind = parameter
        if kind == _CATCH_ALL:
            if index < len(given):
                values[name] = "/".join(given[index:])
            return values
        if index >= len(given):
            if kind == _OPTIONAL:
                continue
            return None
        values[name] = given[index]
    return values if len(given) <= len(wanted) else None


def best_matches(candidates: Iterable[tuple[T, str]], path: str) -> list[tuple[T, dict[str, str]]]:
    """The candidates (each with its route template) whose template matches ``path``, with their
    route values; a template without parameters (an exact path) comes before one with them."""
    found = []
    for item, template in candidates:
        values = match_route(template, path)
        if values is not None:
            found.append((item, values, "{" in template))
    found.sort(key=lambda entry: entry[2])
    return [(item, values) for item, values, _ in found]


def request_size_limit(document: Mapping[str, Any], activity_id: str) -> int | None:
    """The byte limit the endpoint ``activity_id`` of a workflow document sets on a call's body
    (its ``requestSizeLimit`` input, when written as a number), else None."""
    node = _find(document.get("root"), activity_id)
    if node is None:
        return None
    found = node.get("requestSizeLimit")
    expression = found.get("expression") if isinstance(found, Mapping) else None
    value = expression.get("value") if isinstance(expression, Mapping) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _find(node: Any, activity_id: str) -> Mapping[str, Any] | None:
    if isinstance(node, Mapping):
        if node.get("id") == activity_id and "type" in node:
            return node
        for value in node.values():
            found = _find(value, activity_id)
            if found is not None:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _find(value, activity_id)
            if found is not None:
                return found
    return None
