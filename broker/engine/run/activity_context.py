"""What an activity is (``Behaviour``), what it sees while it runs (``ActivityContext``), and
what its expressions see (``ActivityScope``): thin views over one context of a run."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from broker.engine.expr import expressions
from broker.engine.model.definition import Activity, Input, WorkflowDefinition
from broker.engine.model.lookup import DefinitionLookup
from broker.engine.run.faults import input_descriptor_name
from broker.engine.run.outcomes import DONE, CompletedChild
from broker.engine.run.ports import EngineServices
from broker.engine.run.results import Command, RunResult
from broker.errors import InputEvaluationError, RetryLater

if TYPE_CHECKING:
    from broker.engine.model.log_persistence import Kind
    from broker.engine.run.results import ChildInstance

__all__ = ["ActivityContext", "ActivityScope", "Behaviour", "Host", "RunView"]


class Behaviour:
    """How one activity type runs. Stateless: what must survive a suspension lives in
    ``ax.props`` (the activity instance's JSON properties), so one instance serves all runs."""

    #: Names of the bookmarks this activity creates, for documentation and trigger indexing.
    blocking = False

    def execute(self, ax: ActivityContext) -> None:
        ax.complete()

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        if not ax.has_children():
            ax.complete()

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        ax.complete()


class Host(Protocol):
    """What a run needs of the engine that drives it (``broker.engine.api.Engine``)."""

    services: EngineServices
    definitions: DefinitionLookup
    js_time_limit: float
    js_memory_limit: int

    def behaviour(self, node: Activity) -> Behaviour: ...

    def start(
        self,
        definition: WorkflowDefinition,
        *,
        instance_id: str,
        input: Mapping[str, Any] | None = None,
        correlation_id: str | None = None,
        parent_id: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        write_lines: list[str] | None = None,
    ) -> RunResult: ...


class RunView(Protocol):
    """The run an activity context belongs to (``broker.engine.run.interpreter.Run``)."""

    engine: Host
    state: dict[str, Any]
    contexts: dict[str, dict[str, Any]]
    write_lines: list[str]
    commands: list[Command]
    child_instances: list[ChildInstance]
    last_result: Any
    clock: Callable[[], dt.datetime]

    def remember(self, definition: WorkflowDefinition) -> None: ...

    def definition(self, version_id: str) -> WorkflowDefinition: ...

    def node(self, ctx: Mapping[str, Any]) -> Activity: ...

    def create_context(
        self,
        parent: dict[str, Any] | None,
        node_id: str | None,
        def_id: str,
        props: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    def complete(
        self, ctx: dict[str, Any], outcomes: tuple[str, ...], *, faulted: bool = False
    ) -> None: ...

    def cancel_context(self, ctx: dict[str, Any]) -> None: ...

    def record(
        self, ctx: Mapping[str, Any], node: Activity, event: str, outcome: str | None = None
    ) -> None: ...

    def capture(
        self, ctx: Mapping[str, Any], node: Activity, kind: Kind, name: str, value: Any
    ) -> None: ...

    def add_bookmark(
        self,
        ctx: dict[str, Any],
        node: Activity,
        name: str,
        payload: Mapping[str, Any],
        due_at: dt.datetime | None = None,
        **extra: Any,
    ) -> dict[str, Any]: ...

    def scopes(self, ctx: Mapping[str, Any]) -> Iterable[dict[str, Any]]: ...

    def workflow_scope(self, ctx: Mapping[str, Any]) -> dict[str, Any]: ...

    def assign(self, ctx: Mapping[str, Any], reference: str, value: Any) -> None: ...

    def evaluate(self, ctx: Mapping[str, Any], node: Activity, spec: Input) -> Any: ...


class ActivityContext:
    """What an activity implementation sees: its inputs, outputs, children, bookmarks."""

    __slots__ = ("ctx", "node", "run")

    def __init__(self, run: RunView, ctx: dict[str, Any], node: Activity) -> None:
        self.run = run
        self.ctx = ctx
        self.node = node

    @property
    def id(self) -> str:
        return str(self.ctx["id"])

    @property
    def props(self) -> dict[str, Any]:
        props: dict[str, Any] = self.ctx["props"]
        return props

    @property
    def state(self) -> dict[str, Any]:
        return self.run.state

    @property
    def instance_id(self) -> str:
        return str(self.run.state["instanceId"])

    def has_input(self, name: str) -> bool:
        spec = self.node.inputs.get(name)
        return spec is not None and spec.expression is not None

    def get(self, name: str, default: Any = None) -> Any:
        """The evaluated input ``name`` (``default`` when unset)."""
        spec = self.node.inputs.get(name)
        if spec is None or spec.expression is None:
            plain = self.node.properties.get(name)
            if isinstance(plain, str | int | float | bool):
                # Elsa reads a bare JSON value where an input belongs as a Literal.
                spec = Input(None, {"type": "Literal", "value": plain})
            else:
                if spec is not None:  # declared but empty: evaluated as null, as Elsa records
                    self.run.capture(self.ctx, self.node, "inputs", name, None)
                return default
        try:
            value = self.run.evaluate(self.ctx, self.node, spec)
        except RetryLater:
            raise
        except Exception as exc:
            # Elsa wraps whatever an input's evaluation raises (EvaluateInputPropertiesAsync)
            raise InputEvaluationError(
                input_descriptor_name(name), activity_id=self.node.id
            ) from exc
        self.run.capture(self.ctx, self.node, "inputs", name, value)
        return default if value is None else value

    def evaluate(self, expression: Mapping[str, Any] | None, type_name: str | None = None) -> Any:
        if expression is None:
            return None
        return expressions.evaluate(
            expression,
            ActivityScope(self.run, self.ctx, self.node),
            type_name=type_name,
            js_time_limit=self.run.engine.js_time_limit,
            js_memory_limit=self.run.engine.js_memory_limit,
        )

    @property
    def services(self) -> EngineServices:
        """HTTP, mail, the clock and the WriteLine sink the engine was given."""
        return self.run.engine.services

    @property
    def definitions(self) -> DefinitionLookup:
        """The loaded workflow definitions (children, composites)."""
        return self.run.engine.definitions

    @property
    def js_limits(self) -> tuple[float, int]:
        """The JavaScript time (seconds) and memory (bytes) limits."""
        return self.run.engine.js_time_limit, self.run.engine.js_memory_limit

    def behaviour(self, node: Activity) -> Behaviour:
        """How ``node`` runs."""
        return self.run.engine.behaviour(node)

    def start_workflow(
        self,
        definition: WorkflowDefinition,
        *,
        instance_id: str,
        input: Mapping[str, Any] | None = None,
        correlation_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run a child of this instance in-process now, sharing this run's WriteLine log."""
        return self.run.engine.start(
            definition,
            instance_id=instance_id,
            input=input,
            correlation_id=correlation_id,
            parent_id=self.instance_id,
            options=options,
            write_lines=self.run.write_lines,
        )

    def set_output(self, name: str, value: Any) -> None:
        outputs = self.run.state["activityOutputs"]
        outputs.setdefault(self.node.label, {})[name] = value
        if name == "result":
            self.run.last_result = value
        self.run.capture(self.ctx, self.node, "outputs", name, value)
        reference = self.node.outputs.get(name)
        if reference is not None:
            self.run.assign(self.ctx, reference, value)

    def schedule(
        self, node: Activity, *, props: dict[str, Any] | None = None, def_id: str | None = None
    ) -> str:
        ctx = self.run.create_context(self.ctx, node.id, def_id or self.ctx["def"], props)
        return str(ctx["id"])

    def has_children(self) -> bool:
        return bool(self.ctx["children"])

    def children(self) -> list[dict[str, Any]]:
        contexts = self.run.contexts
        return [contexts[c] for c in self.ctx["children"] if c in contexts]

    def complete(self, *outcomes: str) -> None:
        self.run.complete(self.ctx, outcomes or DONE)

    def bookmark(
        self,
        name: str,
        payload: Mapping[str, Any],
        *,
        due_at: dt.datetime | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        return self.run.add_bookmark(self.ctx, self.node, name, payload, due_at, **extra)

    def write_line(self, text: str) -> None:
        lines = text.split("\n")
        for line in lines:
            self.run.write_lines.append(line.removesuffix("\r"))
        sink = self.services.write_line
        if sink is not None:
            sink(text)

    def emit(self, command: Command) -> None:
        self.run.commands.append(command)

    def now(self) -> dt.datetime:
        return self.run.clock()

    def scope(self) -> ActivityScope:
        return ActivityScope(self.run, self.ctx, self.node)

    def find_ancestor(self, predicate: Callable[[Activity], bool]) -> dict[str, Any] | None:
        parent = self.ctx["parent"]
        while parent:
            ctx = self.run.contexts.get(parent)
            if ctx is None:
                return None
            if predicate(self.run.node(ctx)):
                return ctx
            parent = ctx["parent"]
        return None


class ActivityScope:
    """``broker.engine.expr.scope.Scope`` over the context tree, for expressions."""

    __slots__ = ("_ctx", "_node", "_run")

    def __init__(self, run: RunView, ctx: Mapping[str, Any], node: Activity) -> None:
        self._run = run
        self._ctx = ctx
        self._node = node

    @property
    def activity_id(self) -> str | None:
        return self._node.id

    @property
    def workflow_instance_id(self) -> str:
        return str(self._run.state["instanceId"])

    @property
    def correlation_id(self) -> str | None:
        value = self._run.state.get("correlationId")
        return str(value) if value is not None else None

    def variable_names(self) -> list[str]:
        names: list[str] = []
        for variables in self._layers():
            names.extend(name for name in variables if name not in names)
        return names

    def get_variable(self, name: str) -> Any:
        for variables in self._layers():
            if name in variables:
                return variables[name]
        raise KeyError(name)

    def _layers(self) -> Iterator[Mapping[str, Any]]:
        """The variables in scope by name, innermost first: each scope's, and the loop
        variables of the innermost ForEach, ParallelForEach or For iteration where that loop's
        body sits (inside any scope the loop is in, as Elsa declares them on the body's
        context)."""
        loop, inner = self._loop_variables()
        for scope in self._run.scopes(self._ctx):
            if loop and id(scope) not in inner:
                yield loop
                loop = {}
            if scope["ids"]:
                yield _ScopeVariables(scope)
            else:
                yield scope["vars"]
        if loop:
            yield loop

    def _loop_variables(self) -> tuple[dict[str, Any], set[int]]:
        """``CurrentValue`` and ``CurrentIndex``, the variables Elsa's ForEach and
        ParallelForEach declare for their body (For: ``CurrentValue``), from the innermost loop
        iteration; and the ids of the scopes inside that iteration."""
        current: Mapping[str, Any] | None = self._ctx
        contexts = self._run.contexts
        inner: set[int] = set()
        while current is not None:
            scope = current.get("scope")
            if scope is not None:
                inner.add(id(scope))
            props = current["props"]
            if "currentValue" in props:
                found = {"CurrentValue": props["currentValue"]}
                if "currentIndex" in props:
                    found["CurrentIndex"] = props["currentIndex"]
                return found, inner
            parent = current["parent"]
            current = contexts.get(parent) if parent else None
        return {}, inner

    def set_variable(self, name: str, value: Any) -> None:
        for scope in self._run.scopes(self._ctx):
            if name in scope["vars"] or scope["kind"] == "workflow":
                scope["vars"][scope["ids"].get(name, name)] = value
                return

    def input_names(self) -> list[str]:
        return list(self._run.workflow_scope(self._ctx)["inputs"])

    def get_input(self, name: str) -> Any:
        return self._run.workflow_scope(self._ctx)["inputs"][name]

    def activity_names(self) -> list[str]:
        return list(self._run.state["activityOutputs"])

    def activity_outputs(self, activity: str) -> Mapping[str, Any]:
        outputs: dict[str, Mapping[str, Any]] = self._run.state["activityOutputs"]
        found = outputs.get(activity)
        if found is None:  # named by its id while it has a name (Elsa accepts either)
            node = self._run.definition(self._ctx["def"]).nodes.get(activity)
            found = outputs[node.label] if node is not None else outputs[activity]
        return found

    def last_result(self) -> Any:
        return self._run.last_result

    def workflow_info(self) -> Mapping[str, Any]:
        state = self._run.state
        return {
            "definitionId": state["definitionId"],
            "definitionVersionId": state["definitionVersionId"],
            "version": state["version"],
            "name": state["name"],
        }

    def set_workflow_info(self, key: str, value: str | None) -> None:
        if key not in ("correlationId", "name"):
            raise KeyError(key)
        self._run.state[key] = value

    def now(self) -> dt.datetime:
        return self._run.clock()


class _ScopeVariables(Mapping[str, Any]):
    """A scope's variables by name, and by id where a variable's id differs from its name."""

    __slots__ = ("_scope",)

    def __init__(self, scope: Mapping[str, Any]) -> None:
        self._scope = scope

    def __getitem__(self, key: str) -> Any:
        variables = self._scope["vars"]
        if key in variables:
            return variables[key]
        return variables[self._scope["ids"][key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._scope["vars"])

    def __len__(self) -> int:
        return len(self._scope["vars"])

    def __contains__(self, key: object) -> bool:
        return key in self._scope["vars"] or key in self._scope["ids"]
