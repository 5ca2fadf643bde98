"""Elsa 3 workflow JSON, parsed into immutable, validated definitions.

The parser accepts what Elsa Studio exports (and the older shapes still found in the wild): both
connection forms, embedded ports (``then``/``else``, ``body``, ``cases``, ``branches``), an Elsa 2
``properties`` bag, and workflow-definition activities (types defined by other definitions). It
checks what the interpreter relies on and reports the first problem with a JSON path.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from broker.engine import log_persistence
from broker.engine.convert import parse_timespan
from broker.engine.graph import Connection, FlowGraph, build_graph
from broker.errors import WorkflowDefinitionError

# Keys of an activity object that are structure or designer data, never inputs.
_STRUCTURAL_KEYS = frozenset(
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
    }
)

# Seed aliases: older or shorter type names mapped onto the catalog's names.
TYPE_ALIASES = {
    "Elsa.Http.HttpEndpoint": "Elsa.HttpEndpoint",
    "Elsa.Email.SendEmail": "Elsa.SendEmail",
    "Elsa.Http.SendHttpRequest": "Elsa.SendHttpRequest",
    "Elsa.Http.WriteHttpResponse": "Elsa.WriteHttpResponse",
    "Elsa.Primitives.SignalReceived": "Elsa.SignalReceived",
}


@dataclasses.dataclass(frozen=True)
class Input:
    """An activity input: an Elsa expression object and the declared type (a conversion hint)."""

    type_name: str | None
    expression: Mapping[str, Any] | None


@dataclasses.dataclass(frozen=True)
class Variable:
    id: str
    name: str
    type_name: str | None = None
    value: Any = None
    #: ``instance`` (kept in the instance's state) or ``memory`` (not kept across a suspension)
    storage: str = "instance"


@dataclasses.dataclass(frozen=True)
class Port:
    """A declared workflow input or output (``inputs``/``outputs`` of a definition)."""

    name: str
    type_name: str | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    """A Switch or FlowSwitch case: a label, its condition, and (Switch only) its activity."""

    label: str
    condition: Mapping[str, Any] | None
    activity: Activity | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class Activity:
    """One activity node. Containers hold children in ``activities``, ``ports``, ``cases``."""

    id: str
    type: str
    name: str | None = None
    inputs: Mapping[str, Input] = dataclasses.field(default_factory=dict)
    outputs: Mapping[str, str] = dataclasses.field(default_factory=dict)  # output -> memory id
    ports: Mapping[str, Activity] = dataclasses.field(default_factory=dict)
    activities: tuple[Activity, ...] = ()
    branches: tuple[Activity, ...] = ()
    cases: tuple[Case, ...] = ()
    connections: tuple[Connection, ...] = ()
    variables: tuple[Variable, ...] = ()
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    custom_properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    can_start_workflow: bool = False
    graph: FlowGraph | None = None
    path: str = "$"  # where the activity is in its file, for load-time errors

    @property
    def label(self) -> str:
        """The name scripts use (``getOutputFrom<Name>``), else the id."""
        return self.name or self.id

    def children(self) -> Iterator[Activity]:
        """Every directly contained activity."""
        yield from self.activities
        yield from self.branches
        yield from self.ports.values()
        for case in self.cases:
            if case.activity is not None:
                yield case.activity


@dataclasses.dataclass(frozen=True, eq=False)
class WorkflowDefinition:
    """One version of a workflow: metadata, declared variables/inputs/outputs and the root."""

    id: str  # the version id
    definition_id: str
    version: int
    name: str
    root: Activity
    variables: tuple[Variable, ...] = ()
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    outcomes: tuple[str, ...] = ()
    custom_properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    is_published: bool = True
    is_latest: bool = True
    usable_as_activity: bool = False
    file: str | None = None
    nodes: Mapping[str, Activity] = dataclasses.field(default_factory=dict)

    @property
    def request_type(self) -> str | None:
        value = self.custom_properties.get("requestType")
        return str(value) if value else None

    @property
    def activity_type_name(self) -> str:
        """The type name other workflows use for this definition as an activity."""
        return pascal_case(self.name)

    @property
    def flowchart_mode(self) -> str | None:
        mode = self.options.get("flowchartMode") or self.custom_properties.get("flowchartMode")
        return str(mode) if mode else None

    @property
    def incident_strategy(self) -> str | None:
        """``fault`` or ``continue`` from ``options.incidentStrategyType``, else None."""
        try:
            return strategy_name(self.options.get("incidentStrategyType"), INCIDENT_STRATEGIES)
        except ValueError:
            return None  # refused at load (broker.engine.validation)

    @property
    def activation_strategy(self) -> str:
        """``always``, ``singleton``, ``correlation`` or ``correlated-singleton``."""
        try:
            chosen = strategy_name(
                self.options.get("activationStrategyType"), ACTIVATION_STRATEGIES
            )
        except ValueError:
            chosen = None  # refused at load (broker.engine.validation)
        return chosen or "always"

    @property
    def retry_policy(self) -> Mapping[str, Any] | None:
        policy = self.custom_properties.get("retry")
        return policy if isinstance(policy, Mapping) else None

    def triggers(self) -> list[Activity]:
        """Activities marked ``canStartWorkflow`` (HTTP endpoints, events, timers)."""
        return [node for node in self.nodes.values() if node.can_start_workflow]

    def activity_types(self) -> set[str]:
        return {node.type for node in self.nodes.values()}


#: Elsa's incident strategies (``options.incidentStrategyType``), by class name.
INCIDENT_STRATEGIES = {
    "FaultStrategy": "fault",
    "ContinueWithIncidentsStrategy": "continue",
}
#: Elsa's workflow activation strategies (``options.activationStrategyType``), by class name.
ACTIVATION_STRATEGIES = {
    "AllowAlwaysStrategy": "always",
    "SingletonStrategy": "singleton",
    "CorrelationStrategy": "correlation",
    "CorrelatedSingletonStrategy": "correlated-singleton",
}
_SHORT_NAMES = {
    "fault": "FaultStrategy",
    "continue": "ContinueWithIncidentsStrategy",
    "default": "AllowAlwaysStrategy",
    "always": "AllowAlwaysStrategy",
    "singleton": "SingletonStrategy",
    "correlation": "CorrelationStrategy",
    "correlatedsingleton": "CorrelatedSingletonStrategy",
}


#: Elsa's variable storage drivers (``storageDriverTypeName``), by class name. The workflow and
#: workflow-instance drivers keep the value in the instance's state; Memory keeps it only while
#: the instance runs in one go (it is gone after a suspension, as in a new Elsa process).
STORAGE_DRIVERS = {
    "WorkflowInstanceStorageDriver": "instance",
    "WorkflowStorageDriver": "instance",
    "MemoryStorageDriver": "memory",
}


def _class_name(type_name: Any) -> str:
    """``"Elsa.Workflows.MemoryStorageDriver, Elsa.Workflows.Core"`` -> ``MemoryStorageDriver``."""
    return str(type_name).split(",")[0].strip().rsplit(".", 1)[-1]


def strategy_name(value: Any, known: Mapping[str, str]) -> str | None:
    """A strategy option as Studio writes it, mapped through ``known``; None when absent.

    Studio stores the type's simple assembly-qualified name
    (``Elsa.Workflows.IncidentStrategies.ContinueWithIncidentsStrategy, Elsa.Workflows.Core``);
    the bare class name and the short word (``Continue``, ``Singleton``) are accepted too. Raises
    ``ValueError`` for anything else.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a type name")
    class_name = _class_name(value)
    class_name = _SHORT_NAMES.get(class_name.lower(), class_name)
    if class_name not in known:
        raise ValueError(f"{value!r} is not one of {', '.join(known)}")
    return known[class_name]


