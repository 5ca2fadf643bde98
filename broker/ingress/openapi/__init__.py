"""The OpenAPI 3 document of the public listener, served at ``GET /openapi.json``, written by
hand and checked against the blueprints by the schemathesis suite."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from broker import __version__
from broker.ingress.openapi.components import ERRORS, SCHEMAS, body, ref
from broker.ingress.openapi.paths import PATHS

bp = Blueprint("openapi", __name__)


def document() -> dict[str, Any]:
    """The OpenAPI document (a fresh dict; callers may change it)."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Elsa Celery broker",
            "version": __version__,
            "description": "Mutual TLS: the client is the verified client certificate. Admin "
            "operations name their scope in `x-required-scope`.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "responses": {
                **{
                    f"E{code}": body(ref("Error"), text, **_error_headers(code))
                    for code, text in ERRORS.items()
                },
                # Answered by gunicorn before the app sees the request, hence not JSON.
                "E414": {
                    "description": "The request line (path and query) is over gunicorn's "
                    "limit of 4094 bytes",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
            },
        },
    }


def _error_headers(code: int) -> dict[str, Any]:
    if code != 429:
        return {}
    seconds = {"schema": {"type": "integer", "minimum": 1}, "description": "seconds to wait"}
    return {"headers": {"Retry-After": seconds}}


@bp.get("/openapi.json")
def document_view() -> Response:
    return jsonify(document())


__all__ = ["bp", "document"]
