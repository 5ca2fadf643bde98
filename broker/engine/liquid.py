"""Liquid expressions (Elsa's "Liquid" syntax) rendered with python-liquid.

The template sees what Elsa's Fluid context exposes: ``Variables.X``, ``Input.X``,
``CorrelationId`` and ``WorkflowInstanceId``; each variable also by its bare name, and
``Variables``/``Input`` in lower case too. python-liquid never reaches Python attributes or
callables from a template, and the limits below bound loops and output, so a template cannot hang
a worker or exhaust its memory.
"""

from __future__ import annotations

import threading
from typing import Any

from liquid import BoundTemplate, Environment
from liquid.exceptions import LiquidError

from broker.engine.scope import Scope
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


_environment = _SandboxedEnvironment()
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
    return {
        **variables,
        "Variables": variables,
        "variables": variables,
        "Input": inputs,
        "input": inputs,
        "CorrelationId": scope.correlation_id,
        "WorkflowInstanceId": scope.workflow_instance_id,
    }


def _preview(source: str, limit: int = 200) -> str:
    text = " ".join(source.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
