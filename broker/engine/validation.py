"""Load-time checks of a parsed definition against what the engine can run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from broker.engine.activities.catalog import CATALOG, FIXED_PORTS, REQUIRED_INPUTS
from broker.engine.expr.expressions import SUPPORTED_TYPES
from broker.engine.model.cron import check_cron
from broker.engine.model.definition import Activity, WorkflowDefinition
from broker.engine.model.strategies import ACTIVATION_STRATEGIES, INCIDENT_STRATEGIES, strategy_name
from broker.engine.parser import in_original_spelling, parse_workflow
from broker.errors import WorkflowDefinitionError
from broker.names import CRON

#: Elsa's own target port: a flowchart connection always enters an activity through ``In``.
TARGET_PORTS = frozenset({"In"})


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _strategy(known: Mapping[str, str]) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        try:
            strategy_name(value, known)
        except ValueError as exc:
            return str(exc)
        return None

    return check


def _flowchart_mode(value: Any) -> str | None:
    ok = value in ("CounterBased", "TokenBased")
    return None if ok else "flowchartMode must be CounterBased or TokenBased"


def _commit_strategy(value: Any) -> str | None:
    if value in (None, ""):
        return None
    return (
        f"commit strategy {value!r} is not supported: the broker commits the instance at "
        "every suspension and at the end"
    )


#: Every workflow option the broker honours (``options.*`` of a definition), with its check.
#: ``activityCategory`` and ``autoUpdateConsumingWorkflows`` are designer data: the broker always
#: runs a workflow-definition activity on the newest published version of its definition.
WORKFLOW_OPTIONS: Mapping[str, Callable[[Any], str | None]] = {
    "usableAsActivity": _boolean,
    "activityCategory": _text,
    "autoUpdateConsumingWorkflows": _boolean,
    "incidentStrategyType": _strategy(INCIDENT_STRATEGIES),
    "activationStrategyType": _strategy(ACTIVATION_STRATEGIES),
    "commitStrategyName": _commit_strategy,
    "flowchartMode": _flowchart_mode,
}


def may_be_definition_activity(type_name: str) -> bool:
    """True for a type the catalog knows or one that may name another file's definition."""
    return type_name in CATALOG or not type_name.startswith("Elsa.")


def validate_document(document: Mapping[str, Any], *, file: str | None) -> WorkflowDefinition:
    """Parse and check one file on its own (other files' activity types are the registry's)."""
    definition = parse_workflow(document, file=file)
    try:
        check_definition(definition, may_be_definition_activity)
    except WorkflowDefinitionError as exc:
        raise in_original_spelling(exc, document) from None
    return definition


def foreign_types(definition: WorkflowDefinition) -> list[tuple[str, str, str | None]]:
    """(type, JSON path, named definition id) of the activities that must be another file's
    definition: by their ``workflowDefinitionId`` when they name one, else by type name."""
    found: list[tuple[str, str, str | None]] = []
    for node in walk(definition.root):
        if node.type in CATALOG:
            continue
        named = node.properties.get("workflowDefinitionId")
        found.append((node.type, f"{node.path}.type", named if isinstance(named, str) else None))
    return found


def check_options(definition: WorkflowDefinition) -> None:
    """Every ``options`` key is one the broker honours, with a value it understands."""
    for key, value in definition.options.items():
        check = WORKFLOW_OPTIONS.get(key)
        if check is None:
            raise WorkflowDefinitionError(
                f"unsupported workflow option {key!r} "
                f"(supported: {', '.join(sorted(WORKFLOW_OPTIONS))})",
                file=definition.file,
                path=f"$.options.{key}",
            )
        problem = check(value)
        if problem is not None:
            raise WorkflowDefinitionError(problem, file=definition.file, path=f"$.options.{key}")


def check_definition(definition: WorkflowDefinition, known_type: Callable[[str], bool]) -> None:
    """Raise ``WorkflowDefinitionError`` (file, JSON path, reason) for the first problem found."""
    file = definition.file
    check_options(definition)
    for node in walk(definition.root):
        if not known_type(node.type) and "workflowDefinitionId" not in node.properties:
            raise WorkflowDefinitionError(
                f"unknown activity type {node.type!r}", file=file, path=f"{node.path}.type"
            )
        for name, expression, where in expressions(node):
            kind = expression.get("type")
            if kind is not None and (not isinstance(kind, str) or kind not in SUPPORTED_TYPES):
                raise WorkflowDefinitionError(
                    f"unknown expression language {kind!r} in {name!r} "
                    f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})",
                    file=file,
                    path=where,
                )
        check_ports(node, file)
        check_required_inputs(node, file)
        if node.type == CRON:
            check_cron_input(node, file)


def check_required_inputs(node: Activity, file: str | None) -> None:
    """A Python activity's required inputs are set: to an expression or a literal that is not
    blank (empty or only whitespace)."""
    for name in REQUIRED_INPUTS.get(node.type, ()):
        item = node.inputs.get(name)
        expression = item.expression if item is not None else None
        plain = node.properties.get(name)
        empty = not expression or _blank(expression.get("value"))
        if empty and (_blank(plain) or not isinstance(plain, str | int | float | bool)):
            raise WorkflowDefinitionError(
                f"activity {node.id!r} ({node.type}) misses its required input "
                f"{name[:1].upper() + name[1:]!r}",
                file=file,
                path=f"{node.path}.{name}",
            )


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def check_cron_input(node: Activity, file: str | None) -> None:
    """A literal cron expression is checked now (Elsa's six fields, seconds first)."""
    item = node.inputs.get("cronExpression")
    expression = item.expression if item is not None else None
    if not expression or expression.get("type") != "Literal":
        return
    try:
        check_cron(str(expression.get("value") or ""))
    except ValueError as exc:
        raise WorkflowDefinitionError(
            str(exc), file=file, path=f"{node.path}.cronExpression.expression.value"
        ) from exc


def walk(node: Activity) -> Iterator[Activity]:
    """``node`` and every activity it contains, depth first."""
    yield node
    for child in node.children():
        yield from walk(child)


def expressions(node: Activity) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """(input name, expression, JSON path) of every expression an activity holds."""
    for name, item in node.inputs.items():
        if isinstance(item.expression, Mapping):
            yield name, item.expression, f"{node.path}.{name}.expression.type"
    for index, case in enumerate(node.cases):
        if isinstance(case.condition, Mapping):
            yield f"case {case.label}", case.condition, f"{node.path}.cases[{index}].condition"


def check_ports(node: Activity, file: str | None) -> None:
    """A flowchart's connections leave through a port the source has and enter through ``In``."""
    by_id = {child.id: child for child in node.activities}
    for index, connection in enumerate(node.connections):
        where = f"{node.path}.connections[{index}]"
        source = by_id.get(connection.source)
        ports = FIXED_PORTS.get(source.type) if source is not None else None
        if ports is not None and connection.source_port not in ports:
            raise WorkflowDefinitionError(
                f"activity {connection.source!r} ({source.type if source else '?'}) has no port "
                f"{connection.source_port!r} (its ports: {', '.join(sorted(ports))})",
                file=file,
                path=f"{where}.source.port",
            )
        if connection.target_port not in TARGET_PORTS:
            raise WorkflowDefinitionError(
                f"activity {connection.target!r} has no inbound port {connection.target_port!r} "
                "(a connection enters through In)",
                file=file,
                path=f"{where}.target.port",
            )
