"""The kit's reading of workflow files: a file loaded as the broker loads it, and the routes an
HttpEndpoint serves as its file writes them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.engine.model.definition import WorkflowDefinition
from broker.engine.parser import parse_workflow


def load_definition(path: str | Path) -> WorkflowDefinition:
    """A workflow file parsed and validated as the broker loads it."""
    source = Path(path)
    return parse_workflow(json.loads(source.read_text(encoding="utf-8-sig")), file=source.name)


def endpoint_routes(inputs: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, lower-cased path) pairs an HttpEndpoint serves, from its literal inputs."""
    path = _literal(inputs.get("path"))
    methods = _literal(inputs.get("supportedMethods"))
    methods = [methods] if isinstance(methods, str) else methods or ["GET"]
    if not isinstance(path, str) or not isinstance(methods, list):
        return set()
    route = path.strip("/").lower()
    return {(str(method).upper(), route) for method in methods}


def _literal(value: Any) -> Any:
    """An input's value when it is written in the file (Literal, Object, Json), else None."""
    expression = getattr(value, "expression", None)
    if not isinstance(expression, Mapping):
        return None
    kind, found = expression.get("type"), expression.get("value")
    if kind in ("Object", "Json") and isinstance(found, str):
        return json.loads(found)
    return found if kind in ("Literal", "Object", "Json") else None
