"""The internal listener in process: callbacks, probes, metrics."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress import create_internal_app
from broker.settings import Settings
from broker.store.models import Request, RequestEvent
from tests.conftest import free_port

SECRET = {"X-Callback-Secret": "s3cret-callback"}


@pytest.fixture
def internal(internal_app: Flask, session_factory: sessionmaker[Session]) -> FlaskClient:
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
            )
        )
    return internal_app.test_client()


def test_callback_completes_the_request_and_records_the_audit_event(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    response = internal.post(
        "/internal/requests/r-1/result",
        headers=SECRET,
        json={"status": "Completed", "result": {"ok": 1}},
    )
    assert response.status_code == 204
    with session_factory() as session:
        record = session.get(Request, "r-1")
        events = session.scalars(select(RequestEvent.event_type)).all()
    assert record is not None
    assert (record.status, record.result, record.completed_at is not None) == (
        "Completed",
        {"ok": 1},
        True,
    )
    # The callback and the terminal status are both in the audit trail
    assert sorted(events) == ["CallbackReceived", "RequestCompleted"]


def test_faulted_callback_keeps_the_error(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    internal.post(
        "/internal/requests/r-1/result",
        headers=SECRET,
        json={"status": "Faulted", "error": "remote failure"},
    )
    with session_factory() as session:
        record = session.get(Request, "r-1")
    assert record is not None
    assert (record.status, record.error_detail) == ("Faulted", "remote failure")


@pytest.mark.parametrize("headers", [{}, {"X-Callback-Secret": "wrong"}, {"X-Callback-Secret": ""}])
def test_callback_without_the_right_secret_is_401_and_changes_nothing(
    internal: FlaskClient, session_factory: sessionmaker[Session], headers: dict[str, str]
) -> None:
    response = internal.post(
        "/internal/requests/r-1/result", headers=headers, json={"status": "Completed"}
    )
    assert response.status_code == 401
    with session_factory() as session:
        record = session.get(Request, "r-1")
    assert record is not None
    assert record.status == "Processing"


def test_empty_configured_secret_rejects_every_callback(
    ingress_settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    app = create_internal_app(
        ingress_settings.replace(callback_secret=""), session_factory=session_factory
    )
    response = app.test_client().post(
        "/internal/requests/r-1/result",
        headers={"X-Callback-Secret": ""},
        json={"status": "Completed"},
    )
    assert response.status_code == 401


def test_terminal_request_refuses_a_second_callback_unchanged(
    internal: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    internal.post(
        "/internal/requests/r-1/result", headers=SECRET, json={"status": "Completed", "result": 1}
    )
    late = internal.post(
        "/internal/requests/r-1/result", headers=SECRET, json={"status": "Faulted", "error": "late"}
    )
    assert late.status_code == 409
    with session_factory() as session:
        record = session.get(Request, "r-1")
    assert record is not None
    assert (record.status, record.result, record.error_detail) == ("Completed", 1, None)


@pytest.mark.parametrize(
    "body",
    [{"status": "Cancelled"}, {"status": "Done"}, {"status": "Faulted", "error": 5}, {"extra": 1}],
)
def test_bad_callback_bodies_are_400(internal: FlaskClient, body: dict[str, object]) -> None:
    response = internal.post("/internal/requests/r-1/result", headers=SECRET, json=body)
    assert response.status_code == 400


def test_callback_for_a_missing_request_is_404(internal: FlaskClient) -> None:
    response = internal.post(
        "/internal/requests/nope/result", headers=SECRET, json={"status": "Completed"}
    )
    assert response.status_code == 404


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
    from broker.ingress.wsgi import LazyApp

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
