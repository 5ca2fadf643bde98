"""Mermaid ``flowchart TD`` diagrams of Elsa 3 workflow files (``broker workflows diagram``),
drawn from the raw JSON the way elsa-to-mermaid draws them."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from broker.engine.model import shapes

__all__ = ["to_mermaid"]

_DECISIONS = frozenset({"If", "FlowDecision", "Switch", "FlowSwitch", "Fork", "FlowFork"})
_ROUNDED = frozenset(
    {"HttpEndpoint", "Start", "End", "Finish", "Delay", "Timer", "StartAt", "Cron"}
)
_WAITS = frozenset({"Event", "SignalReceived", "RunTask", "WebhookEventReceived"})
_WAITS_WHEN_ASKED = frozenset({"DispatchWorkflow", "BulkDispatchWorkflows", "ExecuteWorkflow"})
_SEQUENTIAL = frozenset({"Sequence"})
# Properties that hold one activity, and the edge label to it.
_SLOTS = (("then", "Then"), ("else", "Else"), ("body", "Body"), ("default", "Default"))
# Words Mermaid's flowchart grammar reserves; an id equal to one breaks the diagram.
_RESERVED_IDS = frozenset(
    {
        "end",
        "subgraph",
        "graph",
        "flowchart",
        "style",
        "class",
        "classdef",
        "click",
        "linkstyle",
        "direction",
        "default",
        "call",
        "href",
    }
)
_INDENT = "    "


def to_mermaid(
    document: Mapping[str, Any],
    *,
    executed: Iterable[str] = (),
    faulted: str | None = None,
) -> str:
    """Mermaid text for a workflow definition document (the JSON of a workflow file).

    ``executed`` names activity ids that ran (from an instance's journal): their nodes, and the
    edges between two of them, are drawn as the executed path; ``faulted`` is the activity that
    faulted, if any."""
    renderer = _Renderer()
    root = shapes.workflow_document(document).get("root")  # PascalCase files too
    nodes: list[str] = []
    edges: list[str] = []
    if isinstance(root, Mapping):
        if isinstance(root.get("activities"), list):
            renderer.container(root, 1, nodes, edges)
        else:
            renderer.activity(root, 1, nodes, edges)
    lines = ["flowchart TD", "", *nodes]
    if edges:
        lines += ["", *edges]
    lines += _path_styles(lines, renderer, set(executed), faulted)
    return "\n".join(lines) + "\n"


_LINK = re.compile(r"^\s*(\S+) -->(?:\|.*?\|)? (\S+)$")


def _path_styles(
    lines: list[str], renderer: _Renderer, executed: set[str], faulted: str | None
) -> list[str]:
    """classDef/class/linkStyle lines that mark the executed path and the faulted activity."""
    ran = {renderer.node_ids[a] for a in executed if a in renderer.node_ids}
    failed = renderer.node_ids.get(faulted) if faulted else None
    if not ran and failed is None:
        return []
    styles = [""]
    if ran:
        styles.append(f"{_INDENT}classDef executed fill:#dcfce7,stroke:#15803d,stroke-width:2px")
        styles.append(f"{_INDENT}class {','.join(sorted(ran))} executed")
        links = [m for m in (_LINK.match(line) for line in lines if "-->" in line)]
        walked = [
            str(i) for i, m in enumerate(links) if m and m.group(1) in ran and m.group(2) in ran
        ]
        if walked:
            styles.append(f"{_INDENT}linkStyle {','.join(walked)} stroke:#15803d,stroke-width:3px")
    if failed is not None:
        styles.append(f"{_INDENT}classDef faulted fill:#fee2e2,stroke:#b91c1c,stroke-width:2px")
        styles.append(f"{_INDENT}class {failed} faulted")
    return styles


class _Renderer:
    def __init__(self) -> None:
        self._used: set[str] = set()
        #: activity id -> node id (the first node drawn for it)
        self.node_ids: dict[str, str] = {}

    def container(
        self, container: Mapping[str, Any], depth: int, nodes: list[str], edges: list[str]
    ) -> None:
        """Draw a container's children into ``nodes``/``edges`` (at ``depth``)."""
        ids: dict[str, str] = {}
        order: list[str] = []
        for child in container.get("activities") or []:
            if isinstance(child, Mapping):
                node_id = self.activity(child, depth, nodes, edges)
                ids.setdefault(str(child.get("id", "")), node_id)
                order.append(node_id)
        connections = [c for c in container.get("connections") or [] if isinstance(c, Mapping)]
        if connections:
            for connection in connections:
                source, port, target = _endpoints(connection)
                if source in ids and target in ids:
                    edges.append(_edge(ids[source], port, ids[target], depth))
        elif _short_type(container) in _SEQUENTIAL:
            for source, target in itertools.pairwise(order):
                edges.append(_edge(source, "Done", target, depth))

    def activity(
        self, activity: Mapping[str, Any], depth: int, nodes: list[str], edges: list[str]
    ) -> str:
        """Draw one activity (a node or a subgraph) and its held activities; return its id."""
        node_id = self._unique_id(str(activity.get("id") or activity.get("name") or "activity"))
        if activity.get("id"):
            self.node_ids.setdefault(str(activity["id"]), node_id)
        label = _escape(_label(activity))
        pad = _INDENT * depth
        if isinstance(activity.get("activities"), list):
            nodes.append(f'{pad}subgraph {node_id}["{label}"]')
            inner_edges: list[str] = []
            self.container(activity, depth + 1, nodes, inner_edges)
            nodes.extend(inner_edges)
            nodes.append(f"{pad}end")
        else:
            nodes.append(f"{pad}{_shape(activity, node_id, label)}")
        for child, port in _held_activities(activity):
            child_id = self.activity(child, depth, nodes, edges)
            edges.append(_edge(node_id, port, child_id, depth))
        return node_id

    def _unique_id(self, raw: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", raw) or "activity"
        if base.lower() in _RESERVED_IDS:
            base = f"a_{base}"
        candidate, counter = base, 1
        while candidate in self._used:
            counter += 1
            candidate = f"{base}_{counter}"
        self._used.add(candidate)
        return candidate


def _held_activities(activity: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], str]]:
    held: list[tuple[Mapping[str, Any], str]] = []
    for key, port in _SLOTS:
        child = activity.get(key)
        if _is_activity(child):
            held.append((child, port))
    for index, branch in enumerate(activity.get("branches") or [], start=1):
        if _is_activity(branch):
            held.append((branch, f"Branch {index}"))
    for index, case in enumerate(activity.get("cases") or [], start=1):
        if isinstance(case, Mapping) and _is_activity(case.get("activity")):
            held.append((case["activity"], str(case.get("label") or f"Case {index}")))
    # A StateMachine's states and transitions hold activities too.
    for state in activity.get("states") or []:
        if isinstance(state, Mapping):
            for key in ("entry", "exit"):
                if _is_activity(state.get(key)):
                    held.append((state[key], f"{state.get('name')} {key}"))
    for transition in activity.get("transitions") or []:
        if isinstance(transition, Mapping):
            name = transition.get("name") or f"{transition.get('from')}->{transition.get('to')}"
            for key in ("trigger", "action"):
                if _is_activity(transition.get(key)):
                    held.append((transition[key], f"{name} {key}"))
    return held


