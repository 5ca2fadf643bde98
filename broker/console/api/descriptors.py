"""Descriptor routes: what the designer may put in a workflow, and how it is edited."""

from __future__ import annotations

from typing import Any

from broker.console.api.activity_descriptors import activity_descriptors
from broker.console.api.base import blueprint
from broker.console.roles import require
from broker.engine.expr.expressions import SUPPORTED_TYPES
from broker.errors import NotFound

#: display data of the expression languages; the list served is filtered by SUPPORTED_TYPES
EXPRESSIONS: dict[str, tuple[str, bool, str | None]] = {
    # type: (display name, browsable, Monaco language)
    "Literal": ("Literal", False, None),
    "Object": ("Object", False, "json"),
    "Json": ("Json", False, "json"),
    "Variable": ("Variable", True, None),
    "Input": ("Input", True, None),
    "JavaScript": ("JavaScript", True, "javascript"),
    "Liquid": ("Liquid", True, "liquid"),
}

#: variable types: (type alias, display name, category); each one is a type the engine converts
VARIABLE_TYPES: tuple[tuple[str, str, str], ...] = (
    ("Object", "Object", "Primitives"),
    ("String", "String", "Primitives"),
    ("Boolean", "Boolean", "Primitives"),
    ("Int32", "Int32", "Primitives"),
    ("Int64", "Int64", "Primitives"),
    ("Double", "Double", "Primitives"),
    ("Decimal", "Decimal", "Primitives"),
    ("Guid", "Guid", "Primitives"),
    ("DateTime", "DateTime", "Primitives"),
    ("DateTimeOffset", "DateTimeOffset", "Primitives"),
    ("DateOnly", "DateOnly", "Primitives"),
    ("TimeSpan", "TimeSpan", "Primitives"),
    ("JsonObject", "JsonObject", "Dynamic"),
    ("JsonArray", "JsonArray", "Dynamic"),
    ("ExpandoObject", "ExpandoObject", "Dynamic"),
    ("String[]", "String[]", "Lists"),
    ("Object[]", "Object[]", "Lists"),
)

#: where variables live: in the instance's state (the broker's one storage driver)
STORAGE_DRIVERS = (
    {
        "typeName": "Elsa.Workflows.Runtime.WorkflowInstanceStorageDriver, Elsa.Workflows.Runtime",
        "displayName": "Workflow Instance",
        "priority": 0,
        "deprecated": False,
    },
)

ACTIVATION_STRATEGIES = (
    {
        "typeName": "Elsa.Workflows.Runtime.ActivationStrategies.AllowAlwaysStrategy, "
        "Elsa.Workflows.Runtime",
        "displayName": "Always",
        "description": "Always allow the creation of a new workflow instance.",
    },
)

#: the engine's two incident strategies (``fault`` and ``continue``), under Elsa's type names
INCIDENT_STRATEGIES = (
    {
        "typeName": "Elsa.Workflows.IncidentStrategies.ContinueWithIncidentsStrategy, "
        "Elsa.Workflows.Core",
        "displayName": "Continue with incidents",
        "description": "An incident strategy that allows the workflow to continue running, "
        "but with incidents.",
    },
    {
        "typeName": "Elsa.Workflows.IncidentStrategies.FaultStrategy, Elsa.Workflows.Core",
        "displayName": "Fault",
        "description": "An incident strategy that puts the entire workflow in the Faulted state.",
    },
)

#: Elsa's order; Studio shows the first one for a workflow that names none, so it comes first as
#: what the journal does without a setting (``broker.engine.model.log_persistence``)
LOG_PERSISTENCE_STRATEGIES = (
    {
        "typeName": "Elsa.Workflows.LogPersistence.Strategies.Include, Elsa.Workflows.Core",
        "displayName": "Include",
        "description": "Activity inputs and outputs are recorded (credentials masked, values "
        "cut at 4096 characters).",
    },
    {
        "typeName": "Elsa.Workflows.LogPersistence.Strategies.Exclude, Elsa.Workflows.Core",
        "displayName": "Exclude",
        "description": "Activity inputs and outputs are not recorded.",
    },
    {
        "typeName": "Elsa.Workflows.LogPersistence.Strategies.Inherit, Elsa.Workflows.Core",
        "displayName": "Inherit",
        "description": "As the activity's or the workflow's default (the broker's: Include).",
    },
)

#: the broker saves a step when the engine returns (finished, faulted or only waits remain)
WORKFLOW_COMMIT_STRATEGIES = (
    {
        "name": "WorkflowExecuted",
        "displayName": "Commit After Workflow Execution",
        "description": "Commit the workflow state when the workflow has been executed.",
    },
)


def listing(items: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return {"items": list(items), "count": len(items)}


@blueprint.get("/descriptors/activities")
@require("viewer")
def list_activities() -> dict[str, Any]:
    return listing(activity_descriptors())


@blueprint.get("/descriptors/activities/<type_name>")
@require("viewer")
def get_activity(type_name: str) -> dict[str, Any]:
    for descriptor in activity_descriptors():
        if descriptor["typeName"] == type_name:
            return descriptor
    raise NotFound(f"Activity type '{type_name}' not found")


def expression_descriptors() -> list[dict[str, Any]]:
    found = []
    for kind in sorted(SUPPORTED_TYPES, key=list(EXPRESSIONS).index):
        display, browsable, monaco = EXPRESSIONS[kind]
        found.append(
            {
                "type": kind,
                "displayName": display,
                "isSerializable": True,
                "isBrowsable": browsable,
                "properties": {"MonacoLanguage": monaco} if monaco else {},
            }
        )
    return found


@blueprint.get("/descriptors/expression-descriptors")
@require("viewer")
def list_expression_descriptors() -> dict[str, Any]:
    return listing(expression_descriptors())


@blueprint.get("/descriptors/variables")
@require("viewer")
def list_variable_types() -> dict[str, Any]:
    items = [
        {"typeName": t, "displayName": d, "category": c, "description": None}
        for t, d, c in VARIABLE_TYPES
    ]
    return listing(items)


@blueprint.get("/descriptors/storage-drivers")
@require("viewer")
def list_storage_drivers() -> dict[str, Any]:
    return listing(STORAGE_DRIVERS)


@blueprint.get("/descriptors/workflow-activation-strategies")
@require("viewer")
def list_activation_strategies() -> dict[str, Any]:
    return listing(ACTIVATION_STRATEGIES)


@blueprint.get("/descriptors/incident-strategies")
@require("viewer")
def list_incident_strategies() -> dict[str, Any]:
    return listing(INCIDENT_STRATEGIES)


@blueprint.get("/descriptors/log-persistence-strategies")
@require("viewer")
def list_log_persistence_strategies() -> dict[str, Any]:
    return listing(LOG_PERSISTENCE_STRATEGIES)


@blueprint.get("/descriptors/commit-strategies/workflows")
@require("viewer")
def list_workflow_commit_strategies() -> dict[str, Any]:
    return listing(WORKFLOW_COMMIT_STRATEGIES)


@blueprint.get("/descriptors/commit-strategies/activities")
@require("viewer")
def list_activity_commit_strategies() -> dict[str, Any]:
    # The broker has no per-activity commit point: a step is saved when the engine returns.
    return listing([])
