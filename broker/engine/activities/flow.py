"""Flowcharts and their nodes: joins in counter and token mode, decisions, forks.

Counter mode (Elsa's default): each node's executions are counted. A node with several forward
inbound sources is an implicit WaitAllActive join: it runs once every source has run more often
than the node itself, or when the sources that have not run can no longer run (nothing pending
reaches them). FlowJoin makes the mode explicit (WaitAny, WaitAll, WaitAllActive). An arrival
through a back edge is a loop iteration and schedules its target at once.

Token mode: a completion emits a token per matching outbound connection and consumes the node's
inbound tokens; the target's ``customProperties.mergeMode`` decides (Stream, Merge, Converge,
Cascade, Race). A flowchart completes when none of its children is scheduled or waiting, or when
an End node completes.
"""

from __future__ import annotations

from typing import Any

from broker.engine.activities.base import Behaviour, CompletedChild
from broker.engine.activities.control import declare_locals
from broker.engine.activity_context import ActivityContext
from broker.engine.definition import Activity
from broker.engine.enums import FLOW_JOIN_MODES, SWITCH_MODES, enum_value
from broker.engine.graph import Connection, FlowGraph
from broker.engine.values import as_bool, as_list, as_text

TERMINAL_TYPES = frozenset({"Elsa.End"})
JOIN_TYPE = "Elsa.FlowJoin"


