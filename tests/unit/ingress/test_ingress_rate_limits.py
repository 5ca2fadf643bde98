"""Rate limits at the ingress: 429 with Retry-After for the client over its rate, nobody else.

The apps here keep their buckets where a default ingress does (files under the var folder, shared
by its processes); ``tests/unit/test_rate_limits.py`` checks the stores themselves.
"""

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

from broker.errors import ClientFileError
from broker.ingress import openapi
from broker.ingress.auth import PEER_CERT
from broker.rates import parse_rate
from broker.settings import Settings
from broker.store.models import BookmarkQueueItem, Request
from broker.wiring.web import create_public_app
from tests.support.ingress import INVOICE_KEYS, Pki

ClientAs = Callable[[str], FlaskClient]


def set_rate_limits(settings: Settings, client_id: str, limits: Any) -> None:
    """Give ``client_id``'s entry in the settings' clients.json these ``rateLimits``."""
    path = Path(settings.clients_file)
    document = json.loads(path.read_text())
    for entry in document["clients"]:
        if entry["clientId"] == client_id:
            entry["rateLimits"] = limits
    path.write_text(json.dumps(document))


def make_client_as(app: Flask, pki: Pki) -> ClientAs:
    def make(name: str) -> FlaskClient:
        client = app.test_client()
        client.environ_base[PEER_CERT] = pki.der(name)  # type: ignore[assignment]
        return client

    return make


def invoice(n: int) -> dict[str, Any]:
    return {"requestType": "InvoiceProcess", "keys": {**INVOICE_KEYS, "InvoiceNumber": f"I{n}"}}


def other(n: int) -> dict[str, Any]:
    return {"requestType": "OtherType", "keys": {"Ref": f"R{n}"}}


def count(factory: sessionmaker[Session], model: Any, client_key: str) -> int:
    with factory() as session:
        found = session.scalar(
            select(func.count()).select_from(model).where(model.client_key == client_key)
        )
        return int(found or 0)


def test_a_client_over_its_rate_gets_429_while_another_clients_calls_complete(
    ingress_settings: Settings, session_factory: sessionmaker[Session], pki: Pki
) -> None:
    # Given ClientA limited to 2 submissions and 1 event a minute in clients.json
    set_rate_limits(ingress_settings, "ClientA", {"submissions": "2/minute", "events": "1/minute"})
    client_as = make_client_as(
        create_public_app(ingress_settings, session_factory=session_factory), pki
    )
    a, b = client_as("ClientA"), client_as("ClientB")
    # When ClientA submits three times and sends two events
    submitted = [a.post("/requests", json=invoice(n)) for n in range(3)]
    events = [a.post("/events/approval", json={"correlationId": "c1"}) for _ in range(2)]
    # Then the calls within its rate are accepted, and the ones over it get 429
    assert [r.status_code for r in submitted] == [202, 202, 429]
    assert [r.status_code for r in events] == [202, 429]
    # With Retry-After in whole seconds and a JSON error naming the limit
    refused = submitted[2]
    assert 1 <= int(refused.headers["Retry-After"]) <= 30
    assert refused.json is not None
    assert refused.json["code"] == "rate_limited"
    assert refused.json["limit"] == "submissions"
    assert refused.json["rate"] == "2/minute"
    assert refused.json["retryAfter"] == int(refused.headers["Retry-After"])
    assert events[1].json is not None
    assert events[1].json["limit"] == "events"
    assert 1 <= int(events[1].headers["Retry-After"]) <= 60
    # And nothing was written for the refused calls
    assert count(session_factory, Request, "clienta") == 2
    assert count(session_factory, BookmarkQueueItem, "clienta") == 1
    # While ClientB's submissions and events all complete
    assert [b.post("/requests", json=other(n)).status_code for n in range(5)] == [202] * 5
    assert [
        b.post("/events/approval", json={"correlationId": f"c{n}"}).status_code for n in range(5)
    ] == [202] * 5


def test_the_settings_default_applies_to_clients_without_their_own_rate(
    ingress_settings: Settings, session_factory: sessionmaker[Session], pki: Pki
) -> None:
    # Given a default of one submission an hour, and ClientA exempted in clients.json
    settings = ingress_settings.replace(rate_limit_submissions=parse_rate("1/hour"))
    set_rate_limits(settings, "ClientA", {"submissions": "unlimited"})
    client_as = make_client_as(create_public_app(settings, session_factory=session_factory), pki)
    # When ClientB submits twice, then its second is refused with the default's rate
    first, second = (client_as("ClientB").post("/requests", json=other(n)) for n in range(2))
    assert (first.status_code, second.status_code) == (202, 429)
    assert second.json is not None
    assert second.json["rate"] == "1/hour"
    assert int(second.headers["Retry-After"]) > 3000
    # And ClientA, unlimited, is never refused
    a = client_as("ClientA")
    assert {a.post("/requests", json=invoice(n)).status_code for n in range(5)} == {202}


def test_a_malformed_rate_limit_stops_the_listener_naming_the_field(
    ingress_settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    # Given a clients.json whose ClientB rate has no unit
    set_rate_limits(ingress_settings, "ClientB", {"events": "50"})
    # When the public app is built, then it refuses to start, naming the entry and the field
    with pytest.raises(ClientFileError, match=r"clientId 'ClientB'\): rateLimits\.events: '50'"):
        create_public_app(ingress_settings, session_factory=session_factory)


def test_the_document_lists_429_with_retry_after_for_the_limited_operations() -> None:
    document = openapi.document()
    for path in ("/requests", "/events/{name}"):
        assert "429" in document["paths"][path]["post"]["responses"]
    headers = document["components"]["responses"]["E429"]["headers"]
    assert headers["Retry-After"]["schema"]["type"] == "integer"
