"""Flowcharts and their nodes: joins in counter and token mode, decisions, forks."""

from __future__ import annotations

from typing import Any

from broker.engine.activities.base import Behaviour, CompletedChild, activity
from broker.engine.activities.control import CONDITION_INPUT, SWITCH_MODE_OPTIONS, declare_locals
from broker.engine.model.definition import Activity
from broker.engine.model.enums import FLOW_JOIN_MODES, SWITCH_MODES, enum_value
from broker.engine.model.graph import Connection, FlowGraph, valid_back_edge
from broker.engine.model.specs import ActivitySpec, InputSpec
from broker.engine.model.values import as_bool, as_list, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.errors import WorkflowFault

_MODES = ("WaitAny", "WaitAll", "WaitAllActive")

TERMINAL_TYPES = frozenset({"Elsa.End"})
JOIN_TYPE = "Elsa.FlowJoin"


@activity(
    "Elsa.Flowchart",
    ActivitySpec("Workflows", "A graph of activities joined by connections.", container=True),
    outbound=("Done",),
)
class Flowchart(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        declare_locals(ax)
        graph = ax.node.graph
        if graph is None or not graph.order:
            ax.complete()
            return
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
        backward = bool(child.props.get(BACKWARD))
        self.flow_out(ax, graph, nodes, child.node.id, set(child.outcomes), backward=backward)

    def flow_out(
        self,
        ax: ActivityContext,
        graph: FlowGraph,
        nodes: dict[str, Activity],
        source: str,
        outcomes: set[str],
        *,
        backward: bool = False,
    ) -> bool:
        """Elsa's counter-based step: count the source's visit (not when a loop re-entered it),
        count a visit of every outbound connection, followed or not, and let each target decide
        (join rules); a target none of whose inbound connections was followed is skipped, which
        passes the not-followed visits on downstream. True when something was scheduled."""
        scope = FlowScope(ax.props)
        if not backward:
            scope.visit(source)
        scheduled = False
        for connection in graph.outbound.get(source, ()):
            followed = connection.source_port in outcomes
            scope.visit_connection(connection, followed)
            if connection in graph.back_edges:
                if not followed:
                    continue
                if not valid_back_edge(graph, connection, self.start(ax, graph)):
                    raise WorkflowFault(
                        f"Invalid backward connection: Every path from the source "
                        f"('{connection.source}') must go through the target "
                        f"('{connection.target}') when tracing back to the start.",
                        activity_id=ax.node.id,
                    )
                ax.schedule(nodes[connection.target], props={BACKWARD: True})
                scheduled = True
                continue
            scheduled |= self.arrive(ax, graph, nodes, connection, scope)
        return scheduled

    def arrive(
        self,
        ax: ActivityContext,
        graph: FlowGraph,
        nodes: dict[str, Activity],
        connection: Connection,
        scope: FlowScope,
    ) -> bool:
        target = connection.target
        node = nodes[target]
        # Elsa's forward connections are those reachable from the start: a dangling node's
        # connections are never waited for.
        start = self.start(ax, graph)
        live = graph.reach.get(start, frozenset()) | {start}
        inbound = tuple(c for c in graph.forward_inbound[target] if c.source in live)
        if not inbound:
            inbound = (connection,)
        mode = join_mode(ax, node) if node.type == JOIN_TYPE else "WaitAllActive"
        if mode == "WaitAny":
            if scope.ignores(connection, target):
                return False
            if any(c["node"] == target and c["status"] == "Scheduled" for c in ax.children()):
                return False
            if scope.any_followed(inbound, target):
                ax.schedule(node)
                cancel_inbound(ax, graph, target)
                return True
            if scope.all_visited(inbound, target):
                return self.flow_out(ax, graph, nodes, target, set())
            return False
        if not scope.all_visited(inbound, target):
            return False
        followed = scope.all_followed if mode == "WaitAll" else scope.any_followed
        if followed(inbound, target):
            ax.schedule(node)
            return True
        return self.flow_out(ax, graph, nodes, target, set())

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


#: set on a node scheduled through a backward connection: its run is a loop, not a new visit
BACKWARD = "flowBackward"


class FlowScope:
    """Elsa's ``FlowScope``, kept in the flowchart's props: visits per node, visits per
    connection and whether the last visit of each connection was followed."""

    def __init__(self, props: dict[str, Any]) -> None:
        self.visits: dict[str, int] = props.setdefault("visits", {})
        self.connections: dict[str, int] = props.setdefault("connectionVisits", {})
        self.followed: dict[str, bool] = props.setdefault("connectionFollowed", {})

    @staticmethod
    def key(connection: Connection) -> str:
        return (
            f"{connection.source}:{connection.source_port}->"
            f"{connection.target}:{connection.target_port}"
        )

    def visit(self, node_id: str) -> None:
        self.visits[node_id] = self.visits.get(node_id, 0) + 1

    def visit_connection(self, connection: Connection, followed: bool) -> None:
        key = self.key(connection)
        self.connections[key] = self.connections.get(key, 0) + 1
        self.followed[key] = followed

    def count(self, connection: Connection) -> int:
        return self.connections.get(self.key(connection), 0)

    def all_visited(self, inbound: tuple[Connection, ...], target: str) -> bool:
        return min(self.count(c) for c in inbound) > self.visits.get(target, 0)

    def any_followed(self, inbound: tuple[Connection, ...], target: str) -> bool:
        top = max(self.count(c) for c in inbound)
        return top > self.visits.get(target, 0) and any(
            self.count(c) == top and self.followed.get(self.key(c), False) for c in inbound
        )

    def all_followed(self, inbound: tuple[Connection, ...], target: str) -> bool:
        top = max(self.count(c) for c in inbound)
        return top > self.visits.get(target, 0) and all(
            self.count(c) == top and self.followed.get(self.key(c), False) for c in inbound
        )

    def ignores(self, connection: Connection, target: str) -> bool:
        """WaitAny: the target already ran for this visit of the connection."""
        return self.count(connection) <= self.visits.get(target, 0)


def cancel_inbound(ax: ActivityContext, graph: FlowGraph, target: str) -> None:
    """WaitAny: the branches still on their way to the join are cancelled (Elsa cancels the
    flowchart's children that are forward ancestors of the join)."""
    for child in ax.children():
        if child["status"] == "Scheduled":  # Elsa has no context yet for queued work
            continue
        if child["node"] != target and target in graph.reach.get(child["node"], ()):
            ax.run.cancel_context(child)


def has_queued_work(ax: ActivityContext, ctx: dict[str, Any]) -> bool:
    if ctx["status"] == "Scheduled":
        return True
    contexts = ax.run.contexts
    return any(has_queued_work(ax, contexts[c]) for c in ctx["children"] if c in contexts)


def join_mode(ax: ActivityContext, node: Activity) -> str:
    spec = node.inputs.get("mode")
    if spec is None or spec.expression is None:
        return "WaitAny"
    return enum_value(ax.run.evaluate(ax.ctx, node, spec), FLOW_JOIN_MODES, "WaitAny")


def merge_mode(ax: ActivityContext, node: Activity) -> str:
    if node.type == JOIN_TYPE:
        return {"WaitAny": "Race", "WaitAll": "Merge"}.get(join_mode(ax, node), "Stream")
    return str(node.custom_properties.get("mergeMode") or "Stream")


@activity(
    "Elsa.FlowDecision",
    ActivitySpec(
        "Branching",
        "Evaluate a Boolean condition and follow True or False.",
        inputs=(CONDITION_INPUT,),
        outcomes=("True", "False"),
    ),
    outbound=("False", "True"),
)
class FlowDecision(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        ax.complete("True" if as_bool(ax.get("condition", False)) else "False")


@activity(
    "Elsa.FlowSwitch",
    ActivitySpec(
        "Branching",
        "Follow the outcome of each case whose condition holds, else Default.",
        inputs=(
            InputSpec("Mode", "String", "First match or every match.", options=SWITCH_MODE_OPTIONS),
            InputSpec(
                "Cases",
                "Object",
                "The cases.",
                ui_hint="flow-switch-editor",
                wrapped=False,
            ),
        ),
        outcomes=("Default",),
    ),
)
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


@activity(
    "Elsa.FlowFork",
    ActivitySpec(
        "Branching",
        "Follow several outcomes at once.",
        inputs=(
            InputSpec(
                "Branches",
                "String[]",
                "The outcomes to follow.",
                ui_hint="dynamic-outcomes",
            ),
        ),
    ),
)
class FlowFork(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        branches = [as_text(b) for b in as_list(ax.get("branches"))]
        ax.complete(*(branches or ["Done"]))


@activity(
    "Elsa.FlowJoin",
    ActivitySpec(
        "Branching",
        "Wait for inbound branches before going on.",
        inputs=(InputSpec("Mode", "String", "How many branches to wait for.", options=_MODES),),
    ),
    outbound=("Done",),
)
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


@activity(
    "Elsa.FlowNode",
    ActivitySpec(
        "Workflows",
        "Runs its body as one node of a flowchart.",
        ports=("Body",),
        browsable=False,
    ),
    outbound=("Done",),
)
class FlowNode(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        body = ax.node.ports.get("body")
        if body is None:
            ax.complete()
        else:
            ax.schedule(body)


@activity(
    "Elsa.Start",
    ActivitySpec("Workflows", "The start of a flowchart.", start=True),
    outbound=("Done",),
)
class Start(Behaviour):
    pass


@activity("Elsa.End", ActivitySpec("Workflows", "Ends the flowchart.", terminal=True))
class End(Behaviour):
    """A terminal node: its flowchart completes when it does."""
