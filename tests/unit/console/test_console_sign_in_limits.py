"""Sign-in is throttled per user name and per address (issue 34, finding 7): over the rate, a
``429`` with ``Retry-After``, decided before any password is hashed, and counted in the shared
rate-limit store so that every console process sees the same count."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.store import credentials
from broker.wiring.web import create_console_app as create_app
from tests.unit.console.conftest import PASSWORD, Keys

LOGIN = "/elsa/api/identity/login"
#: BROKER_RATE_LIMIT_SIGN_IN's default, 10/minute
RATE = 10


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The user names whose password was checked (each check costs a scrypt hash)."""
    seen: list[str] = []
    real = credentials.verify_user

    def counting(session: Session, name: str, password: str) -> Any:
        seen.append(name)
        return real(session, name, password)

    monkeypatch.setattr(credentials, "verify_user", counting)
    return seen


WRONG = "wrong password!"


def login(client: FlaskClient, username: str, password: str | None = None) -> Any:
    return client.post(LOGIN, json={"username": username, "password": password or WRONG})


def from_address(app: Flask, address: str) -> FlaskClient:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def test_login_attempts_over_the_rate_are_429_before_any_hashing(
    console_app: Flask, keys: Keys, hashed: list[str]
) -> None:
    # Given RATE failed attempts at alice's password, each from its own address
    for n in range(RATE):
        assert login(from_address(console_app, f"10.0.0.{n}"), "alice").status_code == 200
    assert len(hashed) == RATE
    # When one more comes, even with the right password
    refused = login(from_address(console_app, "10.0.1.1"), "alice", PASSWORD)
    # Then it is refused with 429 and when to try again, and no password was hashed for it
    assert refused.status_code == 429, refused.get_json()
    assert int(refused.headers["Retry-After"]) >= 1
    assert "Too many sign-in attempts" in refused.get_json()["error"]
    assert len(hashed) == RATE
    # ... while another user is not held back by alice's bucket
    assert login(from_address(console_app, "10.0.1.2"), "bob").status_code == 200


def test_attempts_from_one_address_are_limited_whatever_the_name(
    console_app: Flask, keys: Keys, hashed: list[str]
) -> None:
    client = from_address(console_app, "192.0.2.7")
    for n in range(RATE):
        assert login(client, f"user{n}").status_code == 200
    refused = login(client, "someone-else")
    assert refused.status_code == 429
    assert refused.headers["Retry-After"]
    assert len(hashed) == RATE


def test_the_sign_in_form_is_throttled_too(console_app: Flask, keys: Keys) -> None:
    client = from_address(console_app, "198.51.100.9")
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/sign-in").get_data(True))
    assert token is not None
    form = {"username": "alice", "password": "not it at all", "csrf_token": token.group(1)}
    for _ in range(RATE):
        assert client.post("/sign-in", data=form).status_code == 401
    refused = client.post("/sign-in", data=form)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"]
    assert "Too many sign-in attempts" in refused.get_data(as_text=True)


def test_console_processes_sharing_the_store_share_the_count(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
    keys: Keys,
) -> None:
    # Given two console apps (two processes' worth) on the same rate-limit store
    first, second = (
        create_app(console_settings, session_factory=session_factory, registry=registry)
        for _ in range(2)
    )
    # When alice's attempts are spread over both
    codes = [
        login(from_address(app, f"203.0.113.{n}"), "alice").status_code
        for n, app in enumerate([first, second] * (RATE // 2) + [first])
    ]
    # Then the one over the rate is refused, whichever process it reached
    assert codes == [200] * RATE + [429]
