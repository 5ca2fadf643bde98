"""Server routes: the features Studio checks for, and the server's version."""

from __future__ import annotations

from typing import Any

from broker import __version__
from broker.console.api.base import blueprint
from broker.console.roles import require
from broker.errors import NotFound

#: the Elsa features this API provides, as Elsa Server names them (Studio turns on the matching
#: menus and editors); only what the broker really answers
FEATURES: tuple[tuple[str, str, str, str], ...] = (
    (
        "WorkflowManagement",
        "Elsa.Workflows.Management.Features",
        "Workflow Management",
        "Workflow definitions: list, save, publish, export and import.",
    ),
    (
        "WorkflowRuntime",
        "Elsa.Workflows.Runtime.Features",
        "Workflow Runtime",
        "Runs workflow instances on the broker's Celery workers.",
    ),
    (
        "WorkflowInstances",
        "Elsa.Workflows.Management.Features",
        "Workflow Instances",
        "Workflow instances, their journal and activity executions.",
    ),
    (
        "JavaScript",
        "Elsa.JavaScript.Features",
        "JavaScript Expressions",
        "JavaScript expressions and the RunJavaScript activity.",
    ),
    (
        "Liquid",
        "Elsa.Liquid.Features",
        "Liquid Expressions",
        "Liquid template expressions.",
    ),
    (
        "Http",
        "Elsa.Http.Features",
        "HTTP",
        "HTTP endpoints and outbound HTTP requests.",
    ),
    ("Email", "Elsa.Email.Features", "Email", "Sending e-mail."),
)


def feature(name: str, namespace: str, display_name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "fullName": f"{namespace}.{name}",
        "displayName": display_name,
        "description": description,
    }


@blueprint.get("/features/installed")
@require("viewer")
def features_installed() -> dict[str, Any]:
    items = [feature(*f) for f in FEATURES]
    return {"items": items, "count": len(items)}


@blueprint.get("/features/installed/<path:full_name>")
@require("viewer")
def feature_installed(full_name: str) -> dict[str, Any]:
    for f in FEATURES:
        described = feature(*f)
        if described["fullName"] == full_name:
            return described
    raise NotFound(f"Feature '{full_name}' is not installed")


@blueprint.get("/package/version")
@require("viewer")
def package_version() -> dict[str, Any]:
    return {"packageVersion": __version__}
