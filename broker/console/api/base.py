"""The blueprint every Elsa API route registers on, and its error shapes."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify
from werkzeug.exceptions import HTTPException

from broker.errors import BrokerError, ConfigError, RateLimited, StoreUnavailable
from broker.registry import WorkflowRegistry
from broker.web.context import services

blueprint = Blueprint("elsa_api", __name__, url_prefix="/elsa/api")


def error_body(status: int, messages: list[str]) -> dict[str, Any]:
    """The body FastEndpoints (and so Elsa Server) answers with for a refused request."""
    return {
        "statusCode": status,
        "message": "One or more errors occurred!",
        "errors": {"generalErrors": messages},
    }


@blueprint.errorhandler(BrokerError)
def error_response(exc: BrokerError) -> tuple[Response, int, dict[str, str]]:
    """A refusal as Elsa answers it (``Retry-After`` while the store is down)."""
    messages = exc.details.get("errors") if isinstance(exc.details.get("errors"), list) else None
    body = error_body(exc.status, list(messages or [exc.message]))
    headers = {"Retry-After": "5"} if isinstance(exc, StoreUnavailable) else {}
    if isinstance(exc, RateLimited):
        headers = {"Retry-After": str(exc.retry_after)}
    return jsonify(body), exc.status, headers


@blueprint.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> tuple[Response, int]:
    status = exc.code or 500
    return jsonify(error_body(status, [exc.description or exc.name])), status


def workflow_registry() -> WorkflowRegistry:
    """The app's workflow registry (the console lists and publishes definitions through it)."""
    found = services().registry
    if not isinstance(found, WorkflowRegistry):
        raise ConfigError("the console needs the workflow registry")
    return found


def version_document(version_id: str) -> dict[str, Any]:
    """The workflow document of a stored version, ``{}`` when it is unknown."""
    version = workflow_registry().get_version(version_id)
    return dict(version.document) if version is not None else {}
