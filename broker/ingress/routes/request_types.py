"""``GET /request-types``: what this client may submit, with keys and the workflow version."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from broker.ingress.auth import authenticate
from broker.web.context import services

bp = Blueprint("request_types", __name__)


@bp.get("/request-types")
def list_request_types() -> Response:
    client = authenticate()
    svc = services()
    clients, registry = svc.client_directory(), svc.workflow_directory()
    items: list[dict[str, Any]] = []
    for rule in clients.rules_for(client.client_id):
        workflow = registry.for_request_type(rule.request_type)
        items.append(
            {
                "requestType": rule.request_type,
                "requiredKeys": list(rule.required_keys),
                "allowAdditionalKeys": rule.allow_additional_keys,
                "workflow": None
                if workflow is None
                else {
                    "definitionId": workflow.definition_id,
                    "version": workflow.version,
                },
            }
        )
    items.sort(key=lambda item: str(item["requestType"]).lower())
    return jsonify({"requestTypes": items})
