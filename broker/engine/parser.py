"""Elsa 3 workflow JSON, parsed into immutable, validated definitions."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from broker.engine.activities.catalog import TYPE_ALIASES
from broker.engine.model import shapes
from broker.engine.model.definition import (
    Activity,
    Case,
    Input,
    Port,
    Variable,
    WorkflowDefinition,
    camel_case,
)
from broker.engine.model.enums import ENUM_INPUTS, enum_member
from broker.engine.model.graph import Connection, FlowGraph, build_graph
from broker.engine.model.shapes import STRUCTURAL_KEYS
from broker.engine.model.state_machine import STATE_MACHINE, read_state_machine
from broker.engine.model.strategies import (
    STORAGE_DRIVERS,
    check_log_persistence,
    class_name,
    read_resilience,
)
from broker.errors import WorkflowDefinitionError


def parse_workflow(document: Mapping[str, Any], *, file: str | None = None) -> WorkflowDefinition:
    """Parse and validate an Elsa 3 workflow definition document (camelCase or PascalCase); an
    error names the JSON path as the document spells it. A document nesting deeper than
    ``WORKFLOW_MAX_DEPTH`` is refused before anything walks it."""
    shapes.check_nesting(document, file=file)
    try:
        return _Parser(file).workflow(shapes.workflow_document(document))
    except WorkflowDefinitionError as exc:
        raise in_original_spelling(exc, document) from None


def in_original_spelling(error: WorkflowDefinitionError, document: Any) -> WorkflowDefinitionError:
    """The error with its JSON path spelled as ``document`` spells its property names."""
    path = shapes.original_path(document, error.path)
    if path == error.path:
        return error
    return WorkflowDefinitionError(error.reason, file=error.file, path=path)


class _Parser:
    def __init__(self, file: str | None) -> None:
        self.file = file
        self.nodes: dict[str, Activity] = {}

    def error(self, reason: str, path: str) -> WorkflowDefinitionError:
        return WorkflowDefinitionError(reason, file=self.file, path=path)

    def workflow(self, doc: Mapping[str, Any]) -> WorkflowDefinition:
        if not isinstance(doc, Mapping):
            raise self.error("a workflow definition must be a JSON object", "$")
        # Elsa's samples load files with only a name and a root (the id is then made up).
        definition_id = doc.get("definitionId") or doc.get("id") or doc.get("name")
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
        check_log_persistence(custom, "$.customProperties", self.file)
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
        unnamed = 0
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise self.error("a variable needs a name", where)
            name = item["name"]
            if not name.strip():
                # Elsa's container names a variable without one by its place among them
                unnamed += 1
                name = f"Variable{unnamed}"
            var_id = item.get("id") or name
            driver = item.get("storageDriverTypeName")
            storage = STORAGE_DRIVERS.get(class_name(driver)) if driver else "instance"
            if storage is None:
                raise self.error(
                    f"variable storage driver {driver!r} is not supported "
                    f"(supported: {', '.join(STORAGE_DRIVERS)})",
                    f"{where}.storageDriverTypeName",
                )
            type_name = item.get("typeName")
            if item.get("isArray") is True and isinstance(type_name, str) and type_name:
                # Elsa's "typeName": "String", "isArray": true is a String[] (its default value
                # JSON array text)
                type_name = type_name if type_name.endswith("[]") else type_name + "[]"
            result.append(
                Variable(
                    id=str(var_id),
                    name=name,
                    type_name=type_name,
                    value=shapes.plain_value(item.get("value")),
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
        if kind.endswith(">") and kind.find("<") > 0:
            # Elsa names a generic activity by its type arguments: "Elsa.SetVariable<Int32>".
            kind = kind[: kind.index("<")]
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
            members = ENUM_INPUTS.get((kind, key))
            if members is not None and value is not None:
                properties["inputs"][key] = self.enum_input(value, members, f"{path}.{key}")
                continue
            self.classify(key, value, f"{path}.{key}", properties)
        if kind == STATE_MACHINE:
            read_state_machine(doc, path, properties, self.activity, self.error)
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
        read_resilience(custom, f"{path}.customProperties", self.file)
        check_log_persistence(custom, f"{path}.customProperties", self.file)
        legacy = self.mapping(doc.get("applicationProperties"), f"{path}.applicationProperties")
        can_start = doc.get(
            "canStartWorkflow",
            custom.get("canStartWorkflow", legacy.get("canStartWorkflow", False)),
        )
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

    def enum_input(self, value: Any, members: tuple[str, ...], path: str) -> Input:
        """An enum as Elsa writes it: a name, a number, or an input wrapping a literal of either
        (another expression is evaluated when the activity runs)."""
        type_name = None
        if isinstance(value, Mapping):
            type_name = value.get("typeName")
            expression = value.get("expression")
            if not isinstance(expression, Mapping) or not isinstance(expression.get("type"), str):
                raise self.error("an expression needs a type", f"{path}.expression")
            if expression["type"] != "Literal":
                return Input(type_name, expression)
            value, path = expression.get("value"), f"{path}.expression.value"
        member = enum_member(value, members)
        if member is None:
            raise self.error(
                f"{value!r} is not one of {', '.join(members)} (or their numbers 0-"
                f"{len(members) - 1})",
                path,
            )
        return Input(type_name or "String", {"type": "Literal", "value": member})

    def fields(self, doc: Mapping[str, Any], path: str) -> dict[str, Any]:
        return {key: value for key, value in doc.items() if key not in STRUCTURAL_KEYS}

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
        if start is not None and not isinstance(start, str):
            raise self.error(f"start must be an activity id, not {start!r}", f"{path}.start")
        if start is not None and start not in known:
            raise self.error(f"start refers to unknown activity {start!r}", f"{path}.start")
        return build_graph(node.activities, node.connections, start)
