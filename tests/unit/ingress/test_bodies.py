"""The body limit in front of both listeners: bodies read whole, or a 413 the client can read."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from broker.ingress import bodies
from broker.ingress.bodies import BodyLimit

LIMIT = 100


class Recorder:
    """The app behind the middleware: remembers the body it was handed."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.bodies.append(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
        start_response("204 No Content", [])
        return []


def call(
    body: bytes, *, declared: int | None = None, chunked: bool = False
) -> tuple[str, dict[str, str], bytes, Recorder, io.BytesIO]:
    app = Recorder()
    stream = io.BytesIO(body)
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "PATH_INFO": "/x", "wsgi.input": stream}
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    else:
        environ["CONTENT_LENGTH"] = str(len(body) if declared is None else declared)
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = status, dict(headers)

    out = b"".join(BodyLimit(app, LIMIT, "public")(environ, start_response))
    return seen["status"], seen["headers"], out, app, stream


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_within_the_limit_reaches_the_app_whole(chunked: bool) -> None:
    status, _, _, app, stream = call(b"x" * LIMIT, chunked=chunked)
    assert status.startswith("204")
    assert app.bodies == [b"x" * LIMIT]
    assert stream.tell() == LIMIT  # read up front: nothing left for the server to reset over


@pytest.mark.parametrize("chunked", [False, True])
def test_an_oversized_body_is_read_to_its_end_and_answered_413_json(chunked: bool) -> None:
    status, headers, out, app, stream = call(b"x" * (LIMIT * 5), chunked=chunked)
    assert status.startswith("413")
    assert json.loads(out) == {
        "error": f"Request body exceeds {LIMIT} bytes",
        "code": "payload_too_large",
        "limit": LIMIT,
    }
    assert headers["Content-Type"] == "application/json"
    assert "Connection" not in headers  # read to the end: the connection stays usable
    assert app.bodies == []
    assert stream.tell() == LIMIT * 5


def test_a_body_too_large_to_discard_is_413_with_connection_close() -> None:
    # Given a declared length beyond what is worth reading
    declared = LIMIT * bodies.DRAIN_FACTOR + 1
    status, headers, _, app, stream = call(b"x" * 10, declared=declared)
    # Then it is refused unread, and the connection closes after the answer
    assert status.startswith("413")
    assert headers["Connection"] == "close"
    assert stream.tell() == 0
    assert app.bodies == []


def test_a_chunked_body_that_never_ends_within_the_cap_closes_the_connection() -> None:
    status, headers, _, _, _ = call(b"x" * (LIMIT * bodies.DRAIN_FACTOR + 2), chunked=True)
    assert status.startswith("413")
    assert headers["Connection"] == "close"


def test_a_request_without_a_body_passes_untouched() -> None:
    app_environs: list[dict[str, Any]] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        app_environs.append(environ)
        start_response("200 OK", [])
        return [b"ok"]

    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    out = BodyLimit(app, LIMIT, "public")(environ, lambda status, headers: None)
    assert list(out) == [b"ok"]
    assert "CONTENT_LENGTH" not in app_environs[0]
