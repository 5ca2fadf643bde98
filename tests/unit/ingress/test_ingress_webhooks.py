"""``/webhooks`` in process: registration through the guard, own endpoints only, the secret shown
once, the delivery log; a submission's ``callbackUrl``; webhook dead letters in the admin API."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime import webhooks
from broker.settings import Settings
from broker.store.models import Request, WebhookEndpoint
from broker.wiring.web import create_public_app
from tests.support.doubles import RecordingPublisher
from tests.support.ingress import INVOICE_KEYS, Pki

ClientAs = Callable[[str], FlaskClient]
LOOPBACK = "http://127.0.0.1:8099/hook"


def endpoints(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(WebhookEndpoint)) or 0)


def make_app(
    settings: Settings,
    factory: sessionmaker[Session],
    pki: Pki,
    publisher: RecordingPublisher,
    **changes: Any,
) -> ClientAs:
    app: Flask = create_public_app(
        settings.replace(**changes), session_factory=factory, publisher=publisher
    )

    def client_as(name: str) -> FlaskClient:
        from broker.ingress.auth import PEER_CERT

        client = app.test_client()
        client.environ_base[PEER_CERT] = pki.der(name)  # type: ignore[assignment]
        return client

    return client_as


@pytest.fixture
def allowlisted(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    publisher: RecordingPublisher,
) -> ClientAs:
    return make_app(
        ingress_settings, session_factory, pki, publisher, http_allowlist=("127.0.0.1:8099",)
    )


def test_a_loopback_url_is_refused_without_the_allowlist_and_nothing_is_stored(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    for url in (LOOPBACK, "http://192.168.1.10/hook", "http://[::1]:8099/hook"):
        response = client_as("ClientA").post("/webhooks", json={"url": url})
        assert response.status_code == 400, url
        assert response.get_json()["field"] == "url"
        assert "refused" in response.get_json()["error"]
    assert endpoints(session_factory) == 0


def test_an_allowlisted_url_is_registered_and_its_secret_shown_once(
    allowlisted: ClientAs,
) -> None:
    created = allowlisted("ClientA").post(
        "/webhooks", json={"url": LOOPBACK, "events": ["request.completed", "request.processing"]}
    )
    assert created.status_code == 201
    body = created.get_json()
    assert body["secret"].startswith("whsec_")
    assert created.headers["Location"] == f"/webhooks/{body['id']}"
    assert body["events"] == ["request.completed", "request.processing"]
    listed = allowlisted("ClientA").get("/webhooks").get_json()["items"]
    assert [e["id"] for e in listed] == [body["id"]]
    assert "secret" not in listed[0]
    assert body["secret"] not in json.dumps(listed)
    one = allowlisted("ClientA").get(f"/webhooks/{body['id']}").get_json()
    assert "secret" not in one
    assert one["enabled"] is True
    assert one["disabled"] is None


def test_a_client_sees_and_deletes_only_its_own_endpoints(allowlisted: ClientAs) -> None:
    endpoint_id = allowlisted("ClientA").post("/webhooks", json={"url": LOOPBACK}).get_json()["id"]
    other = allowlisted("ClientB")
    assert other.get("/webhooks").get_json()["items"] == []
    assert other.get(f"/webhooks/{endpoint_id}").status_code == 404
    assert other.get(f"/webhooks/{endpoint_id}/deliveries").status_code == 404
    assert other.delete(f"/webhooks/{endpoint_id}").status_code == 404
    assert allowlisted("ClientA").get(f"/webhooks/{endpoint_id}/deliveries").get_json() == {
        "items": []
    }
    assert allowlisted("ClientA").delete(f"/webhooks/{endpoint_id}").status_code == 204
    assert allowlisted("ClientA").get("/webhooks").get_json()["items"] == []


def test_bad_bodies_are_refused_naming_the_field(
    allowlisted: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    cases = [
        ({"url": LOOPBACK, "events": ["request.started"]}, "events"),
        ({"url": LOOPBACK, "secret": "hunter2"}, "secret"),
        ({"url": 42}, "url"),
        ({"url": LOOPBACK, "extra": 1}, "body"),
    ]
    for body, field in cases:
        response = allowlisted("ClientA").post("/webhooks", json=body)
        assert response.status_code == 400, body
        assert response.get_json()["field"] == field
    assert allowlisted("ClientA").get("/webhooks/x/deliveries?limit=0").status_code == 400
    assert endpoints(session_factory) == 0


def test_rotating_a_secret_answers_the_new_one_once(allowlisted: ClientAs) -> None:
    created = allowlisted("ClientA").post("/webhooks", json={"url": LOOPBACK}).get_json()
    rotated = allowlisted("ClientA").post(f"/webhooks/{created['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.get_json()["secret"] not in (None, created["secret"])
    assert "secret" not in allowlisted("ClientA").get(f"/webhooks/{created['id']}").get_json()


def test_a_callback_url_needs_the_client_flag_and_changes_nothing_when_refused(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    body = {"requestType": "InvoiceProcess", "keys": dict(INVOICE_KEYS), "callbackUrl": LOOPBACK}
    response = client_as("ClientA").post("/requests", json=body)
    assert response.status_code == 400
    assert response.get_json()["field"] == "callbackUrl"
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Request)) == 0


def test_an_allowed_callback_url_becomes_a_one_off_endpoint_of_that_request(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    publisher: RecordingPublisher,
) -> None:
    # Given ClientA's clients.json entry allows a callbackUrl
    path = Path(ingress_settings.clients_file)
    document = json.loads(path.read_text())
    secret = webhooks.new_secret()
    for entry in document["clients"]:
        if entry["clientId"] == "ClientA":
            entry.update(allowCallbackUrl=True, callbackSecret=secret)
    path.write_text(json.dumps(document))
    client_as = make_app(
        ingress_settings, session_factory, pki, publisher, http_allowlist=("127.0.0.1:8099",)
    )
    body = {"requestType": "InvoiceProcess", "keys": dict(INVOICE_KEYS), "callbackUrl": LOOPBACK}
    # A private URL is still refused by the guard of another app without the allowlist
    refused = make_app(ingress_settings, session_factory, pki, publisher)("ClientA").post(
        "/requests", json=body
    )
    assert refused.status_code == 400
    assert refused.get_json()["field"] == "callbackUrl"
    # When it submits with one
    response = client_as("ClientA").post("/requests", json=body)
    assert response.status_code == 202
    request_id = response.get_json()["correlationId"]
    # Then a one-off endpoint for that request exists, signed with the client's callback secret,
    # and it is not listed among the client's endpoints
    with session_factory() as session:
        [endpoint] = session.scalars(select(WebhookEndpoint)).all()
    assert endpoint.request_id == request_id
    assert endpoint.secrets == [secret]
    assert endpoint.source == "callback"
    assert client_as("ClientA").get("/webhooks").get_json()["items"] == []


def test_webhook_dead_letters_are_listed_by_kind(client_as: ClientAs) -> None:
    admin = client_as("Admin")
    response = admin.get("/admin/dead-letters?kind=webhook")
    assert response.status_code == 200
    assert response.get_json()["items"] == []
    assert admin.get("/admin/dead-letters?kind=nonsense").status_code == 400


def test_a_disabled_endpoint_shows_the_client_why(
    allowlisted: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    endpoint_id = allowlisted("ClientA").post("/webhooks", json={"url": LOOPBACK}).get_json()["id"]
    # Given the endpoint failed for its whole horizon and was disabled
    with session_factory.begin() as session:
        endpoint = session.get(WebhookEndpoint, endpoint_id)
        assert endpoint is not None
        endpoint.enabled = False
        endpoint.disabled_reason = "every delivery failed since 2026-12-01; last: answered 503"
        endpoint.disabled_at = endpoint.created_at
    # Then the client sees it disabled, with the reason
    [listed] = allowlisted("ClientA").get("/webhooks").get_json()["items"]
    assert listed["enabled"] is False
    assert listed["disabled"]["reason"].startswith("every delivery failed since")
    assert listed["disabled"]["at"] is not None
