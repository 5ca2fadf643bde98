"""Credentials out of everything the broker writes (audit events, error details, the journal, dead
letters, log lines): URLs, headers and free text masked by name and shape."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

_CONTAINS = (
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
_ENDS = ("key", "sig")
# Names that match the rule but name no credential: the client's own Idempotency-Key.
_NOT_SECRET = frozenset({"idempotencykey"})
_SEPARATORS = re.compile(r"[^a-z0-9]")

# Each pattern starts only where a run of its characters starts (a lookbehind or a quote), so a
# long line costs linear time, not a rescan from every position.
# scheme://userinfo@ : everything between the scheme and the last '@' of the authority
_USERINFO = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)[^\s/?#@]*@")
# name=value, as in a query string or a form body
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_.\-\[\]])([A-Za-z0-9_.\-\[\]]+)=([^&;#\s'\",)}\]]+)")
# "name": "value" or 'name': 'value', as in JSON or a Python dict repr
_QUOTED_PAIR = re.compile(r"([\"'])([A-Za-z0-9_.\-]+)\1(\s*:\s*)([\"'])((?:[^\"'\\\n]|\\.)*)\4")
# An HTTP header line: the value runs to the end of the line
_HEADER_LINE = re.compile(
    r"(?im)\b(authorization|proxy-authorization|cookie|set-cookie|x-api-key)(\s*:\s*)([^\r\n]+)"
)


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a query parameter, header or field name looks like it holds a credential
    (remembered: the same few names come back in every journal row and audit event)."""
    normal = _SEPARATORS.sub("", name.lower())
    if normal in _NOT_SECRET:
        return False
    return any(word in normal for word in _CONTAINS) or normal.endswith(_ENDS)


def redact_url(url: str) -> str:
    """``url`` with its userinfo and its secret-looking query and fragment values masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            parts.path,
            _mask_assignments(parts.query),
            _mask_assignments(parts.fragment),
        )
    )


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``headers`` with the values of secret-looking names masked."""
    return {name: MASK if is_secret_name(name) else value for name, value in headers.items()}


def redact_text(text: str) -> str:
    """``text`` with userinfo, secret-looking ``name=value`` and ``"name": "value"`` pairs and
    credential header lines masked, wherever they appear."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _HEADER_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _QUOTED_PAIR.sub(_mask_quoted_pair, text)
    return _mask_assignments(text)


def redact(value: Any) -> Any:
    """A copy of a JSON-like ``value``: strings through ``redact_text``, and the values of
    secret-looking keys masked, at any depth."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            key: MASK if isinstance(key, str) and is_secret_name(key) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact_text(text)


def _mask_assignments(text: str) -> str:
    if "=" not in text:
        return text
    return _ASSIGNMENT.sub(
        lambda m: f"{m.group(1)}={MASK}" if is_secret_name(m.group(1)) else m.group(0), text
    )


def _mask_quoted_pair(match: re.Match[str]) -> str:
    quote, name, colon, value_quote = match.group(1, 2, 3, 4)
    if not is_secret_name(name):
        return match.group(0)
    return f"{quote}{name}{quote}{colon}{value_quote}{MASK}{value_quote}"
