"""``/workflows/{path}``: the HttpEndpoint trigger on the public listener, in process.

The synchronous WriteHttpResponse answer over mutual TLS is shown with a real stack in
``tests/e2e/test_triggers_live.py``; here: who may call, what is started, and the 202 fallback.
"""

from __future__ import annotations

import json
from pathlib import Path

from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime import ids
from broker.settings import Settings
from broker.store.models import Request, RequestEvent, StepResult
from broker.wiring.web import create_public_app
from tests.support.ingress import Pki
from tests.support.services import PROJECT_ROOT
from tests.unit.ingress.conftest import RecordingPublisher

FIXTURE = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "triggers" / "http-trigger.json"


def app_client(
    settings: Settings,
    factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
    name: str,
    publisher: RecordingPublisher,
    request_type: str = "OpenType",
) -> FlaskClient:
    # The fixture, served as one of ClientA's request types (ClientB may submit neither)
    folder = tmp_path / "http-wf"
    folder.mkdir(exist_ok=True)
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    document["customProperties"]["requestType"] = request_type
    (folder / FIXTURE.name).write_text(json.dumps(document), encoding="utf-8")
    app = create_public_app(
        settings.replace(workflow_paths=(str(folder),), http_trigger_wait=0.0),
        session_factory=factory,
        publisher=publisher,
    )
    client = app.test_client()
    client.environ_base["broker.peer_cert"] = pki.der(name)  # type: ignore[assignment]
    return client


def test_a_permitted_client_starts_one_request_and_gets_its_location(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
) -> None:
    publisher = RecordingPublisher()
    client = app_client(ingress_settings, session_factory, pki, tmp_path, "ClientA", publisher)
    # When ClientA posts to the endpoint's path (no worker runs: the wait bound is 0)
    response = client.post("/workflows/Hello/?x=1", json={"greeting": "hi"})
    # Then a request owned by ClientA was started and published, and the caller gets its Location
    assert response.status_code == 202
    request_id = response.get_json()["correlationId"]
    assert response.headers["Location"] == f"/requests/{request_id}"
    assert len(publisher.published) == 1
    with session_factory() as session:
        record = session.get_one(Request, request_id)
        assert (record.client_id, record.request_type, record.status) == (
            "ClientA",
            "OpenType",
            "Queued",
        )
        event = session.scalars(
            select(RequestEvent).where(RequestEvent.request_id == request_id)
        ).one()
        assert event.message == "Started by trigger Elsa.HttpEndpoint (endpoint)"
        pending = session.get_one(
            StepResult, (ids.instance_id_for_request(request_id), "pending-start")
        )
        trigger = (pending.output or {})["trigger"]
        assert (trigger["method"], trigger["path"], trigger["query"]) == (
            "POST",
            "/Hello",
            {"x": "1"},
        )
        assert trigger["body"] == {"greeting": "hi"}
    # And it is one of ClientA's requests
    assert client.get(f"/requests/{request_id}").status_code == 200


def test_a_client_not_permitted_gets_403_and_an_unknown_path_or_method_404(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
) -> None:
    publisher = RecordingPublisher()
    other = app_client(ingress_settings, session_factory, pki, tmp_path, "ClientB", publisher)
    assert other.post("/workflows/hello", json={}).status_code == 403
    permitted = app_client(ingress_settings, session_factory, pki, tmp_path, "ClientA", publisher)
    assert permitted.post("/workflows/nowhere", json={}).status_code == 404
    assert permitted.get("/workflows/hello").status_code == 404  # the endpoint takes POST only
    with session_factory() as session:
        assert session.scalars(select(Request)).all() == []
    assert publisher.published == []


def test_the_request_types_required_keys_come_as_query_parameters(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
) -> None:
    # Given the endpoint serving InvoiceProcess (required keys InvoiceNumber, VendorCode)
    publisher = RecordingPublisher()
    client = app_client(
        ingress_settings, session_factory, pki, tmp_path, "ClientA", publisher, "InvoiceProcess"
    )
    # When a key is missing, the call is refused and nothing starts
    missing = client.post("/workflows/hello?InvoiceNumber=1", json={})
    assert missing.status_code == 400
    assert missing.get_json()["keys"] == ["VendorCode"]
    assert publisher.published == []
    # And with both (in any case) it starts a request that records them as sent
    response = client.post("/workflows/hello?invoicenumber=1&VENDORCODE=V&other=x", json={})
    assert response.status_code == 202
    with session_factory() as session:
        record = session.get_one(Request, response.get_json()["correlationId"])
        assert record.keys == {"invoicenumber": "1", "VENDORCODE": "V"}
