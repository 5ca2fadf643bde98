"""Console authentication: API keys, bearer tokens, sign-in sessions, roles; 401 and 403."""

from __future__ import annotations

import re
import time

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.console.tokens import Holder, TokenIssuer
from broker.store import credentials, db
from tests.unit.console.conftest import PASSWORD, Keys

PAGES = ("/workflows", "/workflows/invoice-process", "/instances", "/instances/x", "/requests")
PAGES += ("/dead-letters", "/runtime")


def csrf_of(client: FlaskClient, path: str = "/sign-in") -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).get_data(as_text=True))
    assert found is not None
    return found.group(1)


def sign_in(client: FlaskClient, **form: str) -> int:
    return client.post("/sign-in", data={"csrf_token": csrf_of(client), **form}).status_code


@pytest.mark.parametrize("path", PAGES)
def test_a_page_without_credentials_is_401_with_the_sign_in_form(
    client: FlaskClient, path: str
) -> None:
    response = client.get(path)
    assert response.status_code == 401
    assert 'name="username"' in response.get_data(as_text=True)
    assert "ApiKey" in response.headers["WWW-Authenticate"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_accepts_an_api_key_header(client: FlaskClient, keys: Keys, path: str) -> None:
    assert client.get(path, headers=keys.header("viewer")).status_code in (200, 404)


def test_a_wrong_or_revoked_key_is_401(
    client: FlaskClient, keys: Keys, session_factory: sessionmaker[Session]
) -> None:
    assert client.get("/requests", headers={"Authorization": "ApiKey bk_nope"}).status_code == 401
    assert client.get("/requests", headers={"Authorization": "ApiKey"}).status_code == 401
    with db.transaction(session_factory) as session:
        credentials.remove(session, credentials.KEY, "viewer")
    assert client.get("/requests", headers=keys.header("viewer")).status_code == 401


def test_a_viewer_cannot_pause_replay_or_nothing_changes(
    client: FlaskClient, keys: Keys, invoice_request: str
) -> None:
    assert client.post("/runtime/pause", headers=keys.header("viewer")).status_code == 403
    assert client.post("/runtime/pause", headers=keys.header("designer")).status_code == 403
    assert (
        client.post("/dead-letters/dl-req-1/replay", headers=keys.header("designer")).status_code
        == 403
    )
    runtime = client.get("/runtime", headers=keys.header("viewer")).get_data(as_text=True)
    assert 'id="runtime-state">running' in runtime
    request_page = client.get("/requests/req-1", headers=keys.header("viewer"))
    assert 'id="request-status">Faulted' in request_page.get_data(as_text=True)


def test_the_session_signs_in_with_a_password_and_keeps_the_role(client: FlaskClient) -> None:
    # Given alice, a designer, signs in with the form
    assert sign_in(client, username="alice", password=PASSWORD, next="/requests") == 302
    cookie = client.get_cookie("broker_console_session")
    # Then the cookie is HttpOnly and SameSite=Strict, and pages open with her role
    assert cookie is not None
    assert cookie.http_only
    assert cookie.same_site == "Strict"
    page = client.get("/runtime").get_data(as_text=True)
    assert "alice" in page
    assert "designer" in page
    assert (
        client.post("/runtime/pause", data={"csrf_token": csrf_of(client, "/runtime")}).status_code
        == 403
    )


def test_a_wrong_password_does_not_sign_in(client: FlaskClient) -> None:
    assert sign_in(client, username="alice", password="wrong password!") == 401
    assert sign_in(client, username="nobody", password=PASSWORD) == 401
    assert client.get("/requests").status_code == 401


def test_the_sign_in_form_takes_an_api_key_and_refuses_foreign_next(
    client: FlaskClient, keys: Keys
) -> None:
    response = client.post(
        "/sign-in",
        data={"csrf_token": csrf_of(client), "apiKey": keys.operator, "next": "//evil.example/x"},
    )
    assert response.status_code == 302
    assert response.headers["Location"] == "/workflows"
    assert client.get("/runtime").status_code == 200


def test_forms_under_a_session_need_the_csrf_token(client: FlaskClient, keys: Keys) -> None:
    # Given an operator signed in through the form
    assert sign_in(client, apiKey=keys.operator) == 302
    # When a form is posted without the token (as another site could), it is refused
    assert client.post("/runtime/pause").status_code == 400
    assert "running" in client.get("/runtime").get_data(as_text=True)
    # And with the token it works
    assert (
        client.post("/runtime/pause", data={"csrf_token": csrf_of(client, "/runtime")}).status_code
        == 302
    )
    assert 'id="runtime-state">paused' in client.get("/runtime").get_data(as_text=True)


def test_the_sign_in_form_needs_its_csrf_token(client: FlaskClient, keys: Keys) -> None:
    response = client.post("/sign-in", data={"apiKey": keys.operator})
    assert response.status_code == 400
    assert client.get("/runtime").status_code == 401


def test_sign_out_ends_the_session(client: FlaskClient, keys: Keys) -> None:
    assert sign_in(client, apiKey=keys.viewer) == 302
    assert (
        client.post("/sign-out", data={"csrf_token": csrf_of(client, "/runtime")}).status_code
        == 302
    )
    assert client.get("/runtime").status_code == 401


def test_the_session_ends_when_the_user_is_removed(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    assert sign_in(client, username="alice", password=PASSWORD) == 302
    with db.transaction(session_factory) as session:
        credentials.remove(session, credentials.USER, "alice")
    assert client.get("/requests").status_code == 401


def test_the_api_never_accepts_the_session_cookie(client: FlaskClient, keys: Keys) -> None:
    # A page of another site could make a signed-in browser send the cookie; the API ignores it.
    assert sign_in(client, apiKey=keys.operator) == 302
    response = client.post("/elsa/api/identity/refresh-token")
    assert response.status_code == 401
    assert response.is_json


# identity/login and refresh-token -----------------------------------------------------------------


def test_login_answers_elsas_shape_and_the_token_opens_pages(client: FlaskClient) -> None:
    body = client.post(
        "/elsa/api/identity/login", json={"username": "alice", "password": PASSWORD}
    ).get_json()
    assert set(body) == {"isAuthenticated", "accessToken", "refreshToken"}
    assert body["isAuthenticated"] is True
    bearer = {"Authorization": f"Bearer {body['accessToken']}"}
    assert client.get("/requests", headers=bearer).status_code == 200
    # The refresh token is no access token
    refresh = {"Authorization": f"Bearer {body['refreshToken']}"}
    assert client.get("/requests", headers=refresh).status_code == 401


def test_login_with_wrong_credentials_is_not_authenticated(client: FlaskClient) -> None:
    response = client.post(
        "/elsa/api/identity/login", json={"Username": "alice", "Password": "not it at all"}
    )
    assert response.status_code == 200
    assert response.get_json() == {
        "isAuthenticated": False,
        "accessToken": None,
        "refreshToken": None,
    }


@pytest.mark.parametrize(
    ("body", "field"), [({"password": "x"}, "username"), ({"username": "alice"}, "password")]
)
def test_login_without_a_field_is_400_naming_it(
    client: FlaskClient, body: dict[str, str], field: str
) -> None:
    response = client.post("/elsa/api/identity/login", json=body)
    assert response.status_code == 400
    assert response.get_json()["field"] == field


def test_refresh_token_gives_a_new_pair_and_refuses_access_tokens(client: FlaskClient) -> None:
    body = client.post(
        "/elsa/api/identity/login", json={"username": "alice", "password": PASSWORD}
    ).get_json()
    renewed = client.post(
        "/elsa/api/identity/refresh-token",
        headers={"Authorization": f"Bearer {body['refreshToken']}"},
    )
    assert renewed.status_code == 200
    assert renewed.get_json()["isAuthenticated"] is True
    refused = client.post(
        "/elsa/api/identity/refresh-token",
        headers={"Authorization": f"Bearer {body['accessToken']}"},
    )
    assert refused.status_code == 401


def test_an_expired_or_forged_token_is_401(console_app: Flask, client: FlaskClient) -> None:
    issuer: TokenIssuer = console_app.extensions["broker.console"].tokens
    expired = TokenIssuer("x" * 40, access_ttl=-10, refresh_ttl=1)
    forged = TokenIssuer("y" * 40, access_ttl=60, refresh_ttl=60)
    holder = Holder("user", "alice")
    assert issuer.verify(expired.issue(holder)) is None
    for token in (forged.issue(holder), "not.a.token"):
        assert (
            client.get("/requests", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        )
    assert issuer.verify(issuer.issue(holder)) == holder
    assert time.time() > 0


def test_studio_pages_hand_the_elements_a_token_never_the_key(
    client: FlaskClient, keys: Keys
) -> None:
    page = client.get("/workflows/invoice-process", headers=keys.header("designer"))
    text = page.get_data(as_text=True)
    assert page.status_code == 200
    assert page.headers["Cache-Control"] == "no-store"
    assert "<elsa-workflow-definition-editor" in text
    assert 'definition-id="invoice-process"' in text
    assert 'remote-endpoint="http://localhost/elsa/api"' in text
    token = re.search(r'access-token="([^"]+)"', text)
    assert token is not None
    assert keys.designer not in text
    assert (
        client.get("/requests", headers={"Authorization": f"Bearer {token.group(1)}"}).status_code
        == 200
    )


def test_a_refresh_token_stops_working_when_the_user_is_removed(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    body = client.post(
        "/elsa/api/identity/login", json={"username": "alice", "password": PASSWORD}
    ).get_json()
    with db.transaction(session_factory) as session:
        credentials.remove(session, credentials.USER, "alice")
    refused = client.post(
        "/elsa/api/identity/refresh-token",
        headers={"Authorization": f"Bearer {body['refreshToken']}"},
    )
    assert refused.status_code == 401
    bearer = {"Authorization": f"Bearer {body['accessToken']}"}
    assert client.get("/requests", headers=bearer).status_code == 401
