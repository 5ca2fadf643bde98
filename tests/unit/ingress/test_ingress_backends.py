"""The store-touching paths on both backends: SQLite and PostgreSQL (a fresh database each)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress.auth import PEER_CERT
from broker.settings import Settings
from broker.store import db
from broker.store.models import WorkflowInstance
from broker.wiring.web import create_internal_app, create_public_app
from tests.support.ingress import INVOICE_KEYS, Pki, mark_dispatched, signed_callback


@pytest.fixture
def backend(
    ingress_settings: Settings, database_url: str
) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    settings = ingress_settings.replace(database_url=database_url)
    db.upgrade(database_url)
    yield settings, db.make_session_factory(db.make_engine(database_url))
    db.dispose_engines()


def client_for(
    settings: Settings, factory: sessionmaker[Session], pki: Pki, name: str
) -> FlaskClient:
    client = create_public_app(settings, session_factory=factory).test_client()
    client.environ_base[PEER_CERT] = pki.der(name)  # type: ignore[assignment]
    return client


def test_submit_replay_list_cancel_and_callback_guard(
    backend: tuple[Settings, sessionmaker[Session]], pki: Pki, tmp_path: Path
) -> None:
    settings, factory = backend
    client = client_for(settings, factory, pki, "ClientA")
    body = {"requestType": "InvoiceProcess", "keys": INVOICE_KEYS}
    # Submission, idempotent replay and conflict
    headers = {"Idempotency-Key": "k-1"}
    first = client.post("/requests", json=body, headers=headers)
    again = client.post("/requests", json=body, headers=headers)
    other = client.post("/requests", json={**body, "payload": {"x": 1}}, headers=headers)
    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 409)
    request_id = first.get_json()["correlationId"]
    # Keyset paging, newest first
    for _ in range(3):
        client.post("/requests", json={"requestType": "OpenType"})
    page = client.get("/requests?limit=3").get_json()
    rest = client.get(f"/requests?limit=3&cursor={page['next']}").get_json()
    ids = [i["correlationId"] for i in page["items"] + rest["items"]]
    assert len(ids) == len(set(ids)) == 4
    assert ids[-1] == request_id
    assert rest["next"] is None
    # Cancel with an instance tree
    with factory.begin() as session:
        session.add(
            WorkflowInstance(
                id="root",
                definition_id="d",
                definition_version_id="v",
                version=1,
                request_id=request_id,
            )
        )
        session.add(
            WorkflowInstance(
                id="kid", definition_id="d", definition_version_id="v", version=1, parent_id="root"
            )
        )
    assert client.post(f"/requests/{request_id}/cancel").status_code == 202
    with factory() as session:
        subs = set(session.scalars(select(WorkflowInstance.sub_status)))
    assert subs == {"Cancelled"}
    # A callback cannot move the terminal request (even one dispatched to a remote executor)
    internal = create_internal_app(settings, session_factory=factory).test_client()
    attempt = mark_dispatched(settings.database_url, request_id)
    raw, signed = signed_callback("s3cret-callback", request_id, attempt, {"status": "Completed"})
    late = internal.post(f"/internal/requests/{request_id}/result", data=raw, headers=signed)
    assert late.status_code == 409
    assert client.get(f"/requests/{request_id}").get_json()["status"] == "Cancelled"
