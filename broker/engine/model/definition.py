"""An Elsa 3 workflow definition, immutable: the activity tree, variables, declared inputs and
outputs, and the options the runtime reads. ``broker.engine.parser`` builds one from the JSON.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

from broker.engine.model.graph import Connection, FlowGraph
from broker.engine.model.strategies import ACTIVATION_STRATEGIES, INCIDENT_STRATEGIES, strategy_name


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


def pascal_case(name: str) -> str:
    """``"Subworkflow test"`` -> ``"SubworkflowTest"``; an already PascalCase name is kept."""
    parts = [part for part in re.split(r"[^0-9A-Za-z]+", name) if part]
    return "".join(part[0].upper() + part[1:] for part in parts)


def camel_case(name: str) -> str:
    return name[:1].lower() + name[1:] if name else name
