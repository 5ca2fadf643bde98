"""Elsa's consumers endpoint: the definitions that use a definition as an activity, directly or
through others (``broker.console.api.definitions.graph``)."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.api.definitions.graph import consumers_of
from broker.console.api.definitions.routes import latest_documents, one
from broker.console.api.params import VersionOptions
from broker.console.roles import require


@blueprint.get("/workflow-definitions/<definition_id>/consumers")
@require("viewer")
def list_consumers(definition_id: str) -> dict[str, Any]:
    one(definition_id, VersionOptions("Latest"))  # 404 for an unknown definition
    return {"consumingWorkflowDefinitionIds": consumers_of(latest_documents(), [definition_id])}
