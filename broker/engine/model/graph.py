"""A flowchart's connections as a graph, computed once per parsed flowchart: inbound and outbound
lists, back edges (loops) and reachability."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol


class _Node(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def can_start_workflow(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Connection:
    source: str
    source_port: str
    target: str
    target_port: str = "In"


@dataclasses.dataclass(frozen=True)
class FlowGraph:
    order: tuple[str, ...]  # node ids as listed
    outbound: Mapping[str, tuple[Connection, ...]]
    inbound: Mapping[str, tuple[Connection, ...]]
    forward_inbound: Mapping[str, tuple[Connection, ...]]  # inbound minus back edges
    forward_sources: Mapping[str, tuple[str, ...]]  # distinct sources of forward_inbound
    back_edges: frozenset[Connection]
    reach: Mapping[str, frozenset[str]]  # nodes reachable through forward edges
    default_start: str | None

    def outbound_for(self, node_id: str, outcomes: Iterable[str]) -> list[Connection]:
        ports = set(outcomes)
        return [c for c in self.outbound.get(node_id, ()) if c.source_port in ports]


def build_graph(
    nodes: Sequence[_Node], connections: Sequence[Connection], start: Any = None
) -> FlowGraph:
    order = tuple(node.id for node in nodes)
    outbound: dict[str, list[Connection]] = {node_id: [] for node_id in order}
    inbound: dict[str, list[Connection]] = {node_id: [] for node_id in order}
    for connection in connections:
        outbound[connection.source].append(connection)
        inbound[connection.target].append(connection)
    default_start = _default_start(nodes, inbound, start)
    back_edges = _back_edges(order, outbound, inbound, default_start)
    forward_inbound = {
        node_id: tuple(c for c in conns if c not in back_edges)
        for node_id, conns in inbound.items()
    }
    forward_sources = {
        node_id: tuple(dict.fromkeys(c.source for c in conns))
        for node_id, conns in forward_inbound.items()
    }
    forward_out: dict[str, list[str]] = {
        node_id: [c.target for c in conns if c not in back_edges]
        for node_id, conns in outbound.items()
    }
    reach = {node_id: _reachable(node_id, forward_out) for node_id in order}
    return FlowGraph(
        order=order,
        outbound={k: tuple(v) for k, v in outbound.items()},
        inbound={k: tuple(v) for k, v in inbound.items()},
        forward_inbound=forward_inbound,
        forward_sources=forward_sources,
        back_edges=frozenset(back_edges),
        reach=reach,
        default_start=default_start,
    )


def _default_start(
    nodes: Sequence[_Node], inbound: Mapping[str, list[Connection]], start: Any
) -> str | None:
    """Elsa's choice: ``start``; an Elsa.Start; the first trigger; the one root; the first."""
    if not nodes:
        return None
    if isinstance(start, str) and start in inbound:
        return start
    for node in nodes:
        if node.type == "Elsa.Start":
            return node.id
    for node in nodes:
        if node.can_start_workflow:
            return node.id
    roots = [node.id for node in nodes if not inbound[node.id]]
    if len(roots) == 1:
        return roots[0]
    return nodes[0].id


def _back_edges(
    order: tuple[str, ...],
    outbound: Mapping[str, list[Connection]],
    inbound: Mapping[str, list[Connection]],
    start: str | None,
) -> set[Connection]:
    """Edges that close a cycle in a depth-first walk from the start, then from other roots."""
    seeds = ([start] if start else []) + [n for n in order if not inbound[n]] + list(order)
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    back: set[Connection] = set()
    for seed in seeds:
        if seed in state:
            continue
        stack: list[tuple[str, int]] = [(seed, 0)]
        state[seed] = 1
        while stack:
            node, index = stack[-1]
            edges = outbound[node]
            if index < len(edges):
                stack[-1] = (node, index + 1)
                edge = edges[index]
                mark = state.get(edge.target)
                if mark == 1:
                    back.add(edge)
                elif mark is None:
                    state[edge.target] = 1
                    stack.append((edge.target, 0))
            else:
                state[node] = 2
                stack.pop()
    return back


def _reachable(origin: str, forward_out: Mapping[str, list[str]]) -> frozenset[str]:
    seen: set[str] = set()
    pending = list(forward_out.get(origin, ()))
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending.extend(forward_out.get(node, ()))
    return frozenset(seen)


def valid_back_edge(graph: FlowGraph, edge: Connection, start: str | None) -> bool:
    """Elsa's rule for a loop: every forward path from the start to the edge's source passes
    through its target. Otherwise (a path reaches the source around the target) the loop has no
    single entry, and Elsa faults the flowchart rather than run it."""
    if start is None or edge.source == edge.target:
        return True
    seen = {edge.target}
    pending = [edge.source]
    while pending:
        node = pending.pop()
        if node == start:
            return False
        if node in seen:
            continue
        seen.add(node)
        pending.extend(c.source for c in graph.forward_inbound.get(node, ()))
    return True
