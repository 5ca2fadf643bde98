"""``GET /elsa/api/simulate-response``: Elsa.Resilience's endpoint for trying a resilience
strategy; each call of a caller's session answers the next status code it named."""

from __future__ import annotations

import dataclasses
import hashlib
import http
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import current_app, jsonify, request
from flask.typing import ResponseReturnValue

from broker.console.api.base import blueprint
from broker.console.roles import current, require
from broker.errors import BadRequest, RateLimited
from broker.web.context import services

EXTENSION = "broker.simulate_response"
DEFAULT_CODES = (429, 503, 200)


@dataclasses.dataclass
class Sessions:
    """The open sessions: their next code's index and when they expire."""

    capacity: int
    ttl: float
    clock: Callable[[], float] = time.monotonic
    _open: dict[str, tuple[int, float]] = dataclasses.field(default_factory=dict)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def next_index(self, key: str, count: int) -> int | None:
        """The index of the code to answer now (the session moves on, or ends at its last
        code); None when a new session would pass the capacity."""
        now = self.clock()
        with self._lock:
            for stale in [k for k, (_, expires) in self._open.items() if expires <= now]:
                del self._open[stale]
            index = min(self._open[key][0], count - 1) if key in self._open else 0
            if index + 1 >= count:
                self._open.pop(key, None)
                return index
            if key not in self._open and len(self._open) >= self.capacity:
                return None
            self._open[key] = (index + 1, now + self.ttl)
            return index


def sessions() -> Sessions:
    found = current_app.extensions.get(EXTENSION)
    if found is None:
        settings = services().settings
        found = Sessions(
            capacity=settings.simulate_response_sessions,
            ttl=settings.simulate_response_session_ttl,
        )
        current_app.extensions[EXTENSION] = found
    return found


def _codes(raw: str | None, max_length: int, max_count: int) -> tuple[int, ...]:
    if raw is None or not raw.strip():
        return DEFAULT_CODES
    if len(raw) > max_length:
        raise BadRequest(f"'codes' must be {max_length} characters or fewer", field="codes")
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        raise BadRequest("'codes' must be valid JSON", field="codes") from None
    if not isinstance(parsed, list):
        raise BadRequest("'codes' must be a JSON array of HTTP status codes", field="codes")
    if len(parsed) > max_count:
        raise BadRequest(f"'codes' may name at most {max_count} status codes", field="codes")
    valid = all(isinstance(c, int) and not isinstance(c, bool) and 100 <= c <= 599 for c in parsed)
    if not valid:
        raise BadRequest("'codes' must hold HTTP status codes from 100 to 599", field="codes")
    if not parsed:
        raise BadRequest("'codes' must name at least one status code", field="codes")
    return tuple(parsed)


def _session_key(session_id: str) -> str:
    """The caller's session: their identity and the id they chose, hashed together."""
    principal = current()
    who = f"{principal.kind}:{principal.name}" if principal is not None else "anonymous"
    return hashlib.sha256(f"{who}\0{session_id}".encode()).hexdigest()


def _message(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return f"Status Code {code}"


@blueprint.get("/simulate-response")
@require("viewer")
def simulate_response() -> ResponseReturnValue:
    settings = services().settings
    session_id = request.args.get("sessionId") or "default"
    if len(session_id) > settings.simulate_response_max_session_id:
        raise BadRequest(
            f"'sessionId' must be {settings.simulate_response_max_session_id} characters or fewer",
            field="sessionId",
        )
    codes = _codes(
        request.args.get("codes"),
        settings.simulate_response_max_codes_length,
        settings.simulate_response_max_codes,
    )
    index = sessions().next_index(_session_key(session_id), len(codes))
    if index is None:
        raise RateLimited(
            "The most simulate-response sessions "
            f"({settings.simulate_response_sessions}) are open; try again later",
            limit="simulate-response sessions",
            rate=str(settings.simulate_response_sessions),
            retry_after=max(1, int(settings.simulate_response_session_ttl)),
        )
    code = codes[index]
    return jsonify({"message": _message(code)}), code
