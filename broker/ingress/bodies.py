"""Request bodies read whole, within ``BROKER_MAX_BODY_BYTES``, before the app sees the request,
so an early answer never resets the connection (docs/design.md, section 1)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from broker.errors import BadRequest, PayloadTooLarge
from broker.ingress import metrics
from broker.safety.bounded import parse_int

logger = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

#: bodies up to this many times the limit are read to the end before the 413 (64 MiB by default)
DRAIN_FACTOR = 64
#: seconds a client gets to finish sending a body that is refused
DRAIN_SECONDS = 10.0
READ_SIZE = 65536
#: the largest Content-Length taken as a number (a larger one is refused as too large anyway)
MAX_CONTENT_LENGTH = 2**62


class BodyLimit:
    """WSGI middleware: the body read within the limit, or a ``413`` the client can read."""

    def __init__(self, app: WsgiApp, limit: int, listener: str) -> None:
        self.app = app
        self.limit = limit
        self.listener = listener

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        declared = _content_length(environ)
        if declared is None and not chunked:
            return self.app(environ, start_response)  # no body (or a malformed length: the app's)
        stream = environ["wsgi.input"]
        most = self.limit * DRAIN_FACTOR
        if declared is not None and declared > self.limit and not chunked:
            drained = declared <= most and _discard(environ, declared)
            return self._too_large(environ, start_response, drained)
        body = _read(stream, self.limit + 1 if chunked else min(declared or 0, self.limit))
        if len(body) > self.limit:
            return self._too_large(environ, start_response, _discard(environ, most - len(body)))
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.input_terminated"] = True
        return self.app(environ, start_response)

    def _too_large(
        self, environ: dict[str, Any], start_response: StartResponse, drained: bool
    ) -> Iterable[bytes]:
        error = PayloadTooLarge(f"Request body exceeds {self.limit} bytes", limit=self.limit)
        payload = json.dumps(error.to_dict()).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        if not drained:
            headers.append(("Connection", "close"))
        logger.info(
            "%s %s answered 413: body over %d bytes%s",
            environ.get("REQUEST_METHOD"),
            environ.get("PATH_INFO"),
            self.limit,
            "" if drained else " (not read to the end: connection closed)",
        )
        metrics.RESPONSES.labels(listener=self.listener, status="4xx").inc()
        start_response("413 Request Entity Too Large", headers)
        return [payload]


def _content_length(environ: dict[str, Any]) -> int | None:
    raw = str(environ.get("CONTENT_LENGTH") or "").strip()
    try:
        return parse_int(raw, "Content-Length", low=0, high=MAX_CONTENT_LENGTH)
    except BadRequest:
        return None  # absent or malformed: the app's to answer


def _read(stream: Any, size: int) -> bytes:
    """Up to ``size`` bytes of ``stream`` (fewer only at its end)."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        part = stream.read(min(READ_SIZE, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _discard(environ: dict[str, Any], most: int) -> bool:
    """Read and drop the rest of the body, at most ``most`` bytes, within ``DRAIN_SECONDS``;
    answers whether its end was reached (else the connection must close)."""
    stream = environ["wsgi.input"]
    sock = environ.get("gunicorn.socket")
    prior = sock.gettimeout() if sock is not None else None
    deadline = time.monotonic() + DRAIN_SECONDS
    read = 0
    try:
        while read <= most:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if sock is not None:
                sock.settimeout(remaining)
            part = stream.read(READ_SIZE)
            if not part:
                return True
            read += len(part)
        return False
    except OSError:  # a timeout, or the client went away
        return False
    finally:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.settimeout(prior)
