"""An instance's execution state, which Studio's viewer polls while the instance runs."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.roles import require
from broker.runtime.admin import instance_queries as queries
from broker.web.context import transaction


@blueprint.get("/workflow-instances/<instance_id>/execution-state")
@require("viewer")
def execution_state(instance_id: str) -> dict[str, Any]:
    """Elsa's ``{status, subStatus, updatedAt}`` (404 for an unknown instance)."""
    with transaction(write=False) as session:
        summary, _ = queries.get(session, instance_id)
    return {
        "status": summary["status"],
        "subStatus": summary["subStatus"],
        "updatedAt": summary["updatedAt"],
    }
