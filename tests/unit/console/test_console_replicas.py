"""Console replicas behind one Service: with the same ``BROKER_CONSOLE_SECRET`` (and the same
database, where keys and users live) any replica accepts what another issued: bearer tokens,
refresh tokens, sign-in sessions and their CSRF tokens. Readiness names the part that is down."""

from __future__ import annotations

from flask import Flask
from sqlalchemy.orm import Session, sessionmaker

from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.wiring.web import create_console_app as create_app
from tests.unit.console.conftest import PASSWORD, Keys
from tests.unit.console.test_console_auth import csrf_of

SHARED = "a-shared-console-secret-of-forty-characters!"


def replica(
    settings: Settings, factory: sessionmaker[Session], registry: WorkflowRegistry, secret: str
) -> Flask:
    return create_app(
        settings.replace(console_secret=secret), session_factory=factory, registry=registry
    )


def test_two_replicas_with_the_same_secret_accept_each_others_tokens_and_sessions(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
    keys: Keys,
) -> None:
    # Given two console replicas sharing the secret, and a third with another one
    first = replica(console_settings, session_factory, registry, SHARED)
    second = replica(console_settings, session_factory, registry, SHARED)
    other = replica(console_settings, session_factory, registry, SHARED.upper())
    # When alice logs in on the first
    login = first.test_client().post(
        "/elsa/api/identity/login", json={"username": "alice", "password": PASSWORD}
    )
    tokens = login.get_json()
    assert tokens["isAuthenticated"] is True
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    refresh = {"Authorization": f"Bearer {tokens['refreshToken']}"}
    # Then the second accepts her access token and refreshes with her refresh token
    assert (
        second.test_client().get("/elsa/api/workflow-definitions", headers=bearer).status_code
        == 200
    )
    assert (
        second.test_client().post("/elsa/api/identity/refresh-token", headers=refresh).status_code
        == 200
    )
    # And a replica with another secret refuses both
    assert (
        other.test_client().get("/elsa/api/workflow-definitions", headers=bearer).status_code == 401
    )
    assert (
        other.test_client().post("/elsa/api/identity/refresh-token", headers=refresh).status_code
        == 401
    )
    # When an operator signs in through the first replica's form
    browser = first.test_client()
    signed = browser.post(
        "/sign-in", data={"csrf_token": csrf_of(browser), "apiKey": keys.operator}
    )
    assert signed.status_code == 302
    csrf = csrf_of(browser, "/runtime")  # the form's token (its secret half rides in the session)
    cookie = browser.get_cookie("broker_console_session")
    assert cookie is not None
    # Then the second replica opens pages with that session and accepts its CSRF token
    moved = second.test_client()
    moved.set_cookie("broker_console_session", cookie.value)
    assert moved.get("/runtime").status_code == 200
    assert moved.post("/runtime/pause", data={"csrf_token": csrf}).status_code == 302
    assert moved.post("/runtime/resume", data={"csrf_token": csrf}).status_code == 302
    # And the replica with another secret does not know the session
    stranger = other.test_client()
    stranger.set_cookie("broker_console_session", cookie.value)
    assert stranger.get("/runtime").status_code == 401


def test_console_readiness_names_the_transport_when_it_is_down(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> None:
    # Given a console whose transport is a closed port
    down = console_settings.replace(queue_url="redis://127.0.0.1:1/0")
    app = create_app(down, session_factory=session_factory, registry=registry)
    # When the probe asks, without credentials
    answer = app.test_client().get("/readyz")
    # Then it is 503 naming the transport, while liveness stays ok
    assert answer.status_code == 503
    assert answer.get_json()["down"] == ["transport"]
    assert answer.get_json()["checks"]["database"] == "ok"
    assert app.test_client().get("/healthz").status_code == 200
    # And with a reachable transport it is ready
    ready = create_app(console_settings, session_factory=session_factory, registry=registry)
    assert ready.test_client().get("/readyz").status_code == 200