def _log_entries(section: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """(JSON path, entry) of every mode entry of a log-persistence section, legacy or current."""
    for key, value in section.items():
        where = f"{path}.{key}"
        if isinstance(value, Mapping) and not value.keys() & {"strategyType", "evaluationMode"}:
            yield from _log_entries(value, where)
        else:
            yield where, value


def _known_strategy(entry: Mapping[str, Any]) -> bool:
    strategy = entry.get("strategyType")
    if strategy is None or not str(strategy).strip():
        return True  # no strategy named: Inherit
    return _class_name(strategy).lower() in log_persistence.STRATEGIES


def pascal_case(name: str) -> str:
    """``"Subworkflow test"`` -> ``"SubworkflowTest"``; an already PascalCase name is kept."""
    parts = [part for part in re.split(r"[^0-9A-Za-z]+", name) if part]
    return "".join(part[0].upper() + part[1:] for part in parts)


def camel_case(name: str) -> str:
    return name[:1].lower() + name[1:] if name else name


def parse_workflow(document: Mapping[str, Any], *, file: str | None = None) -> WorkflowDefinition:
    """Parse and validate an Elsa 3 workflow definition document."""
    return _Parser(file).workflow(document)


class _Parser:
    def __init__(self, file: str | None) -> None:
        self.file = file
        self.nodes: dict[str, Activity] = {}

    def error(self, reason: str, path: str) -> WorkflowDefinitionError:
        return WorkflowDefinitionError(reason, file=self.file, path=path)

    def workflow(self, doc: Mapping[str, Any]) -> WorkflowDefinition:
        if not isinstance(doc, Mapping):
            raise self.error("a workflow definition must be a JSON object", "$")
        definition_id = doc.get("definitionId") or doc.get("id")
        if not isinstance(definition_id, str) or not definition_id:
            raise self.error("missing definitionId", "$.definitionId")
        version_id = doc.get("id") or definition_id
        if not isinstance(version_id, str):
            raise self.error("id must be a string", "$.id")
        version = doc.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool):
            raise self.error("version must be an integer", "$.version")
        name = doc.get("name") or definition_id
        if not isinstance(name, str):
            raise self.error("name must be a string", "$.name")
        if "root" not in doc or not isinstance(doc["root"], Mapping):
            raise self.error("missing root activity", "$.root")
        custom = self.mapping(doc.get("customProperties"), "$.customProperties")
        self.log_persistence(custom, "$.customProperties")
        options = self.mapping(doc.get("options"), "$.options")
        retry = custom.get("retry")
        if retry is not None and not isinstance(retry, Mapping):
            raise self.error("retry must be an object", "$.customProperties.retry")
        request_type = custom.get("requestType")
        if request_type is not None and not isinstance(request_type, str):
            raise self.error("requestType must be a string", "$.customProperties.requestType")
        mode = options.get("flowchartMode")
        if mode is not None and mode not in ("CounterBased", "TokenBased"):
            raise self.error(
                "flowchartMode must be CounterBased or TokenBased", "$.options.flowchartMode"
            )
        root = self.activity(doc["root"], "$.root")
        return WorkflowDefinition(
            id=version_id,
            definition_id=definition_id,
            version=version,
            name=name,
            root=root,
            variables=self.variables(doc.get("variables"), "$.variables"),
            inputs=self.ports(doc.get("inputs"), "$.inputs"),
            outputs=self.ports(doc.get("outputs"), "$.outputs"),
            outcomes=tuple(str(o) for o in doc.get("outcomes") or ()),
            custom_properties=custom,
            options=options,
            is_published=bool(doc.get("isPublished", True)),
            is_latest=bool(doc.get("isLatest", True)),
            usable_as_activity=bool(options.get("usableAsActivity") or doc.get("usableAsActivity")),
            file=self.file,
            nodes=self.nodes,
        )

    def resilience(self, custom: dict[str, Any], path: str) -> None:
        """Elsa's ``customProperties.resilienceStrategy`` becomes the activity's retry policy.

        The strategy must be written inline (``{"mode": "Expression", "expression": {"type":
        "Object", "value": {...HttpResilienceStrategy...}}}``): the broker has no catalog of named
        strategies, so ``mode: Identifier`` is refused. ``maxRetryAttempts`` (3) retries after the
        first attempt, ``delay`` ("00:00:01" or seconds) is the first wait; ``Exponential``
        (default) doubles it up to the settings' maximum, ``Constant`` keeps it. The broker always
        adds jitter.
        """
        config = custom.get("resilienceStrategy")
        if config is None:
            return
        where = f"{path}.resilienceStrategy"
        if "retry" in custom:
            raise self.error("set resilienceStrategy or retry, not both", where)
        if not isinstance(config, Mapping):
            raise self.error("must be an object", where)
        mode = str(config.get("mode", "Identifier"))
        if mode.lower() != "expression":
            raise self.error(
                f"resilience strategy {config.get('strategyId')!r} by identifier is not "
                "supported (the broker has no strategy catalog): write it inline with mode "
                "Expression and an Object value",
                f"{where}.mode",
            )
        expression = config.get("expression")
        if not isinstance(expression, Mapping) or expression.get("type") not in (
            "Object",
            "Json",
            "Literal",
        ):
            raise self.error(
                "the strategy must be an Object, Json or Literal expression (known at load)",
                f"{where}.expression",
            )
        value = expression.get("value")
        try:
            strategy = json.loads(value) if isinstance(value, str) else value
        except ValueError as exc:
            raise self.error(f"malformed JSON: {exc}", f"{where}.expression.value") from exc
        if not isinstance(strategy, Mapping):
            raise self.error("the strategy must be an object", f"{where}.expression.value")
        custom["retry"] = self.retry_from_strategy(strategy, f"{where}.expression.value")

    def retry_from_strategy(self, strategy: Mapping[str, Any], path: str) -> dict[str, Any]:
        known = {"$type", "id", "displayName", "maxRetryAttempts", "delay", "backoffType"}
        known |= {"useJitter"}
        for key in strategy:
            if key not in known:
                raise self.error(f"unsupported resilience setting {key!r}", f"{path}.{key}")
        kind = strategy.get("$type", "HttpResilienceStrategy")
        if kind != "HttpResilienceStrategy":
            raise self.error(f"resilience strategy type {kind!r} is not supported", path)
        retries = strategy.get("maxRetryAttempts", 3)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise self.error("must be a whole number, 0 or more", f"{path}.maxRetryAttempts")
        try:
            delay = parse_timespan(strategy.get("delay", 1))
        except ValueError as exc:
            raise self.error(str(exc), f"{path}.delay") from exc
        backoff = strategy.get("backoffType", "Exponential")
        retry: dict[str, Any] = {"maxAttempts": retries + 1, "initialDelay": delay}
        if backoff == "Constant":
            retry["maxDelay"] = delay
        elif backoff != "Exponential":
            raise self.error(
                f"backoffType {backoff!r} is not supported (Exponential or Constant)",
                f"{path}.backoffType",
            )
        return retry

    def log_persistence(self, custom: Mapping[str, Any], path: str) -> None:
        """Elsa's ``logPersistenceMode`` / ``logPersistenceConfig``: what the execution journal
        keeps of an activity's inputs and outputs (``log_persistence``). Include, Exclude,
        Inherit and Configuration (the broker's default) are honoured; a mode chosen by an
        expression, or one the broker does not know, is refused rather than guessed."""
        for key in log_persistence.KEYS:
            section = custom.get(key)
            if section is None:
                continue
            if not isinstance(section, Mapping):
                raise self.error("must be an object", f"{path}.{key}")
            for where, entry in _log_entries(section, f"{path}.{key}"):
                if isinstance(entry, Mapping):
                    evaluation = str(entry.get("evaluationMode") or "Strategy")
                    if evaluation.lower() != "strategy":
                        raise self.error(
                            f"log persistence chosen by {evaluation!r} is not supported "
                            "(a strategy: Include, Exclude or Inherit)",
                            f"{where}.evaluationMode",
                        )
                    if log_persistence.mode_of(entry) is None or not _known_strategy(entry):
                        raise self.error(
                            f"log persistence strategy {_class_name(entry.get('strategyType'))!r}"
                            " is not supported (Include, Exclude or Inherit)",
                            f"{where}.strategyType",
                        )
                elif log_persistence.mode_of(entry) is None:
                    raise self.error(
                        f"log persistence mode {entry!r} is not supported "
                        "(Include, Exclude or Inherit)",
                        where,
                    )

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error("must be an object", path)
        return dict(value)

    def variables(self, value: Any, path: str) -> tuple[Variable, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error("variables must be a list", path)
        result = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise self.error("a variable needs a name", where)
            var_id = item.get("id") or item["name"]
            driver = item.get("storageDriverTypeName")
            storage = STORAGE_DRIVERS.get(_class_name(driver)) if driver else "instance"
            if storage is None:
                raise self.error(
                    f"variable storage driver {driver!r} is not supported "
                    f"(supported: {', '.join(STORAGE_DRIVERS)})",
                    f"{where}.storageDriverTypeName",
                )
            result.append(
                Variable(
                    id=str(var_id),
                    name=item["name"],
                    type_name=item.get("typeName"),
                    value=item.get("value"),
                    storage=storage,
                )
            )
        return tuple(result)

    def ports(self, value: Any, path: str) -> tuple[Port, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error("must be a list", path)
        result = []
        for index, item in enumerate(value):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise self.error("a declared input or output needs a name", f"{path}[{index}]")
            result.append(Port(name=item["name"], type_name=item.get("type")))
        return tuple(result)

    def activity(self, doc: Any, path: str) -> Activity:
        if not isinstance(doc, Mapping):
            raise self.error("an activity must be a JSON object", path)
        kind = doc.get("type")
        if not isinstance(kind, str) or not kind:
            raise self.error("an activity needs a type", f"{path}.type")
        kind = TYPE_ALIASES.get(kind, kind)
        activity_id = doc.get("id")
        if activity_id is None:
            activity_id = path
        if not isinstance(activity_id, str):
            raise self.error("an activity id must be a string", f"{path}.id")
        if activity_id in self.nodes:
            raise self.error(f"duplicate activity id {activity_id!r}", f"{path}.id")
        # Reserve the id before descending so children cannot reuse it.
        self.nodes[activity_id] = None  # type: ignore[assignment]
        fields = self.fields(doc, path)
        properties = self.properties_bag(doc.get("properties"), f"{path}.properties")
        for key, value in fields.items():
            self.classify(key, value, f"{path}.{key}", properties)
        activities = tuple(
            self.activity(child, f"{path}.activities[{i}]")
            for i, child in enumerate(self.list(doc, "activities", path))
        )
        branches = tuple(
            self.activity(child, f"{path}.branches[{i}]")
            for i, child in enumerate(self.list(doc, "branches", path))
            if isinstance(child, Mapping) and "type" in child
        )
        if doc.get("branches") is not None and not isinstance(doc.get("branches"), list):
            # FlowFork keeps branch names as an input, not as activities.
            self.classify("branches", doc["branches"], f"{path}.branches", properties)
        elif isinstance(doc.get("branches"), list) and not branches and doc["branches"]:
            properties["inputs"]["branches"] = Input(
                "String[]", {"type": "Object", "value": list(doc["branches"])}
            )
        cases = self.cases(doc.get("cases"), f"{path}.cases")
        if kind == "Elsa.SendHttpRequest":
            cases += self.status_cases(
                doc.get("expectedStatusCodes"), f"{path}.expectedStatusCodes"
            )
        connections = self.connections(doc.get("connections"), f"{path}.connections")
        custom = self.mapping(doc.get("customProperties"), f"{path}.customProperties")
        self.resilience(custom, f"{path}.customProperties")
        self.log_persistence(custom, f"{path}.customProperties")
        can_start = doc.get("canStartWorkflow", custom.get("canStartWorkflow", False))
        node = Activity(
            id=activity_id,
            type=kind,
            name=doc.get("name") if isinstance(doc.get("name"), str) else None,
            inputs=properties["inputs"],
            outputs=properties["outputs"],
            ports=properties["ports"],
            activities=activities,
            branches=branches,
            cases=cases,
            connections=connections,
            variables=self.variables(doc.get("variables"), f"{path}.variables"),
            properties=properties["plain"],
            custom_properties=custom,
            can_start_workflow=can_start is True or str(can_start).lower() == "true",
            path=path,
        )
        if kind in ("Elsa.Flowchart",) or connections:
            node = dataclasses.replace(node, graph=self.graph(node, doc, path))
        self.nodes[activity_id] = node
        return node

    def fields(self, doc: Mapping[str, Any], path: str) -> dict[str, Any]:
        return {key: value for key, value in doc.items() if key not in _STRUCTURAL_KEYS}

    def list(self, doc: Mapping[str, Any], key: str, path: str) -> list[Any]:
        value = doc.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            if key == "branches":
                return []
            raise self.error(f"{key} must be a list", f"{path}.{key}")
        return value

    def properties_bag(self, bag: Any, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {"inputs": {}, "outputs": {}, "ports": {}, "plain": {}}
        if bag is None:
            return out
        if isinstance(bag, Mapping):
            for key, value in bag.items():
                self.classify(key, value, f"{path}.{key}", out)
            return out
        if not isinstance(bag, list):
            raise self.error("properties must be a list or an object", path)
        # Elsa 2: [{"name": "Text", "syntax": "Literal", "expressions": {"Literal": "..."}}]
        for index, item in enumerate(bag):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise self.error("a property needs a name", f"{path}[{index}]")
            expressions = item.get("expressions") or {}
            syntax = item.get("syntax") or next(iter(expressions), "Literal")
            out["inputs"][camel_case(item["name"])] = Input(
                None, {"type": syntax, "value": expressions.get(syntax)}
            )
        return out

    def classify(self, key: str, value: Any, path: str, out: dict[str, Any]) -> None:
        if value is None:
            return
        if isinstance(value, Mapping):
            if "expression" in value:
                expression = value["expression"]
                if expression is not None and (
                    not isinstance(expression, Mapping)
                    or not isinstance(expression.get("type"), str)
                ):
                    raise self.error("an expression needs a type", f"{path}.expression")
                out["inputs"][key] = Input(value.get("typeName"), expression)
                return
            if "memoryReference" in value:
                reference = value["memoryReference"]
                if isinstance(reference, Mapping) and isinstance(reference.get("id"), str):
                    out["outputs"][key] = reference["id"]
                return
            if (
                isinstance(value.get("type"), str)
                and "typeName" not in value
                and ("id" in value or "activities" in value)
            ):
                out["ports"][key] = self.activity(value, path)
                return
            if set(value) <= {"typeName"}:
                return
        out["plain"][key] = value

    def cases(self, value: Any, path: str) -> tuple[Case, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error("cases must be a list", path)
        cases = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            if not isinstance(item, Mapping):
                raise self.error("a case must be an object", where)
            condition = item.get("condition")
            if isinstance(condition, Mapping) and "expression" in condition:
                condition = condition["expression"]
            if condition is not None and not isinstance(condition, Mapping):
                raise self.error("a case condition must be an expression", f"{where}.condition")
            activity = item.get("activity")
            cases.append(
                Case(
                    label=str(item.get("label", index)),
                    condition=condition,
                    activity=self.activity(activity, f"{where}.activity") if activity else None,
                )
            )
        return tuple(cases)

    def status_cases(self, value: Any, path: str) -> tuple[Case, ...]:
        """SendHttpRequest's ``expectedStatusCodes``: ``[{"statusCode": 404, "activity": {...}}]``,
        one case per status code, labelled with the code (FlowSendHttpRequest's is an input)."""
        if not isinstance(value, list):
            return ()
        cases = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            if not isinstance(item, Mapping):
                continue  # a bare list of codes: read as an input by the activity
            code = item.get("statusCode")
            if isinstance(code, bool) or not isinstance(code, int | str) or not str(code).isdigit():
                raise self.error("statusCode must be an HTTP status code", f"{where}.statusCode")
            activity = item.get("activity")
            if activity is not None and not isinstance(activity, Mapping):
                raise self.error("a status code's activity must be an object", f"{where}.activity")
            cases.append(
                Case(
                    label=str(int(code)),
                    condition=None,
                    activity=self.activity(activity, f"{where}.activity") if activity else None,
                )
            )
        return tuple(cases)

    def connections(self, value: Any, path: str) -> tuple[Connection, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error("connections must be a list", path)
        result = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            if not isinstance(item, Mapping):
                raise self.error("a connection must be an object", where)
            source, target = item.get("source"), item.get("target")
            if isinstance(source, Mapping):
                source_id, source_port = source.get("activity"), source.get("port")
            else:
                source_id = source if source is not None else item.get("sourceActivityId")
                source_port = item.get("sourcePort") or item.get("outcome")
            if isinstance(target, Mapping):
                target_id, target_port = target.get("activity"), target.get("port")
            else:
                target_id = target if target is not None else item.get("targetActivityId")
                target_port = item.get("targetPort")
            if not isinstance(source_id, str) or not isinstance(target_id, str):
                raise self.error("a connection needs a source and a target activity", where)
            result.append(
                Connection(
                    source_id, str(source_port or "Done"), target_id, str(target_port or "In")
                )
            )
        return tuple(result)

    def graph(self, node: Activity, doc: Mapping[str, Any], path: str) -> FlowGraph:
        ids = [child.id for child in node.activities]
        known = set(ids)
        for index, connection in enumerate(node.connections):
            for end in (connection.source, connection.target):
                if end not in known:
                    raise self.error(
                        f"connection refers to unknown activity {end!r}",
                        f"{path}.connections[{index}]",
                    )
        start = doc.get("start")
        if start is not None and start not in known:
            raise self.error(f"start refers to unknown activity {start!r}", f"{path}.start")
        return build_graph(node.activities, node.connections, start)