class Flowchart(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        declare_locals(ax)
        graph = ax.node.graph
        if graph is None or not graph.order:
            ax.complete()
            return
        ax.props["counts"] = {}
        ax.props["tokens"] = []
        ax.props["blocked"] = []
        ax.schedule(self.nodes(ax)[self.start(ax, graph)])

    @staticmethod
    def nodes(ax: ActivityContext) -> dict[str, Activity]:
        return {child.id: child for child in ax.node.activities}

    @staticmethod
    def start(ax: ActivityContext, graph: FlowGraph) -> str:
        explicit = ax.node.properties.get("start")
        if isinstance(explicit, str) and explicit in graph.inbound:
            return explicit
        trigger = ax.state.get("trigger") or {}
        triggered = trigger.get("activityId")
        if triggered in graph.inbound:
            return str(triggered)
        assert graph.default_start is not None
        return graph.default_start

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        if child.node.type in TERMINAL_TYPES:
            ax.complete()
            return
        graph = ax.node.graph
        assert graph is not None
        nodes = self.nodes(ax)
        if ax.state.get("flowchartMode") == "TokenBased":
            self.tokens(ax, graph, nodes, child)
        else:
            self.counters(ax, graph, nodes, child)
        if ax.ctx["id"] in ax.run.contexts and not ax.has_children():
            ax.complete()

    # Counter mode ---------------------------------------------------------------------------------

    def counters(
        self,
        ax: ActivityContext,
        graph: FlowGraph,
        nodes: dict[str, Activity],
        child: CompletedChild,
    ) -> None:
        counts: dict[str, int] = ax.props["counts"]
        source = child.node.id
        counts[source] = counts.get(source, 0) + 1
        targets = graph.outbound_for(source, child.outcomes)
        if not targets:
            return
        active = {c["node"] for c in ax.children()}
        pending = active | {c.target for c in targets}
        for connection in targets:
            target = connection.target
            node = nodes[target]
            if connection in graph.back_edges:
                ax.schedule(node)
                continue
            sources = graph.forward_sources[target]
            is_join = node.type == JOIN_TYPE
            if len(sources) <= 1 and not is_join:
                ax.schedule(node)
                continue
            if target in active:  # already scheduled for this round
                continue
            mode = join_mode(ax, node) if is_join else "WaitAllActive"
            seen = counts.get(target, 0)
            fired = [s for s in sources if counts.get(s, 0) > seen]
            if mode == "WaitAny":
                ready = bool(fired)
            elif mode == "WaitAll":
                ready = len(fired) == len(sources)
            else:
                others = pending - {target}
                ready = bool(fired) and not any(
                    can_still_run(graph, s, others) for s in sources if s not in fired
                )
            if ready:
                ax.schedule(node)
                active.add(target)

    # Token mode -----------------------------------------------------------------------------------

    def tokens(
        self,
        ax: ActivityContext,
        graph: FlowGraph,
        nodes: dict[str, Activity],
        child: CompletedChild,
    ) -> None:
        source = child.node.id
        tokens: list[dict[str, Any]] = ax.props["tokens"]
        for item in tokens:  # the completed node consumes what led to it
            if item["to"] == source:
                item["consumed"] = True
        emitted = graph.outbound_for(source, child.outcomes)
        tokens.extend(token(connection) for connection in emitted)
        blocked: list[list[str]] = ax.props["blocked"]
        queued = {c["node"] for c in ax.children() if c["status"] == "Scheduled"}
        for connection in emitted:
            target = connection.target
            node = nodes[target]
            mode = merge_mode(ax, node)
            key = [connection.source, connection.source_port, target]
            if mode == "Race":
                if key in blocked:
                    blocked.remove(key)
                    consume(tokens, connection)
                    continue
                for other in graph.inbound[target]:
                    if other != connection:
                        blocked.append([other.source, other.source_port, target])
                cancel_ancestors(ax, graph, target)
                ax.schedule(node)
                continue
            if mode == "Cascade":
                ax.schedule(node)
                continue
            if target in queued:
                continue
            if mode in ("Merge", "Converge"):
                inbound = (graph.forward_inbound if mode == "Merge" else graph.inbound)[target]
                ready = len(inbound) <= 1 or all(has_token(tokens, c) for c in inbound)
            else:  # Stream, or unset
                upstream = set(graph.forward_sources[target])
                ready = not any(not t["consumed"] and t["to"] in upstream for t in tokens)
            if ready:
                ax.schedule(node)
                queued.add(target)
        tokens[:] = [t for t in tokens if not t["consumed"]]


def token(connection: Connection) -> dict[str, Any]:
    return {
        "from": connection.source,
        "port": connection.source_port,
        "to": connection.target,
        "consumed": False,
    }


def has_token(tokens: list[dict[str, Any]], connection: Connection) -> bool:
    return any(
        not t["consumed"]
        and t["from"] == connection.source
        and t["port"] == connection.source_port
        and t["to"] == connection.target
        for t in tokens
    )


def consume(tokens: list[dict[str, Any]], connection: Connection) -> None:
    for item in tokens:
        if (item["from"], item["port"], item["to"]) == (
            connection.source,
            connection.source_port,
            connection.target,
        ):
            item["consumed"] = True


def cancel_ancestors(ax: ActivityContext, graph: FlowGraph, target: str) -> None:
    """Race: branches still on their way to the winner's target are cancelled.

    Only branches that are waiting with nothing queued: Elsa's scheduler runs a branch on to
    the point where it blocks before another one arrives, so a branch with queued work still
    runs (a token it sends into the target is consumed by the block the winner left).
    """
    for child in ax.children():
        if has_queued_work(ax, child):
            continue
        if child["node"] != target and target in graph.reach.get(child["node"], ()):
            ax.run.cancel_context(child)


def has_queued_work(ax: ActivityContext, ctx: dict[str, Any]) -> bool:
    if ctx["status"] == "Scheduled":
        return True
    contexts = ax.run.contexts
    return any(has_queued_work(ax, contexts[c]) for c in ctx["children"] if c in contexts)


def can_still_run(graph: FlowGraph, node_id: str, pending: set[str]) -> bool:
    return any(p == node_id or node_id in graph.reach.get(p, ()) for p in pending)


def join_mode(ax: ActivityContext, node: Activity) -> str:
    spec = node.inputs.get("mode")
    if spec is None or spec.expression is None:
        return "WaitAny"
    return enum_value(ax.run.evaluate(ax.ctx, node, spec), FLOW_JOIN_MODES, "WaitAny")


def merge_mode(ax: ActivityContext, node: Activity) -> str:
    if node.type == JOIN_TYPE:
        return {"WaitAny": "Race", "WaitAll": "Merge"}.get(join_mode(ax, node), "Stream")
    return str(node.custom_properties.get("mergeMode") or "Stream")


class FlowJoin(Behaviour):
    """The flowchart decides when a join runs. In counter mode, as Elsa's does, running it
    cancels the branches still under way towards it (a WaitAny join's losers, waiting on a
    bookmark), then passes control on."""

    def execute(self, ax: ActivityContext) -> None:
        parent = ax.run.contexts.get(ax.ctx["parent"]) if ax.ctx["parent"] else None
        if parent is not None and ax.state.get("flowchartMode") != "TokenBased":
            flowchart = ActivityContext(ax.run, parent, ax.run.node(parent))
            if flowchart.node.graph is not None:
                cancel_ancestors(flowchart, flowchart.node.graph, ax.node.id)
        ax.complete()


class FlowDecision(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        ax.complete("True" if as_bool(ax.get("condition", False)) else "False")


class FlowSwitch(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        match_any = enum_value(ax.get("mode"), SWITCH_MODES, "MatchFirst") == "MatchAny"
        matched: list[str] = []
        for case in ax.node.cases:
            if as_bool(ax.evaluate(case.condition, "Boolean")):
                matched.append(case.label)
                if not match_any:
                    break
        ax.complete(*(matched or ["Default"]))


class FlowFork(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        branches = [as_text(b) for b in as_list(ax.get("branches"))]
        ax.complete(*(branches or ["Done"]))


class FlowNode(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        body = ax.node.ports.get("body")
        if body is None:
            ax.complete()
        else:
            ax.schedule(body)


class Start(Behaviour):
    pass


class End(Behaviour):
    """A terminal node: its flowchart completes when it does."""
