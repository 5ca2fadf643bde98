"""The JSON intake of every route that accepts a body: media type, and content JSON cannot hold.

Each refused body must get its 400 or 415 naming the problem (and its JSON path) and leave the
database exactly as it was: no request, audit event, outbox row or bookmark-queue item.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import BadRequest
from broker.runtime.steps import callbacks
from broker.safety.bounded import JsonLimits, decode_json
from broker.store.models import BookmarkQueueItem, OutboxRow, Request, RequestEvent
from broker.web.inputs import is_json_media_type

ClientAs = Callable[[str], FlaskClient]
SECRET = "s3cret-callback"  # the callback secret of ``ingress_settings``


@dataclasses.dataclass(frozen=True)
class Route:
    """One JSON-accepting route: where it is, and the body around the value under test."""

    name: str
    path: str
    template: str  # the body, with {} where the value under test goes
    value_path: str  # the JSONPath of that value
    accepted: int  # the status of a good body


ROUTES = [
    Route("submit", "/requests", '{{"requestType": "OpenType", "payload": {}}}', "$.payload", 202),
    Route(
        "event", "/events/approval", '{{"correlationId": "c-1", "payload": {}}}', "$.payload", 202
    ),
    Route(
        "callback",
        "/internal/requests/r-1/result",
        '{{"status": "Completed", "result": {}}}',
        "$.result",
        204,
    ),
]


@pytest.fixture
def post(
    client_as: ClientAs, internal_app: Flask, session_factory: sessionmaker[Session]
) -> Callable[..., Any]:
    """POST raw bytes to a route, as ClientA on the public listener, or signed as the remote
    executor of request r-1's first dispatch on the internal one (the intake runs after the
    signature is verified: unauthenticated bodies are never parsed)."""
    with session_factory.begin() as session:
        session.add(
            Request(
                id="r-1",
                client_id="ClientA",
                client_key="clienta",
                request_type="OpenType",
                request_type_key="opentype",
                keys={},
                status="Processing",
                remote_attempt=1,
            )
        )
    public, internal = client_as("ClientA"), internal_app.test_client()

    def send(route: Route, body: bytes, content_type: str | None = "application/json") -> Any:
        headers = {"Content-Type": content_type} if content_type is not None else {}
        if route.name == "callback":
            signed = callbacks.sign(callbacks.token_for(SECRET, "r-1", 1), body)
            return internal.post(route.path, data=body, headers={**headers, **signed})
        return public.post(route.path, data=body, headers=headers)

    return send


def written(factory: sessionmaker[Session]) -> dict[str, Any]:
    """What a refused body must not change."""
    with factory() as session:
        counts = {
            model.__name__: session.scalar(select(func.count()).select_from(model))
            for model in (Request, RequestEvent, OutboxRow, BookmarkQueueItem)
        }
        record = session.get(Request, "r-1")
        assert record is not None
        return {**counts, "r-1": (record.status, record.result)}


BAD_VALUES = [
    # (value as JSON text, JSONPath below the route's value, words the error must contain)
    ('{"name": "\\ud800"}', ".name", "lone surrogate (\\ud800)"),
    ('{"a": ["ok", "x\\udfffy"]}', ".a[1]", "lone surrogate (\\udfff)"),
    ('{"\\udc00k": 1}', '["\\udc00k"]', "JSON key contains a lone surrogate"),
    ('{"n": [1, 1e400]}', ".n[1]", "out of range"),
    ('{"deep": {"n": -1e400}}', ".deep.n", "out of range"),
    ('{"k": "a\\u0000b"}', ".k", "NUL character"),
    ('{"x": {"a\\u0000": true}}', '.x["a\\u0000"]', "JSON key contains a NUL character"),
]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
@pytest.mark.parametrize(("value", "below", "problem"), BAD_VALUES)
def test_unstorable_json_is_400_naming_the_problem_and_path_and_writes_nothing(
    post: Callable[..., Any],
    session_factory: sessionmaker[Session],
    route: Route,
    value: str,
    below: str,
    problem: str,
) -> None:
    # Given the database before the call
    before = written(session_factory)
    # When a body holding the value is posted as application/json
    response = post(route, route.template.format(value).encode())
    # Then it is refused with 400 naming the problem and where it is
    body = response.get_json()
    assert response.status_code == 400, body
    assert problem in body["error"]
    assert body["path"] == route.value_path + below
    assert body["path"] in body["error"]
    # And nothing was written
    assert written(session_factory) == before


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_constants_are_400_and_write_nothing(
    post: Callable[..., Any], session_factory: sessionmaker[Session], route: Route, constant: str
) -> None:
    before = written(session_factory)
    response = post(route, route.template.format(f'{{"n": {constant}}}').encode())
    assert response.status_code == 400
    assert f"{constant} is not valid JSON" in response.get_json()["error"]
    assert written(session_factory) == before


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonp", "text/json"],
)
def test_a_body_that_is_not_declared_json_is_415_and_writes_nothing(
    post: Callable[..., Any],
    session_factory: sessionmaker[Session],
    route: Route,
    content_type: str | None,
) -> None:
    # Given a body that is valid JSON, declared as something else (or not declared)
    before = written(session_factory)
    response = post(route, route.template.format("{}").encode(), content_type)
    # Then it is not parsed: 415 with a JSON error naming the header, and nothing is written
    assert response.status_code == 415
    assert response.get_json()["code"] == "unsupported_media_type"
    assert "Content-Type must be application/json" in response.get_json()["error"]
    assert written(session_factory) == before


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"],
)
def test_json_media_types_are_parsed(
    post: Callable[..., Any], route: Route, content_type: str
) -> None:
    response = post(route, route.template.format('{"ok": "pa\\u00efred \\ud83d\\ude00"}').encode())
    assert response.status_code == route.accepted, response.get_data(as_text=True)
    again = post(route, route.template.format("{}").encode(), content_type)
    assert again.status_code in (route.accepted, 409)  # a second callback finds it finished


def test_an_event_name_with_a_control_character_is_refused(client_as: ClientAs) -> None:
    response = client_as("ClientA").post("/events/a%00b", json={"correlationId": "c-1"})
    assert response.status_code == 400
    assert response.get_json()["field"] == "name"


@pytest.mark.parametrize(
    ("mimetype", "expected"),
    [
        ("application/json", True),
        ("application/problem+json", True),
        ("application/vnd.example.v1+json", True),
        ("text/plain", False),
        ("", False),
        ("+json", False),
        ("application/json-seq", False),
    ],
)
def test_json_media_types(mimetype: str, expected: bool) -> None:
    assert is_json_media_type(mimetype) is expected


def test_a_valid_surrogate_pair_is_one_character_and_accepted() -> None:
    assert decode_json(b'{"e": "\\ud83d\\ude00"}', JsonLimits(None, 4, 4)) == {"e": "\U0001f600"}


def test_invalid_utf8_is_400() -> None:
    with pytest.raises(BadRequest, match="Malformed JSON"):
        decode_json(b'{"a": "\xed\xa0\x80"}', JsonLimits(None, 4, 4))
