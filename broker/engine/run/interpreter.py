"""The interpreter loop: run everything scheduled until only waits remain."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from broker.engine.expr import expressions
from broker.engine.model.definition import Activity, Input, WorkflowDefinition
from broker.engine.model.log_persistence import Kind, Policy, policy_for
from broker.engine.run.activity_context import ActivityContext, ActivityScope, Host
from broker.engine.run.faults import describe
from broker.engine.run.outcomes import WORKFLOW_TYPE, CompletedChild
from broker.engine.run.results import Command, Fault, Incident, JournalEntry, Retry
from broker.engine.run.state import activity_instance_id, bookmark_hash, stimulus_hash
from broker.errors import RetryLater, WorkflowFault

if TYPE_CHECKING:
    from broker.engine.run.results import ChildInstance

__all__ = ["WORKFLOW_TYPE", "Host", "Run"]

logger = logging.getLogger(__name__)

#: the runtime's attempt bound for a retry a resilience strategy asks for (the strategy stops first)
STRATEGY_ATTEMPTS = 1_000_000

#: the activity each thread's interpreter executes now (by thread id), for a watchdog on another
#: thread: the step ceiling names the activity a stuck step is stuck in
_EXECUTING: dict[int, str] = {}


def executing(thread_id: int) -> str | None:
    """The id of the activity the interpreter on thread ``thread_id`` executes now, if any."""
    return _EXECUTING.get(thread_id)


class Run:
    """One pass of the interpreter over a state: executes, records, stops at waits or faults."""

    def __init__(
        self, engine: Host, state: dict[str, Any], *, write_lines: list[str] | None = None
    ) -> None:
        self.engine = engine
        self.state = state
        self.contexts: dict[str, dict[str, Any]] = state["contexts"]
        self.queue: list[str] = state["queue"]
        self.journal: list[JournalEntry] = []
        self.commands: list[Command] = []
        self.write_lines: list[str] = write_lines if write_lines is not None else []
        self.child_instances: list[ChildInstance] = []
        self.incidents: list[Incident] = []
        self.retry: Retry | None = None
        # Elsa's last activity result (getLastResult()): transient, not kept across a suspension
        self.last_result: Any = None
        self.halted = False
        #: contexts that faulted in this step, queued again when it ends
        self.faulted: list[str] = []
        self.clock = engine.services.clock
        self._definitions: dict[str, WorkflowDefinition] = {}
        self._workflow_nodes: dict[str, Activity] = {}
        #: inputs and outputs seen per activity instance, until a journal entry carries them
        self._captured: dict[str, dict[str, dict[str, Any]]] = {}
        self._policies: dict[int, Policy] = {}

    # Definitions and nodes ----------------------------------------------------------------------

    def remember(self, definition: WorkflowDefinition) -> None:
        self._definitions[definition.id] = definition

    def definition(self, version_id: str) -> WorkflowDefinition:
        found = self._definitions.get(version_id)
        if found is None:
            found = self.engine.definitions.by_version_id(version_id)
            if found is None:
                raise WorkflowFault(f"workflow definition version {version_id!r} is not loaded")
            self._definitions[version_id] = found
        return found

    def node(self, ctx: Mapping[str, Any]) -> Activity:
        definition = self.definition(ctx["def"])
        node_id = ctx["node"]
        if node_id is None:
            node = self._workflow_nodes.get(definition.id)
            if node is None:
                node = Activity(
                    id=definition.id,
                    type=WORKFLOW_TYPE,
                    name=definition.name,
                    ports={"root": definition.root},
                )
                self._workflow_nodes[definition.id] = node
            return node
        return definition.nodes[node_id]

    # Scheduling -----------------------------------------------------------------------------------

    def new_id(self) -> str:
        counter = self.state["nextId"]
        self.state["nextId"] = counter + 1
        return activity_instance_id(self.state["instanceId"], counter)

    def create_context(
        self,
        parent: dict[str, Any] | None,
        node_id: str | None,
        def_id: str,
        props: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        ctx_id = self.new_id()
        ctx: dict[str, Any] = {
            "id": ctx_id,
            "node": node_id,
            "def": def_id,
            "parent": parent["id"] if parent else None,
            "status": "Scheduled",
            "children": [],
            "props": props or {},
        }
        self.contexts[ctx_id] = ctx
        if parent is not None:
            parent["children"].append(ctx_id)
        self.queue.append(ctx_id)
        return ctx

    def drive(self) -> None:
        queue = self.queue
        thread = threading.get_ident()
        try:
            while queue and not self.halted:
                self.execute(queue.pop(0))
        finally:
            _EXECUTING.pop(thread, None)
        if self.faulted:
            # Like Elsa, work already scheduled in other branches ran before the instance stopped
            # as faulted (a Parallel's other children, a ParallelForEach's other items).
            queue[:0] = [c for c in self.faulted if c in self.contexts and c not in queue]
            self.faulted.clear()
            self.halted = True

    def execute(self, ctx_id: str) -> None:
        ctx = self.contexts.get(ctx_id)
        if ctx is None:  # cancelled while queued
            return
        node = self.node(ctx)
        ctx["status"] = "Running"
        started = len(self.journal)
        self.record(ctx, node, "Started")
        ax = ActivityContext(self, ctx, node)
        _EXECUTING[threading.get_ident()] = node.id
        self.guard(ax, lambda: self.engine.behaviour(node).execute(ax), retryable=True)
        leftover = self._captured.pop(ctx_id, None) if self._captured else None
        if leftover:  # it waits (or retries): its Started entry carries what it evaluated
            self.journal[started] = dataclasses.replace(
                self.journal[started],
                inputs=leftover.get("inputs"),
                outputs=leftover.get("outputs"),
            )

    def guard(
        self, ax: ActivityContext, action: Callable[[], None], *, retryable: bool = False
    ) -> None:
        """Run activity code; turn its failures into a retry, an incident or a fault."""
        try:
            action()
        except RetryLater as exc:
            if not retryable:
                self.fail(ax, exc)
                return
            self.queue.insert(0, ax.ctx["id"])
            ax.ctx["status"] = "Scheduled"
            policy = ax.node.custom_properties.get("retry") or exc.policy
            if exc.strategy is not None:
                # The activity's resilience strategy counts its own attempts and names the
                # delay: the runtime waits exactly that long, whatever its own policy says.
                policy = {"maxAttempts": STRATEGY_ATTEMPTS, "initialDelay": 0, "maxDelay": 0}
                policy["maxDelay"] = exc.delay or 0
            self.retry = Retry(
                activity_id=ax.node.id,
                activity_instance_id=ax.ctx["id"],
                error=exc.message,
                delay=exc.delay,
                policy=policy if isinstance(policy, Mapping) else None,
                strategy=exc.strategy,
            )
            self.state["retry"] = dataclasses.asdict(self.retry)
            self.halted = True
        except Exception as exc:
            self.fail(ax, exc)

    # Completion -----------------------------------------------------------------------------------

    def complete(
        self, ctx: dict[str, Any], outcomes: tuple[str, ...], *, faulted: bool = False
    ) -> None:
        ctx_id = ctx["id"]
        if ctx_id not in self.contexts:
            return
        self.cancel_children(ctx)
        self.drop_bookmarks(ctx_id)
        del self.contexts[ctx_id]
        node = self.node(ctx)
        if not faulted:
            self.record(ctx, node, "Completed", ",".join(outcomes) or None)
        parent = self.contexts.get(ctx["parent"]) if ctx["parent"] else None
        if parent is None:
            if "scope" in ctx:
                self.state["variables"] = ctx["scope"]["vars"]
            self.finish_workflow()
            return
        parent["children"].remove(ctx_id)
        child = CompletedChild(ctx_id, node, outcomes, ctx["props"], faulted)
        parent_ax = ActivityContext(self, parent, self.node(parent))
        self.guard(
            parent_ax,
            lambda: self.engine.behaviour(parent_ax.node).on_child_completed(parent_ax, child),
        )

    def cancel_children(self, ctx: dict[str, Any]) -> None:
        for child_id in list(ctx["children"]):
            child = self.contexts.pop(child_id, None)
            if child is None:
                continue
            self.cancel_children(child)
            self.drop_bookmarks(child_id)
            if child_id in self.queue:
                self.queue.remove(child_id)
        ctx["children"].clear()

    def cancel_context(self, ctx: dict[str, Any]) -> None:
        """Remove a context and its subtree without notifying its parent."""
        self.cancel_children(ctx)
        self.drop_bookmarks(ctx["id"])
        self.contexts.pop(ctx["id"], None)
        if ctx["id"] in self.queue:
            self.queue.remove(ctx["id"])
        parent = self.contexts.get(ctx["parent"]) if ctx["parent"] else None
        if parent is not None and ctx["id"] in parent["children"]:
            parent["children"].remove(ctx["id"])

    def stall(self, ctx: dict[str, Any]) -> None:
        """Leave a faulted activity in place, faulted: nothing of it runs or waits any more."""
        self.cancel_children(ctx)
        self.drop_bookmarks(ctx["id"])
        if ctx["id"] in self.queue:
            self.queue.remove(ctx["id"])
        ctx["status"] = "Faulted"

    def stalled(self) -> bool:
        """Whether an activity was left faulted by the continue-with-incidents strategy."""
        return any(ctx.get("status") == "Faulted" for ctx in self.contexts.values())

    def drop_bookmarks(self, ctx_id: str) -> None:
        bookmarks = self.state["bookmarks"]
        if bookmarks:
            self.state["bookmarks"] = [b for b in bookmarks if b["activityInstanceId"] != ctx_id]

    def finish_workflow(self) -> None:
        root = self.contexts.get(self.state.get("rootContextId") or "")
        if root is not None:
            self.state["variables"] = root["scope"]["vars"]
        self.state["status"] = "Finished"
        if self.state["subStatus"] not in ("Faulted", "Cancelled"):
            self.state["subStatus"] = "Finished"
        self.queue.clear()
        self.contexts.clear()
        self.state["bookmarks"] = []
        self.halted = True

    def fail(self, ax: ActivityContext, exc: BaseException) -> None:
        node, ctx = ax.node, ax.ctx
        described = describe(exc, node)
        message, code = described.message, described.code
        category = exc.category if isinstance(exc, WorkflowFault) else None
        self.record(ctx, node, "Faulted", None)
        strategy = (
            node.custom_properties.get("incidentStrategy")
            or self.state.get("incidentStrategy")
            or "fault"
        )
        # Like Elsa, every fault is an incident; the strategy only decides what happens next.
        incident = Incident(node.id, ctx["id"], message, code, described.exception)
        self.incidents.append(incident)
        self.state.setdefault("incidents", []).append(dataclasses.asdict(incident))
        if str(strategy).lower() == "continue":
            logger.warning(
                "instance %s: incident in activity %s: %s",
                self.state["instanceId"],
                node.id,
                exc,
            )
            # Elsa's ContinueWithIncidentsStrategy does nothing: the activity stays faulted and
            # never completes, so its container cannot complete either; other work goes on.
            self.stall(ctx)
            return
        logger.info(
            "instance %s faulted in activity %s: %s", self.state["instanceId"], node.id, exc
        )
        fault = Fault(
            message=message,
            code=code,
            category=category,
            activity_id=node.id,
            exception=described.exception,
        )
        if not self.faulted:  # the first fault of this step is the instance's
            self.state["fault"] = dataclasses.asdict(fault)
        self.state["status"] = "Finished"
        self.state["subStatus"] = "Faulted"
        if ctx["id"] in self.contexts:
            # Put back at the head of the queue when the step ends (``drive``), so a replay
            # resumes at the failed activity.
            ctx["status"] = "Scheduled"
            self.cancel_children(ctx)
            if ctx["id"] in self.queue:
                self.queue.remove(ctx["id"])
            self.faulted.append(ctx["id"])
        else:
            self.halted = True

    # Journal and bookmarks --------------------------------------------------------------------

    def record(
        self, ctx: Mapping[str, Any], node: Activity, event: str, outcome: str | None = None
    ) -> None:
        captured = self._captured.pop(ctx["id"], None) if self._captured else None
        if captured and event != "Started":
            entry = JournalEntry(
                node.id,
                ctx["id"],
                node.type,
                node.name,
                event,
                outcome,
                self.clock(),
                captured.get("inputs"),
                captured.get("outputs"),
            )
        else:
            if captured:  # a Started entry is closed later (or by ``execute``)
                self._captured[ctx["id"]] = captured
            entry = JournalEntry(
                node.id, ctx["id"], node.type, node.name, event, outcome, self.clock()
            )
        self.journal.append(entry)

    def capture(
        self, ctx: Mapping[str, Any], node: Activity, kind: Kind, name: str, value: Any
    ) -> None:
        """Keep an input the activity evaluated or an output it set for its journal entry, when
        its log persistence allows."""
        # Nodes are the definitions' own objects for the whole run: their identity is the key.
        policy = self._policies.get(id(node))
        if policy is None:
            workflow = self.definition(ctx["def"]).custom_properties
            policy = self._policies[id(node)] = policy_for(workflow, node.custom_properties)
        if policy.keeps_all or policy.keeps(kind, name):
            captured = self._captured.get(ctx["id"])
            if captured is None:
                captured = self._captured[ctx["id"]] = {}
            values = captured.get(kind)
            if values is None:
                values = captured[kind] = {}
            values[name] = value

    def add_bookmark(
        self,
        ctx: dict[str, Any],
        node: Activity,
        name: str,
        payload: Mapping[str, Any],
        due_at: dt.datetime | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        bookmark = {
            "id": self.new_id(),
            "name": name,
            "payload": dict(payload),
            "hash": bookmark_hash(name, payload, ctx["id"]),
            "activityId": node.id,
            "activityInstanceId": ctx["id"],
            "stimulusHash": stimulus_hash(name, payload),
            "dueAt": due_at.isoformat() if due_at else None,
            **extra,
        }
        self.state["bookmarks"].append(bookmark)
        ctx["status"] = "Suspended"
        return bookmark

    # Variables ------------------------------------------------------------------------------------

    def scopes(self, ctx: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
        """Scopes visible from ``ctx``, innermost first, up to and including the workflow's."""
        current: Mapping[str, Any] | None = ctx
        if "scope" in ctx and ctx["scope"]["kind"] == "workflow" and ctx["parent"]:
            # A composite evaluates its own inputs in the scope it sits in.
            current = self.contexts.get(ctx["parent"])
        while current is not None:
            scope = current.get("scope")
            if scope is not None:
                yield scope
                if scope["kind"] == "workflow":
                    return
            parent = current["parent"]
            current = self.contexts.get(parent) if parent else None

    def workflow_scope(self, ctx: Mapping[str, Any]) -> dict[str, Any]:
        for scope in self.scopes(ctx):
            if scope["kind"] == "workflow":
                return scope
        raise WorkflowFault("no workflow scope in the context chain")

    def assign(self, ctx: Mapping[str, Any], reference: str, value: Any) -> None:
        """Write to a memory reference: a variable (by id or name) or a declared output."""
        for scope in self.scopes(ctx):
            name = scope["ids"].get(reference)
            if name is not None or reference in scope["vars"]:
                scope["vars"][name or reference] = value
                return
            if scope["kind"] == "workflow":
                if reference in scope["declaredOutputs"]:
                    scope["outputs"][reference] = value
                    if scope.get("root"):
                        self.state["output"][reference] = value
                else:
                    scope["vars"][reference] = value
                return

    def evaluate(self, ctx: Mapping[str, Any], node: Activity, spec: Input) -> Any:
        if spec.expression is None:
            return None
        return expressions.evaluate(
            spec.expression,
            ActivityScope(self, ctx, node),
            type_name=spec.type_name,
            js_time_limit=self.engine.js_time_limit,
            js_memory_limit=self.engine.js_memory_limit,
        )
