"""Studio's script editor: the TypeScript declarations of what a workflow's JavaScript
expression sees (``broker.engine.expr.jsapi``), as Elsa's ``type-definitions`` endpoint answers."""

from __future__ import annotations

from typing import Any

from flask import Response

from broker.console.api.base import blueprint
from broker.console.api.definitions.routes import one
from broker.console.api.openapi import (
    TEXT,
    documented,
    json_object,
)
from broker.console.api.params import VersionOptions, optional_body_object
from broker.console.roles import require
from broker.engine.expr.jsapi import typescript_declarations
from broker.errors import BadRequest

#: the content type Elsa Server sends the declarations with
TYPESCRIPT = "application/x-typescript"


def variables_of(document: dict[str, Any]) -> list[tuple[str, str | None]]:
    found = []
    for variable in document.get("variables") or []:
        if isinstance(variable, dict) and isinstance(variable.get("name"), str):
            type_name = variable.get("typeName")
            found.append((variable["name"], type_name if isinstance(type_name, str) else None))
    return found


@blueprint.post("/scripting/javascript/type-definitions/<definition_id>")
@require("viewer")
@documented(body=json_object({"activityTypeName": TEXT}))
def type_definitions(definition_id: str) -> Response:
    body = optional_body_object()
    activity_type = body.get("activityTypeName")
    if activity_type is not None and not isinstance(activity_type, str):
        raise BadRequest("'activityTypeName' must be a string")
    # Elsa reads the latest version: a draft saved from Studio included
    version = one(definition_id, VersionOptions.parse("Latest", "Latest"))
    text = typescript_declarations(variables_of(version.document), activity_type=activity_type)
    response = Response(text, content_type=f"{TYPESCRIPT}; charset=utf-8")
    response.headers["Content-Disposition"] = f'attachment; filename="elsa.{definition_id}.d.ts"'
    return response
