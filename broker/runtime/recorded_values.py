"""Activity inputs and outputs as the execution journal stores them: masked and bounded.

The engine hands over the inputs an activity evaluated and the outputs it set, as its log
persistence allows (``broker.engine.log_persistence``). They go into the journal row's
``payload`` as ``{"inputs": {...}, "outputs": {...}}``, each value:

- masked: at any depth, the value of a key that looks like a credential (an ``Authorization``
  header, a ``password`` field, an ``apiKey``...) becomes ``***``, and a URL's userinfo
  (``https://user:pw@host``) is masked in any string;
- bounded: a value whose JSON is longer than ``MAX_VALUE_CHARS`` is stored as the start of that
  JSON followed by a marker saying how long it was; a value JSON cannot hold is stored as text.

The masking is by name and shape, the same rule as the broker's other redaction of credentials.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

#: the longest JSON text of one recorded input or output value
MAX_VALUE_CHARS = 4096
TRUNCATED = "... [truncated: {size} characters]"
MASK = "***"

_SECRET_PARTS = (
    "token",
    "secret",
    "passw",
    "pwd",
    "signature",
    "auth",
    "credential",
    "session",
    "cookie",
    "apikey",
)
_SEPARATORS = re.compile(r"[^a-z0-9]")
_USERINFO = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)[^\s/?#@]*@")


def is_secret_name(name: str) -> bool:
    normal = _SEPARATORS.sub("", name.lower())
    if normal == "idempotencykey":
        return False
    return any(part in normal for part in _SECRET_PARTS) or normal.endswith(("key", "sig"))


def masked(value: Any) -> Any:
    """A copy of a JSON-like value with credentials masked (see the module docstring)."""
    if isinstance(value, str):
        return _USERINFO.sub(rf"\1{MASK}@", value) if "@" in value else value
    if isinstance(value, Mapping):
        return {
            k: MASK if isinstance(k, str) and is_secret_name(k) else masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    return value


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
        name: MASK if is_secret_name(name) else bounded(masked(value))
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
