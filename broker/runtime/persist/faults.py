"""A step's fault as the instance row saves it, and what a client and an operator read of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.redaction import redact_text

__all__ = ["fault_error", "fault_of"]


def fault_of(fault: Any) -> dict[str, Any] | None:
    """The engine's ``Fault`` as saved: Elsa's message, and a detail with its causes."""
    if fault is None:
        return None
    return {
        "message": redact_text(fault.message),
        "detail": redact_text(_with_causes(fault.message, fault.exception)),
        "code": fault.code,
        "category": fault.category,
        "activityId": fault.activity_id,
    }


def fault_error(fault: Mapping[str, Any] | None) -> str | None:
    """What a client and an operator read of a saved fault: its message and its causes."""
    if not fault:
        return None
    found = fault.get("detail") or fault.get("message")
    return str(found) if found is not None else None


def _with_causes(message: str, exception: Mapping[str, Any] | None) -> str:
    """The fault's message followed by its inner exceptions' messages: Elsa's wrapper ("Failed
    to evaluate activity input 'Text'") alone would not tell a client what went wrong."""
    parts = [message]
    inner = (exception or {}).get("innerException")
    while isinstance(inner, Mapping) and len(parts) < 5:
        text = inner.get("message")
        if isinstance(text, str) and text and text not in parts:
            parts.append(text)
        inner = inner.get("innerException")
    return ": ".join(parts)
