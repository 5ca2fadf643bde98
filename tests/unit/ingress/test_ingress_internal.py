"""The internal listener in process: signed remote callbacks, probes, metrics."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.test import TestResponse

from broker.runtime.steps import callbacks
from broker.settings import Settings
from broker.store.models import Request, RequestEvent
from broker.wiring.web import create_internal_app
from tests.support.ingress import signed_callback
from tests.support.services import PROJECT_ROOT, free_port

SECRET = "s3cret-callback"  # the callback secret of ``ingress_settings``
EXAMPLE = PROJECT_ROOT / "deploy" / "examples" / "remote_callback.py"


@pytest.fixture
def internal(internal_app: Flask, session_factory: sessionmaker[Session]) -> FlaskClient:
    # r-1 was dispatched once to a remote executor; local-1 runs on the broker's own workers
    with session_factory.begin() as session:
        for request_id, attempt in (("r-1", 1), ("local-1", None)):
            session.add(
                Request(
                    id=request_id,
                    client_id="ClientA",
                    client_key="clienta",
                    request_type="OpenType",
                    request_type_key="opentype",
                    keys={},
                    status="Processing",
                    remote_attempt=attempt,
                )
            )
    return internal_app.test_client()


def post(
    client: FlaskClient,
    document: Any,
    *,
    request_id: str = "r-1",
    secret: str = SECRET,
    attempt: int = 1,
    msg_id: str | None = None,
    timestamp: dt.datetime | None = None,
) -> TestResponse:
    body, headers = signed_callback(
        secret, request_id, attempt, document, msg_id=msg_id, timestamp=timestamp
    )
    return client.post(f"/internal/requests/{request_id}/result", data=body, headers=headers)


def state(factory: sessionmaker[Session], request_id: str = "r-1") -> tuple[Any, ...]:
    with factory() as session:
        record = session.get(Request, request_id)
        events = session.scalar(
            select(func.count())
            .select_from(RequestEvent)
            .where(RequestEvent.request_id == request_id)
        )
    assert record is not None
    return record.status, record.result, record.error_detail, events


def test_signed_callback_completes_the_request_and_records_the_audit_event(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    response = post(internal, {"status": "Completed", "result": {"ok": 1}}, msg_id="msg_1")
    assert response.status_code == 204
    with session_factory() as session:
        record = session.get(Request, "r-1")
        events = session.scalars(select(RequestEvent)).all()
    assert record is not None
    assert (record.status, record.result, record.completed_at is not None) == (
        "Completed",
        {"ok": 1},
        True,
    )
    # The callback and the terminal status are both in the audit trail, with the message id
    assert sorted(e.event_type for e in events) == ["CallbackReceived", "RequestCompleted"]
    received = next(e for e in events if e.event_type == "CallbackReceived")
    assert received.properties == {"status": "Completed", "attempt": 1, "webhookId": "msg_1"}


def test_faulted_callback_keeps_the_error(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    assert post(internal, {"status": "Faulted", "error": "remote failure"}).status_code == 204
    assert state(session_factory)[::2] == ("Faulted", "remote failure")


def test_the_standard_library_example_signs_a_callback_the_broker_accepts(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    # Given the remote side's example, holding the token the dispatch body carried
    spec = importlib.util.spec_from_file_location("remote_callback", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    token = callbacks.token_for(SECRET, "r-1", 1)
    body = json.dumps({"status": "Completed", "result": {"via": "stdlib"}}).encode()
    # When it signs the body with the standard library alone
    headers = example.signature_headers(token, body)
    response = internal.post(
        "/internal/requests/r-1/result",
        data=body,
        headers={"Content-Type": "application/json", **headers},
    )
    # Then the broker accepts it
    assert response.status_code == 204
    assert state(session_factory)[:2] == ("Completed", {"via": "stdlib"})


def _forged_headers() -> list[dict[str, str]]:
    body = json.dumps({"status": "Completed", "result": {"forged": True}}).encode()
    good = callbacks.sign(callbacks.token_for(SECRET, "r-1", 1), body)
    other = callbacks.sign(callbacks.token_for("a guess", "r-1", 1), body)
    return [
        {},  # unsigned
        {"X-Callback-Secret": SECRET},  # the old scheme: the secret itself is no credential
        other,  # signed with a token of another secret
        callbacks.sign(callbacks.token_for(SECRET, "other-request", 1), body),  # another request
        {**good, "webhook-signature": "v1,AAAA"},  # wrong signature
        {**good, "webhook-signature": "garbage"},  # malformed signature list
        {k: v for k, v in good.items() if k != "webhook-timestamp"},  # a header missing
        {**good, "webhook-id": "msg_other"},  # the signature covers the id
    ]


@pytest.mark.parametrize("headers", _forged_headers())
def test_forged_callback_is_401_and_changes_nothing(
    internal: FlaskClient, session_factory: sessionmaker[Session], headers: dict[str, str]
) -> None:
    before = state(session_factory)
    body = json.dumps({"status": "Completed", "result": {"forged": True}}).encode()
    response = internal.post(
        "/internal/requests/r-1/result",
        data=body,
        headers={"Content-Type": "application/json", **headers},
    )
    assert response.status_code == 401
    assert response.get_json()["code"] == "unauthenticated"
    assert state(session_factory) == before == ("Processing", None, None, 0)


def test_a_body_changed_after_signing_is_401(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    _, headers = signed_callback(SECRET, "r-1", 1, {"status": "Faulted", "error": "x"})
    tampered = json.dumps({"status": "Completed", "result": {"forged": True}})
    response = internal.post("/internal/requests/r-1/result", data=tampered, headers=headers)
    assert response.status_code == 401
    assert state(session_factory)[0] == "Processing"


def test_replayed_callback_is_401_and_changes_nothing(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    # Given a callback the broker accepted
    sent_at = dt.datetime.now(dt.UTC)
    body, headers = signed_callback(
        SECRET, "r-1", 1, {"status": "Completed", "result": 1}, msg_id="msg_once", timestamp=sent_at
    )
    assert (
        internal.post("/internal/requests/r-1/result", data=body, headers=headers).status_code
        == 204
    )
    after_first = state(session_factory)
    # When the same message arrives again, byte for byte, within the tolerance
    replay = internal.post("/internal/requests/r-1/result", data=body, headers=headers)
    # Then it is refused as a replay and nothing changes
    assert replay.status_code == 401
    assert "replayed" in replay.get_json()["error"]
    assert state(session_factory) == after_first


def test_replayed_webhook_id_after_a_redispatch_is_401(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    # Given a request whose first callback (Faulted) was accepted, then replayed by an operator
    # and dispatched again (attempt 2)
    assert post(internal, {"status": "Faulted", "error": "x"}, msg_id="msg_a").status_code == 204
    with session_factory.begin() as session:
        record = session.get(Request, "r-1")
        assert record is not None
        record.status, record.remote_attempt = "Processing", 2
    # When a message with the id already accepted arrives, even signed for the new attempt
    again = post(internal, {"status": "Completed", "result": 2}, attempt=2, msg_id="msg_a")
    # Then it is a replay
    assert again.status_code == 401
    assert state(session_factory)[0] == "Processing"


@pytest.mark.parametrize("minutes", [-1, 1, -60 * 24])
def test_a_timestamp_outside_five_minutes_is_401(
    internal: FlaskClient, session_factory: sessionmaker[Session], minutes: int
) -> None:
    # Given a callback sent more than the tolerance (5 minutes) ago, or ahead
    beyond = callbacks.TOLERANCE + dt.timedelta(minutes=abs(minutes))
    sent_at = dt.datetime.now(dt.UTC) + (beyond if minutes > 0 else -beyond)
    response = post(internal, {"status": "Completed", "result": 1}, timestamp=sent_at)
    assert response.status_code == 401
    assert "timestamp" in response.get_json()["error"]
    assert state(session_factory) == ("Processing", None, None, 0)


def test_a_timestamp_within_five_minutes_is_accepted(internal: FlaskClient) -> None:
    sent_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=4)
    assert post(internal, {"status": "Completed"}, timestamp=sent_at).status_code == 204


@pytest.mark.parametrize("request_id", ["local-1", "nope"])
def test_callback_for_a_request_never_dispatched_remotely_is_401_and_changes_nothing(
    internal: FlaskClient, session_factory: sessionmaker[Session], request_id: str
) -> None:
    # Given a request run by the broker's own workers (or no request at all), and a callback
    # signed as if it had been dispatched (a token exists for no attempt of it)
    response = post(internal, {"status": "Completed", "result": 1}, request_id=request_id)
    # Then it is refused: no token was ever issued for it
    assert response.status_code == 401
    assert "No callback is expected" in response.get_json()["error"]
    if request_id == "local-1":
        assert state(session_factory, "local-1") == ("Processing", None, None, 0)


def test_callback_of_an_earlier_dispatch_attempt_is_401(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    # Given a request dispatched a second time
    with session_factory.begin() as session:
        record = session.get(Request, "r-1")
        assert record is not None
        record.remote_attempt = 2
    # When the holder of the first attempt's token calls back
    stale = post(internal, {"status": "Completed", "result": "stale"}, attempt=1)
    # Then it is refused, and the current attempt's token works
    assert stale.status_code == 401
    assert state(session_factory)[0] == "Processing"
    assert post(internal, {"status": "Completed", "result": "now"}, attempt=2).status_code == 204


def test_rotation_accepts_tokens_of_the_previous_secret_until_it_is_dropped(
    ingress_settings: Settings, session_factory: sessionmaker[Session], internal: FlaskClient
) -> None:
    # Given a rotation: new current secret, the old one still live as the previous
    rotating = ingress_settings.replace(
        callback_secret="new-secret", callback_secret_previous=SECRET
    )
    app = create_internal_app(rotating, session_factory=session_factory).test_client()
    # Then a callback signed with a token minted under the old secret still passes
    old = post(app, {"status": "Completed", "result": "old"}, secret=SECRET)
    assert old.status_code == 204
    assert state(session_factory)[:2] == ("Completed", "old")
    # And once the rotation is over (no previous secret) the old tokens are refused
    with session_factory.begin() as session:
        record = session.get(Request, "local-1")
        assert record is not None
        record.remote_attempt = 1
    done = create_internal_app(
        ingress_settings.replace(callback_secret="new-secret"), session_factory=session_factory
    ).test_client()
    assert post(done, {"status": "Completed"}, request_id="local-1").status_code == 401
    fresh = post(done, {"status": "Completed"}, request_id="local-1", secret="new-secret")
    assert fresh.status_code == 204


def test_empty_configured_secret_rejects_every_callback(
    ingress_settings: Settings, session_factory: sessionmaker[Session], internal: FlaskClient
) -> None:
    app = create_internal_app(
        ingress_settings.replace(callback_secret="", callback_secret_previous=SECRET),
        session_factory=session_factory,
    )
    response = post(app.test_client(), {"status": "Completed"})
    assert response.status_code == 401
    assert state(session_factory)[0] == "Processing"


def test_terminal_request_refuses_a_second_callback_unchanged(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    post(internal, {"status": "Completed", "result": 1})
    late = post(internal, {"status": "Faulted", "error": "late"})
    assert late.status_code == 409
    assert state(session_factory)[:3] == ("Completed", 1, None)


@pytest.mark.parametrize(
    "body",
    [{"status": "Cancelled"}, {"status": "Done"}, {"status": "Faulted", "error": 5}, {"extra": 1}],
)
def test_bad_callback_bodies_are_400(internal: FlaskClient, body: dict[str, object]) -> None:
    assert post(internal, body).status_code == 400


def test_healthz_and_readyz_answer_ok(internal: FlaskClient) -> None:
    assert internal.get("/healthz").get_json() == {"status": "ok"}
    ready = internal.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json()["checks"] == {"database": "ok", "transport": "ok"}


def test_readyz_names_what_is_down(ingress_settings: Settings) -> None:
    # Given a database server and a Redis server that do not answer
    settings = ingress_settings.replace(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/broker",
        queue_url=f"redis://127.0.0.1:{free_port()}/0",
    )
    response = create_internal_app(settings).test_client().get("/readyz")
    assert response.status_code == 503
    assert response.get_json()["down"] == ["database", "transport"]


def test_metrics_are_prometheus_text(internal: FlaskClient) -> None:
    response = internal.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    assert "broker_requests_accepted" in response.get_data(as_text=True)


def test_lazy_app_answers_503_while_it_cannot_be_built_and_recovers() -> None:
    from broker.web.lazy import LazyApp

    attempts: list[int] = []

    def build() -> Flask:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("database down")
        app = Flask("ok")
        app.add_url_rule("/", "root", lambda: "up")
        return app

    lazy = LazyApp(build)
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        statuses.append(status)

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "SERVER_NAME": "x",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
    }
    first = b"".join(lazy(dict(environ), start_response))
    second = b"".join(lazy(dict(environ), start_response))
    assert statuses[0].startswith("503")
    assert b"try again" in first
    assert statuses[1].startswith("200")
    assert second == b"up"
