"""The OpenAPI document of ``/elsa/api``, made from the routes themselves (path, role) and what each
declares beside it with ``documented`` (query, body); served at ``/elsa/api/openapi.json``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, current_app

from broker import __version__
from broker.console.api.base import blueprint
from broker.console.api.params import MAX_PAGE, MAX_PAGE_SIZE, MAX_SKIP
from broker.console.roles import require
from broker.registry.files import MAX_VERSION

F = TypeVar("F", bound=Callable[..., Any])

PREFIX = "/elsa/api"
#: the attribute ``documented`` sets on a view (``functools.wraps`` carries it outwards)
ATTRIBUTE = "api_doc"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")

# Schemas the declarations share ------------------------------------------------------------------

TEXT: dict[str, Any] = {"type": "string"}
FLAG: dict[str, Any] = {"type": "boolean"}
TEXTS: dict[str, Any] = {"type": "array", "items": TEXT}
OBJECT: dict[str, Any] = {"type": "object"}


def whole(low: int, high: int) -> dict[str, Any]:
    """A whole number within the bounds its route's number parser enforces."""
    return {"type": "integer", "minimum": low, "maximum": high}


PAGING: dict[str, dict[str, Any]] = {
    "page": whole(0, MAX_PAGE),
    "pageSize": whole(1, MAX_PAGE_SIZE),
}
VERSION = whole(1, MAX_VERSION)
SKIP = whole(0, MAX_SKIP)
TAKE = whole(1, MAX_PAGE_SIZE)


def json_object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON object body with these properties (others allowed, as Elsa's binder allows)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


LIST_OF_OBJECTS: dict[str, Any] = {"type": "array", "items": OBJECT}
#: a workflow definition as Studio saves, exports and imports it
DEFINITION = json_object(
    {
        "definitionId": TEXT,
        "name": TEXT,
        "description": TEXT,
        "isPublished": FLAG,
        "variables": LIST_OF_OBJECTS,
        "inputs": LIST_OF_OBJECTS,
        "outputs": LIST_OF_OBJECTS,
        "customProperties": OBJECT,
        "options": OBJECT,
        "root": json_object(
            {
                "type": TEXT,
                "id": TEXT,
                "activities": LIST_OF_OBJECTS,
                "connections": LIST_OF_OBJECTS,
            }
        ),
    }
)


@dataclasses.dataclass(frozen=True)
class Doc:
    """What a route reads besides its path: query parameters and a body (JSON, or files)."""

    query: dict[str, dict[str, Any]]
    body: dict[str, Any] | None
    files: bool
    summary: str | None


def documented(
    *,
    query: dict[str, dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    files: bool = False,
    summary: str | None = None,
) -> Callable[[F], F]:
    """Declare, beside a route, the query parameters and the body it reads."""

    def mark(view: F) -> F:
        setattr(view, ATTRIBUTE, Doc(dict(query or {}), body, files, summary))
        return view

    return mark


def _operation(rule: Any, method: str, view: Any) -> dict[str, Any]:
    doc: Doc | None = getattr(view, ATTRIBUTE, None)
    names = _PARAMETER.findall(rule.rule)
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": TEXT} for name in names
    ]
    if doc is not None:
        parameters += [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in doc.query.items()
        ]
    operation: dict[str, Any] = {
        "operationId": f"{rule.endpoint}.{method.lower()}",
        "parameters": parameters,
        "responses": {
            "default": {
                "description": "Elsa's answer, or a refusal (4xx) with the reason",
                "content": {"application/json": {"schema": {}}},
            }
        },
        "x-required-role": getattr(view, "required_role", None),
    }
    if doc is not None and doc.summary:
        operation["summary"] = doc.summary
    if method in BODY_METHODS:
        if doc is not None and doc.files:
            files = {"type": "array", "items": {"type": "string", "format": "binary"}}
            content = {
                "multipart/form-data": {
                    "schema": {"type": "object", "properties": {"files": files}}
                }
            }
        else:
            schema = doc.body if doc is not None and doc.body is not None else OBJECT
            content = {"application/json": {"schema": schema}}
        operation["requestBody"] = {"required": False, "content": content}
    return operation


def document(app: Flask) -> dict[str, Any]:
    """The OpenAPI 3.0 document of every ``/elsa/api`` route of ``app``."""
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if not rule.rule.startswith(PREFIX + "/"):
            continue
        view = app.view_functions[rule.endpoint]
        path = _PARAMETER.sub(r"{\1}", rule.rule)
        item = paths.setdefault(path, {})
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            item[method.lower()] = _operation(rule, method, view)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Elsa Workflows API (the broker's console)",
            "version": __version__,
            "description": "Authorization: ApiKey <key>, or Bearer <token> from identity/login. "
            "Each operation names the role it needs in x-required-role.",
        },
        "paths": paths,
    }


@blueprint.get("/openapi.json")
@require("viewer")
def openapi_document() -> dict[str, Any]:
    return document(current_app)
