"""Activity inputs and outputs as the execution journal stores them: masked and bounded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from broker.redaction import MASK, is_secret_name, redact

#: the longest JSON text of one recorded input or output value
MAX_VALUE_CHARS = 4096
TRUNCATED = "... [truncated: {size} characters]"


def bounded(value: Any) -> Any:
    """``value`` as stored: itself when its JSON is short, else the start of its JSON text and
    the truncation marker (a value JSON cannot hold is stored as its text)."""
    converted = False

    def as_text(other: Any) -> str:
        nonlocal converted
        converted = True
        return str(other)

    text = json.dumps(value, default=as_text, ensure_ascii=False)
    if len(text) > MAX_VALUE_CHARS:
        return text[:MAX_VALUE_CHARS] + TRUNCATED.format(size=len(text))
    return json.loads(text) if converted else value


def values(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """Recorded inputs or outputs by name, masked and bounded."""
    return {
        name: MASK if is_secret_name(name) else bounded(redact(value))
        for name, value in recorded.items()
    }


def payload(entry: Any, extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """A journal row's payload: the step's ``extra`` plus the entry's recorded values."""
    inputs: Mapping[str, Any] | None = getattr(entry, "inputs", None)
    outputs: Mapping[str, Any] | None = getattr(entry, "outputs", None)
    if not inputs and not outputs:
        return extra
    found = dict(extra or {})
    if inputs:
        found["inputs"] = values(inputs)
    if outputs:
        found["outputs"] = values(outputs)
    return found
