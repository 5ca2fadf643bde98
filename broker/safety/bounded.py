"""Bounded input: the one JSON reader (size, depth, keys, strict numbers, no lone surrogate or NUL)
and the one whole-number parser of every body, query and workflow document the broker reads
(docs/design.md, "Bounded input")."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from broker.errors import BadRequest, PayloadTooLarge

#: the deepest nesting of a workflow document, on every path that loads one (file, watcher,
#: publish, import, the worker): System.Text.Json's default ``MaxDepth``, so what Elsa's own
#: serializer reads, the broker reads, and no walker of a definition can run out of stack
WORKFLOW_MAX_DEPTH = 64
#: digits a whole number may have before its range is even checked
MAX_DIGITS = 20

# A surrogate left in a decoded str is a lone one: json pairs valid ones into one code point.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_WHOLE = re.compile(r"[0-9]+")

# One node of the walk: value, depth, parent node, and the key or index under the parent.
_Node = tuple[Any, int, Any, str | int | None]


@dataclasses.dataclass(frozen=True)
class JsonLimits:
    """What one JSON document may hold: bytes, nesting and object keys (None: no key count)."""

    max_bytes: int | None
    max_depth: int
    max_keys: int | None = None


#: a workflow document: its nesting, any size its caller allows, no key count
WORKFLOW_LIMITS = JsonLimits(max_bytes=None, max_depth=WORKFLOW_MAX_DEPTH)


def decode_json(raw: bytes | str, limits: JsonLimits, *, field: str = "body") -> Any:
    """Strict JSON from UTF-8 ``raw`` (a leading BOM allowed), within ``limits``; otherwise
    ``BadRequest`` (``PayloadTooLarge`` over the size) naming ``field`` and, for content, the
    JSON path. NaN, Infinity and numbers that overflow to them are refused."""
    if limits.max_bytes is not None and len(raw) > limits.max_bytes:
        raise PayloadTooLarge(f"{field} exceeds {limits.max_bytes} bytes", limit=limits.max_bytes)
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise BadRequest(f"Malformed JSON: not UTF-8 text ({exc.reason})", field=field) from exc
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise BadRequest(f"{field} must be a JSON document, not empty", field=field)
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        # The C scanner counts its own recursion: far too deep, refused before any walk.
        raise _too_deep(limits.max_depth, field) from exc
    except ValueError as exc:
        raise BadRequest(f"Malformed JSON: {exc}", field=field) from exc
    check_shape(document, limits, field=field)
    return document


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _too_deep(max_depth: int, field: str) -> BadRequest:
    return BadRequest(f"JSON nesting exceeds {max_depth} levels", field=field, limit=max_depth)


def check_shape(document: Any, limits: JsonLimits, *, field: str = "body") -> None:
    """Raise ``BadRequest`` when ``document`` nests deeper or holds more keys than ``limits``
    allow, or holds a non-finite number, a lone surrogate or a NUL character (key or value, any
    depth). Iterative: a document of any depth is walked without recursion."""
    keys = 0
    stack: list[_Node] = [(document, 1, None, None)]
    while stack:
        node = stack.pop()
        value, depth = node[0], node[1]
        if isinstance(value, str):
            _check_text(value, node, "string", field)
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _content_error(f"Number out of range (it overflows to {value})", node, field)
            continue
        if isinstance(value, dict):
            keys += len(value)
            if limits.max_keys is not None and keys > limits.max_keys:
                raise BadRequest(
                    f"JSON {field} has more than {limits.max_keys} keys",
                    field=field,
                    limit=limits.max_keys,
                )
        elif not isinstance(value, list | tuple):
            continue
        if depth > limits.max_depth:
            raise _too_deep(limits.max_depth, field)
        if isinstance(value, dict):
            for key, child in value.items():
                if isinstance(key, str):
                    _check_text(key, (key, depth + 1, node, key), "key", field)
                stack.append((child, depth + 1, node, key))
        else:
            stack.extend((child, depth + 1, node, index) for index, child in enumerate(value))


def nesting_depth(document: Any, *, stop_after: int) -> int:
    """How deep ``document`` nests (a scalar: 0), counted without recursion; the walk stops once
    it passes ``stop_after`` (the answer is then ``stop_after + 1``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > stop_after:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _check_text(text: str, node: _Node, what: str, field: str) -> None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return
    char = found.group()
    if char == "\x00":
        problem = "a NUL character (\\u0000)"
    else:
        problem = f"a lone surrogate (\\u{ord(char):04x})"
    raise _content_error(f"JSON {what} contains {problem}", node, field)


def _content_error(message: str, node: _Node, field: str) -> BadRequest:
    path = json_path(node)
    return BadRequest(f"{message} at {path}", field=field, path=path)


def json_path(node: _Node) -> str:
    """The JSONPath of a walk node: ``$.payload.items[2]``, ``$["odd key"]``."""
    parts: list[str] = []
    current: _Node | None = node
    while current is not None and current[2] is not None:
        key = current[3]
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif isinstance(key, str) and key.isidentifier() and key.isascii():
            parts.append(f".{key}")
        else:
            # json.dumps escapes a lone surrogate or NUL, so the path itself stays printable.
            parts.append(f"[{json.dumps(key)}]")
        current = current[2]
    return "$" + "".join(reversed(parts))


def unstorable_text(text: str) -> str | None:
    """What makes ``text`` unfit for an id, name or filter (a NUL or a lone surrogate: the
    database cannot hold or compare it), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return "NUL characters" if found.group() == "\x00" else "lone surrogates"


# Whole numbers ---------------------------------------------------------------------------------


def parse_int(raw: Any, name: str, *, low: int, high: int) -> int:
    """A whole number from a query parameter, a path segment or a JSON value, within
    ``[low, high]``; ``BadRequest`` naming ``name`` otherwise.

    Text must be ASCII digits only (a leading ``-`` when ``low`` is negative): ``str.isdigit``
    and ``int`` also take superscripts, other scripts' digits, ``_`` and spaces. A JSON number
    must be an integer (not a bool, not a float)."""
    if isinstance(raw, bool) or raw is None:
        raise _not_whole(name, raw, low, high)
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip()
        sign = 1
        if text.startswith("-") and low < 0:
            sign, text = -1, text[1:]
        if not _WHOLE.fullmatch(text) or len(text) > MAX_DIGITS:
            raise _not_whole(name, raw, low, high)
        value = sign * int(text)
    else:
        raise _not_whole(name, raw, low, high)
    if not low <= value <= high:
        raise _not_whole(name, raw, low, high)
    return value


def _not_whole(name: str, raw: Any, low: int, high: int) -> BadRequest:
    shown = raw if not isinstance(raw, str) or len(raw) <= 40 else raw[:40] + "..."
    return BadRequest(
        f"'{name}' must be a whole number from {low} to {high}, not {shown!r}",
        field=name,
        low=low,
        high=high,
    )