def _is_activity(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and isinstance(value.get("type"), str)


def _endpoints(connection: Mapping[str, Any]) -> tuple[str, str, str]:
    """(source id, source port, target id) from either connection form."""
    source, target = connection.get("source"), connection.get("target")
    if isinstance(source, Mapping):
        target_id = target.get("activity") if isinstance(target, Mapping) else target
        return str(source.get("activity")), str(source.get("port") or "Done"), str(target_id)
    return str(source), str(connection.get("sourcePort") or "Done"), str(target)


def _short_type(activity: Mapping[str, Any]) -> str:
    return str(activity.get("type") or "").rsplit(".", 1)[-1]


def _label(activity: Mapping[str, Any]) -> str:
    metadata = activity.get("metadata")
    display_text = metadata.get("displayText") if isinstance(metadata, Mapping) else None
    for candidate in (
        activity.get("displayName"),
        display_text,
        activity.get("name"),
        _short_type(activity),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return "Activity"


def _shape(activity: Mapping[str, Any], node_id: str, label: str) -> str:
    kind = _short_type(activity)
    if kind in _DECISIONS:
        return f'{node_id}{{"{label}"}}'
    if kind in _ROUNDED:
        return f'{node_id}(["{label}"])'
    if kind in _WAITS or (kind in _WAITS_WHEN_ASKED and _waits_for_completion(activity)):
        return f'{node_id}[/"{label}"/]'
    return f'{node_id}["{label}"]'


def _waits_for_completion(activity: Mapping[str, Any]) -> bool:
    value = activity.get("waitForCompletion")
    if isinstance(value, Mapping):
        expression = value.get("expression")
        value = expression.get("value") if isinstance(expression, Mapping) else None
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value is True


def _edge(source: str, port: str, target: str, depth: int) -> str:
    pad = _INDENT * depth
    if not port or port == "Done":
        return f"{pad}{source} --> {target}"
    if re.fullmatch(r"[A-Za-z0-9_ .-]+", port):
        return f"{pad}{source} -->|{port}| {target}"
    return f'{pad}{source} -->|"{_escape(port)}"| {target}'


def _escape(text: str) -> str:
    """Text safe inside a quoted Mermaid label: entity codes for the characters that end or
    reinterpret a label; whitespace runs, newlines included, become one space."""
    text = " ".join(text.split())
    for char, code in (
        ("#", "#35;"),
        ('"', "#quot;"),
        ("&", "#amp;"),
        ("<", "#lt;"),
        (">", "#gt;"),
        ("|", "#124;"),
    ):
        text = text.replace(char, code)
    return text
