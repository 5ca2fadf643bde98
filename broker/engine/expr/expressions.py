"""Evaluation of Elsa expressions (``{"type": "Literal" | "JavaScript" | ..., "value": ...}``) to
a value of the input's type; C#, Python and unknown types raise ``ExpressionError``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from broker.engine.expr.javascript import (
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIME_LIMIT,
    evaluate_javascript,
    preview,
)
from broker.engine.expr.liquid import render_liquid
from broker.engine.expr.scope import Scope
from broker.engine.model.convert import convert
from broker.errors import ExpressionError

__all__ = ["SUPPORTED_TYPES", "evaluate"]

SUPPORTED_TYPES = frozenset(
    {"Literal", "Object", "Json", "Variable", "Input", "JavaScript", "Liquid"}
)
_UNSUPPORTED_LANGUAGES = frozenset({"C#", "CSharp", "Python"})


def evaluate(
    expression: Mapping[str, Any] | None,
    scope: Scope,
    *,
    type_name: str | None = None,
    is_array: bool = False,
    js_time_limit: float = DEFAULT_TIME_LIMIT,
    js_memory_limit: int = DEFAULT_MEMORY_LIMIT,
) -> Any:
    """Evaluate an Elsa expression object in ``scope`` and convert the result to ``type_name``.

    ``None`` or an expression without a type evaluates to ``None``. ``js_time_limit`` (seconds)
    and ``js_memory_limit`` (bytes) bound a JavaScript evaluation; the engine passes
    ``settings.js_time_limit``/``settings.js_memory_limit``.
    """
    if not expression:
        return None
    kind = expression.get("type")
    value = expression.get("value")
    if kind is None or kind == "":
        return None
    kind = str(kind)
    if kind == "JavaScript":
        result = _evaluate_javascript(value, scope, js_time_limit, js_memory_limit)
    else:
        evaluator = _EVALUATORS.get(kind)
        if evaluator is None:
            reason = (
                "is not supported: the broker runs no C# or Python from workflow files"
                if kind in _UNSUPPORTED_LANGUAGES
                else "is not supported"
            )
            raise ExpressionError(
                f"expression type {kind!r} {reason}",
                activity_id=scope.activity_id,
                expression_type=kind,
                expression=_text(value),
            )
        result = evaluator(value, scope)
    try:
        return convert(result, type_name, is_array=is_array)
    except ValueError as exc:
        raise ExpressionError(
            str(exc), activity_id=scope.activity_id, expression_type=kind, expression=_text(value)
        ) from exc


def _literal(value: Any, _scope: Scope) -> Any:
    return value


def _json(value: Any, scope: Scope) -> Any:
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ExpressionError(
            f"invalid JSON: {exc}",
            activity_id=scope.activity_id,
            expression_type="Object",
            expression=_text(value),
        ) from exc


def _variable(value: Any, scope: Scope) -> Any:
    name = _reference_name(value, scope, "Variable")
    if name is None:
        return None
    try:
        return scope.get_variable(name)
    except KeyError as exc:
        raise ExpressionError(
            f"no variable named {name!r} in scope",
            activity_id=scope.activity_id,
            expression_type="Variable",
            expression=name,
        ) from exc


def _input(value: Any, scope: Scope) -> Any:
    name = _reference_name(value, scope, "Input")
    if name is None:
        return None
    try:
        return scope.get_input(name)
    except KeyError:
        # Like Elsa, an input the caller did not send reads as null.
        return None


def _reference_name(value: Any, scope: Scope, kind: str) -> str | None:
    """A variable or input reference: a name, or ``{"id": ..., "name": ...}`` (the name when
    present, else the id: the scope resolves either)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("name", "Name", "id", "Id"):
            candidate = value.get(key)
            if isinstance(candidate, str) and candidate:
                return candidate
    raise ExpressionError(
        f"cannot read a {kind} reference from {value!r}",
        activity_id=scope.activity_id,
        expression_type=kind,
        expression=_text(value),
    )


def _liquid(value: Any, scope: Scope) -> Any:
    if value is None:
        return None
    return render_liquid(str(value), scope)


def _evaluate_javascript(value: Any, scope: Scope, time_limit: float, memory_limit: int) -> Any:
    if value is None:
        return None
    return evaluate_javascript(str(value), scope, time_limit=time_limit, memory_limit=memory_limit)


def _text(value: Any) -> str:
    return preview(value if isinstance(value, str) else json.dumps(value, default=str))


_EVALUATORS: dict[str, Callable[[Any, Scope], Any]] = {
    "Literal": _literal,
    "Object": _json,
    "Json": _json,
    "Variable": _variable,
    "Input": _input,
    "Liquid": _liquid,
}
