"""Liquid expressions (Elsa's "Liquid" syntax) rendered with python-liquid: what Elsa's Fluid
context exposes, its filters, and limits on loops and output."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from liquid import BoundTemplate, Environment, Undefined
from liquid.exceptions import FilterValueError, LiquidError

from broker.engine.expr.scope import Scope
from broker.errors import ExpressionError

__all__ = ["render_liquid"]

_TEMPLATE_CACHE_SIZE = 512


class _SandboxedEnvironment(Environment):
    """An environment with every resource limit python-liquid offers switched on."""

    context_depth_limit = 30
    loop_iteration_limit = 100_000
    local_namespace_limit = 1_000_000
    output_stream_limit = 1_000_000
    block_nesting_limit = 100


def _text_of(value: Any) -> str | None:
    """A filter input as text, as Elsa's Base64Filter reads it (.NET's True/False, JSON for
    arrays and objects)."""
    if value is None or isinstance(value, Undefined):
        return None
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return format(value, "g") if isinstance(value, float) else str(value)
    return json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False)


def _base64(value: Any) -> str | None:
    text = _text_of(value)
    return None if text is None else base64.b64encode(text.encode()).decode()


def _keys(value: Any) -> list[str]:
    if not isinstance(value, Mapping):
        raise FilterValueError(f"keys expects an object, got {type(value).__name__}", token=None)
    return [str(key) for key in value]


def _json(value: Any) -> str:
    if isinstance(value, Undefined):
        value = None
    # Fluid serializes with System.Text.Json: compact, no spaces after separators.
    return json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False)


def _digest(name: str) -> Any:
    def digest(value: Any) -> str:
        return hashlib.new(name, (_text_of(value) or "").encode()).hexdigest()

    digest.__name__ = name
    return digest


_environment = _SandboxedEnvironment()
_environment.filters.update(
    {
        "base64": _base64,
        "keys": _keys,
        "json": _json,
        "md5": _digest("md5"),
        "sha1": _digest("sha1"),
        "sha256": _digest("sha256"),
    }
)
_templates: dict[str, BoundTemplate] = {}
_templates_lock = threading.Lock()


def render_liquid(source: str, scope: Scope) -> str:
    """Render the Liquid template ``source`` against ``scope``; raises ``ExpressionError``."""
    try:
        template = _parse(source)
        return template.render(**_context(scope))
    except LiquidError as exc:
        message = " ".join(str(exc).split("\n", 1)[0].split())
        raise ExpressionError(
            f"{message} (in: {_preview(source, 80)})",
            activity_id=scope.activity_id,
            expression_type="Liquid",
            expression=_preview(source),
        ) from exc


def _parse(source: str) -> BoundTemplate:
    template = _templates.get(source)
    if template is None:
        template = _environment.from_string(source)
        with _templates_lock:
            if len(_templates) >= _TEMPLATE_CACHE_SIZE:
                _templates.clear()
            _templates[source] = template
    return template


def _context(scope: Scope) -> dict[str, Any]:
    variables: dict[str, Any] = {}
    for name in scope.variable_names():
        if name not in variables:  # innermost first: an outer variable of that name is hidden
            try:
                variables[name] = scope.get_variable(name)
            except KeyError:
                continue
    inputs: dict[str, Any] = {}
    for name in scope.input_names():
        try:
            inputs[name] = scope.get_input(name)
        except KeyError:
            continue
    info = scope.workflow_info()
    workflow = {
        "Id": scope.workflow_instance_id,
        "InstanceId": scope.workflow_instance_id,
        "DefinitionId": info.get("definitionId"),
        "DefinitionVersionId": info.get("definitionVersionId"),
        "Version": info.get("version"),
        "Name": info.get("name"),
        "CorrelationId": scope.correlation_id,
        "Variables": variables,
        "Input": inputs,
    }
    return {
        **variables,
        "Variables": variables,
        "variables": variables,
        "Input": inputs,
        "input": inputs,
        "Workflow": workflow,
        "CorrelationId": scope.correlation_id,
        "WorkflowInstanceId": scope.workflow_instance_id,
        "WorkflowDefinitionId": workflow["DefinitionId"],
        "WorkflowDefinitionVersionId": workflow["DefinitionVersionId"],
        "WorkflowDefinitionVersion": workflow["Version"],
    }


def _preview(source: str, limit: int = 200) -> str:
    text = " ".join(source.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
