"""Workflow documents as the designer expects them, as Elsa Server's serializer would return them
(docs/design.md, section 1)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

COLUMN_WIDTH = 300
ROW_HEIGHT = 140


def for_designer(root: Any) -> Any:
    """A copy of ``root`` with the fields Studio reads filled in."""
    if not isinstance(root, dict):
        return root
    found = copy.deepcopy(root)
    activities = list(_activities(found))
    for activity in activities:
        activity.setdefault("version", 1)
        if not isinstance(activity.get("customProperties"), dict):
            activity["customProperties"] = {}
        if not isinstance(activity.get("metadata"), dict):
            activity["metadata"] = {}
    for activity in activities:
        if isinstance(activity.get("activities"), list) and isinstance(
            activity.get("connections"), list
        ):
            _lay_out(activity)
    return found


def _activities(node: Any, parent: str | None = None) -> Iterator[dict[str, Any]]:
    """Every activity object under ``node`` (itself included), depth first, each given Elsa's
    ``nodeId`` (the ids of its ancestors and its own, joined by colons) when it has none."""
    if isinstance(node, dict):
        if isinstance(node.get("type"), str) and "id" in node:
            if not isinstance(node.get("nodeId"), str):
                node["nodeId"] = f"{parent}:{node['id']}" if parent else str(node["id"])
            parent = node["nodeId"]
            yield node
        for key, value in node.items():
            if key in ("metadata", "customProperties") or _is_input(value):
                continue
            yield from _activities(value, parent)
    elif isinstance(node, list):
        for item in node:
            yield from _activities(item, parent)


def node_ids(root: Any) -> dict[str, str]:
    """Activity id -> Elsa node id, as ``for_designer`` assigns them."""
    return {str(a["id"]): str(a["nodeId"]) for a in _activities(copy.deepcopy(root))}


def _is_input(value: Any) -> bool:
    return isinstance(value, dict) and ("expression" in value or "memoryReference" in value)


def _connection_ends(connection: Any) -> tuple[str, str] | None:
    if not isinstance(connection, dict):
        return None
    source, target = connection.get("source"), connection.get("target")
    if isinstance(source, dict) and isinstance(target, dict):  # {"activity", "port"} form
        source, target = source.get("activity"), target.get("activity")
    if isinstance(source, str) and isinstance(target, str):
        return source, target
    return None


def _lay_out(flowchart: dict[str, Any]) -> None:
    nodes = [a for a in flowchart["activities"] if isinstance(a, dict) and "id" in a]
    if not nodes or all(_position(a) is not None for a in nodes):
        return
    ids = [str(a["id"]) for a in nodes]
    outbound: dict[str, list[str]] = {i: [] for i in ids}
    inbound: dict[str, int] = dict.fromkeys(ids, 0)
    for connection in flowchart["connections"]:
        ends = _connection_ends(connection)
        if ends and ends[0] in outbound and ends[1] in inbound:
            outbound[ends[0]].append(ends[1])
            inbound[ends[1]] += 1
    start = flowchart.get("start")
    roots = [start] if start in outbound else [i for i in ids if inbound[i] == 0] or ids[:1]
    depth: dict[str, int] = {}
    queue = [(r, 0) for r in roots]
    while queue:  # breadth first: each node in the column of its shortest path from the start
        current, level = queue.pop(0)
        if current in depth:
            continue
        depth[current] = level
        queue.extend((t, level + 1) for t in outbound[current])
    next_column = max(depth.values(), default=-1) + 1
    rows: dict[int, int] = {}
    for activity in nodes:
        column = depth.setdefault(str(activity["id"]), next_column)
        row = rows.get(column, 0)
        rows[column] = row + 1
        if _position(activity) is None:
            designer = activity["metadata"].setdefault("designer", {})
            designer["position"] = {"x": column * COLUMN_WIDTH, "y": row * ROW_HEIGHT}


def _position(activity: dict[str, Any]) -> Any:
    metadata = activity.get("metadata")
    designer = metadata.get("designer") if isinstance(metadata, dict) else None
    return designer.get("position") if isinstance(designer, dict) else None
