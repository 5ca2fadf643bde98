"""Expression evaluation (placeholder: Literal and Object only; being replaced)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from broker.engine.scope import Scope
from broker.errors import ExpressionError


def evaluate(expression: Mapping[str, Any] | None, scope: Scope, *,
             type_name: str | None = None) -> Any:
    """Evaluate an Elsa expression object ``{"type": ..., "value": ...}`` in ``scope``."""
    if expression is None:
        return None
    kind = expression.get("type")
    value = expression.get("value")
    if kind == "Literal":
        return value
    if kind in ("Object", "Json"):
        return json.loads(value) if isinstance(value, str) else value
    raise ExpressionError(f"unsupported expression type {kind!r}", activity_id=scope.activity_id,
                          expression_type=str(kind))
