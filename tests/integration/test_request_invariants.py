"""The README's invariants 1 and 2, on SQLite and PostgreSQL, through the public API.

Invariant 1: a ``202`` means the request, its audit event and its outbox row committed together, so
a submission whose outbox INSERT fails leaves nothing behind and is not answered ``202``.
Invariant 2: terminal statuses are final against a redelivery, a late completion and a cancel.
Idempotency: an Idempotency-Key names one body, ``keys`` and ``requestType`` included.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress.auth import PEER_CERT
from broker.runtime.requests import transitions as statuses
from broker.settings import Settings
from broker.store.models import InstanceSubStatus, OutboxRow, Request, RequestEvent, utcnow
from broker.wiring.web import create_public_app
from tests.support.doubles import RecordingPublisher
from tests.support.ingress import INVOICE_KEYS, Pki, make_pki, settings_for, write_config

ClientAs = Callable[[str], FlaskClient]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def settings(tmp_path: Path, pki: Pki, database_url: str) -> Settings:
    base = settings_for(tmp_path / "var", pki, write_config(tmp_path / "config", pki))
    return dataclasses.replace(base, database_url=database_url)


@pytest.fixture
def app(settings: Settings, factory: sessionmaker[Session]) -> Flask:
    publisher = RecordingPublisher()
    return create_public_app(settings, session_factory=factory, publisher=publisher)


@pytest.fixture
def client_as(app: Flask, pki: Pki) -> ClientAs:
    def make(name: str) -> FlaskClient:
        client = app.test_client()
        client.environ_base[PEER_CERT] = pki.der(name)  # type: ignore[assignment]
        return client

    return make


def count(factory: sessionmaker[Session], model: Any) -> int:
    with factory() as session:
        return int(session.scalar(sa.select(sa.func.count()).select_from(model)) or 0)


def invoice(**changes: Any) -> dict[str, Any]:
    return {"requestType": "InvoiceProcess", "keys": dict(INVOICE_KEYS), **changes}


# Idempotency --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(invoice(keys={**INVOICE_KEYS, "VendorCode": "V-10"}), id="other-keys"),
        pytest.param({"requestType": "OpenType", "keys": dict(INVOICE_KEYS)}, id="other-type"),
        pytest.param(invoice(payload={"amount": 1}), id="other-payload"),
    ],
)
def test_an_idempotency_key_reused_with_another_body_is_a_conflict_and_writes_nothing(
    client_as: ClientAs, factory: sessionmaker[Session], other: dict[str, Any]
) -> None:
    # Given a request submitted with an Idempotency-Key
    client = client_as("ClientA")
    headers = {"Idempotency-Key": "inv-7"}
    first = client.post("/requests", json=invoice(), headers=headers)
    assert first.status_code == 202
    # When the same key comes with other keys, another request type or another payload
    again = client.post("/requests", json=other, headers=headers)
    # Then it is a 409 naming the first record, and nothing new was written
    assert again.status_code == 409, again.get_json()
    assert again.get_json()["correlationId"] == first.get_json()["correlationId"]
    assert (count(factory, Request), count(factory, OutboxRow)) == (1, 1)


def test_the_same_key_and_body_again_answers_the_first_record(
    client_as: ClientAs, factory: sessionmaker[Session]
) -> None:
    client = client_as("ClientA")
    headers = {"Idempotency-Key": "inv-8"}
    first = client.post("/requests", json=invoice(), headers=headers)
    again = client.post("/requests", json=invoice(), headers=headers)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.get_json()["correlationId"] == first.get_json()["correlationId"]
    assert (count(factory, Request), count(factory, OutboxRow)) == (1, 1)


def test_another_idempotency_key_of_the_same_client_is_another_request(
    client_as: ClientAs, factory: sessionmaker[Session]
) -> None:
    # Given a request submitted under one Idempotency-Key
    client = client_as("ClientA")
    first = client.post("/requests", json=invoice(), headers={"Idempotency-Key": "inv-1"})
    # When the same client submits another body under another key, then that key again
    other = invoice(payload={"amount": 2})
    second = client.post("/requests", json=other, headers={"Idempotency-Key": "inv-2"})
    again = client.post("/requests", json=other, headers={"Idempotency-Key": "inv-2"})
    # Then the second key names a new request of its own, and only that one
    assert (first.status_code, second.status_code, again.status_code) == (202, 202, 200)
    assert second.get_json()["correlationId"] != first.get_json()["correlationId"]
    assert again.get_json()["correlationId"] == second.get_json()["correlationId"]
    assert (count(factory, Request), count(factory, OutboxRow)) == (2, 2)


# Submit atomicity ---------------------------------------------------------------------------------


def refuse_outbox_inserts(factory: sessionmaker[Session]) -> None:
    """A database trigger that makes every INSERT into the outbox fail."""
    with factory.begin() as session:
        if session.get_bind().dialect.name == "sqlite":
            session.execute(
                sa.text(
                    "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox "
                    "BEGIN SELECT RAISE(ABORT, 'outbox refused by the test'); END"
                )
            )
            return
        session.execute(
            sa.text(
                "CREATE FUNCTION refuse_outbox() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'outbox refused by the test'; END $$"
            )
        )
        session.execute(
            sa.text(
                "CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox "
                "FOR EACH ROW EXECUTE FUNCTION refuse_outbox()"
            )
        )


def test_a_submission_whose_outbox_insert_fails_leaves_no_row_and_no_202(
    client_as: ClientAs, factory: sessionmaker[Session]
) -> None:
    # Given a database that refuses the outbox row of any submission
    refuse_outbox_inserts(factory)
    # When a client submits
    response = client_as("ClientA").post("/requests", json=invoice())
    # Then the answer is an error, and neither the request nor its audit event was kept
    assert response.status_code >= 500
    assert "correlationId" not in (response.get_json() or {})
    assert count(factory, Request) == 0
    assert count(factory, RequestEvent) == 0
    assert count(factory, OutboxRow) == 0


# Finality -----------------------------------------------------------------------------------------

TERMINAL = ("Completed", "Faulted", "Cancelled")


def submitted_then(
    client_as: ClientAs, factory: sessionmaker[Session], status: str
) -> tuple[str, dict[str, Any]]:
    """A submitted request moved to ``status``; answers its id and its columns as stored."""
    response = client_as("ClientA").post("/requests", json=invoice())
    request_id = str(response.get_json()["correlationId"])
    with factory.begin() as session:
        session.execute(
            sa.update(Request)
            .where(Request.id == request_id)
            .values(status=status, result={"first": True}, error_detail="first")
        )
    return request_id, stored(factory, request_id)


def stored(factory: sessionmaker[Session], request_id: str) -> dict[str, Any]:
    with factory() as session:
        record = session.get(Request, request_id)
        assert record is not None
        events = session.scalar(
            sa.select(sa.func.count())
            .select_from(RequestEvent)
            .where(RequestEvent.request_id == request_id)
        )
        return {
            "status": record.status,
            "result": record.result,
            "error": record.error_detail,
            "events": events,
        }


@pytest.mark.parametrize("status", TERMINAL)
@pytest.mark.parametrize(
    "sub_status",
    [InstanceSubStatus.FINISHED.value, InstanceSubStatus.FAULTED.value, "Cancelled"],
)
def test_a_terminal_request_ignores_a_late_or_redelivered_finish(
    client_as: ClientAs, factory: sessionmaker[Session], status: str, sub_status: str
) -> None:
    # Given a request that reached a terminal status
    request_id, before = submitted_then(client_as, factory, status)
    # When a redelivered step or a late result tries to finish it again
    with factory.begin() as session:
        changed = statuses.finish_request(
            session, request_id, sub_status=sub_status, output={"late": True}, error="late"
        )
        started = statuses.start_processing(session, request_id, "late-instance")
    # Then nothing changed: no status, no result, no error, no audit event
    assert (changed, started) == (None, False)
    assert stored(factory, request_id) == before


def events_of(factory: sessionmaker[Session], request_id: str) -> list[RequestEvent]:
    with factory() as session:
        found = list(
            session.scalars(
                sa.select(RequestEvent)
                .where(RequestEvent.request_id == request_id)
                .order_by(RequestEvent.id)
            )
        )
        session.expunge_all()
        return found


def test_start_then_finish_record_the_status_its_time_and_one_audit_event_each(
    client_as: ClientAs, factory: sessionmaker[Session]
) -> None:
    # Given a queued request, and a first step that started a minute before it is recorded
    response = client_as("ClientA").post("/requests", json=invoice())
    request_id = str(response.get_json()["correlationId"])
    started_at = utcnow() - dt.timedelta(minutes=1)
    # When it is started (deferred) and then completed
    with factory.begin() as session:
        assert statuses.start_processing(
            session, request_id, "inst-1", message="first step", now=started_at
        )
        assert not statuses.start_processing(session, request_id, "inst-2")
    with factory.begin() as session:
        finished = statuses.finish_request(
            session, request_id, sub_status="Finished", output={"ok": 1}, error=None,
            source="callback",
        )  # fmt: skip
    # Then the request went Queued -> Processing (at the start time, with its instance) ->
    # Completed with its result, and each move wrote one event saying so
    assert finished == "Completed"
    with factory() as session:
        record = session.get(Request, request_id)
        assert record is not None
        assert (record.status, record.instance_id, record.result) == (
            "Completed", "inst-1", {"ok": 1},
        )  # fmt: skip
        assert record.error_detail is None
        assert record.completed_at is not None
        assert record.completed_at >= started_at
    processing, completed = events_of(factory, request_id)[1:]
    assert (processing.event_type, processing.source, processing.message) == (
        "RequestProcessing", "worker", "first step",
    )  # fmt: skip
    assert processing.timestamp == started_at
    assert processing.properties == {"instanceId": "inst-1"}
    assert (completed.event_type, completed.source, completed.message) == (
        "RequestCompleted", "callback", None,
    )  # fmt: skip
    assert completed.properties == {"status": "Completed"}
    assert completed.timestamp == record.completed_at


@pytest.mark.parametrize(
    ("sub_status", "error", "status", "event", "detail"),
    [
        ("Faulted", "it broke", "Faulted", "RequestFaulted", "it broke"),
        ("Faulted", None, "Faulted", "RequestFaulted", "Faulted"),
        ("Cancelled", "ignored", "Cancelled", "RequestCancelled", None),
    ],
)
def test_a_fault_keeps_its_error_and_a_cancel_keeps_none(
    client_as: ClientAs,
    factory: sessionmaker[Session],
    sub_status: str,
    error: str | None,
    status: str,
    event: str,
    detail: str | None,
) -> None:
    response = client_as("ClientA").post("/requests", json=invoice())
    request_id = str(response.get_json()["correlationId"])
    with factory.begin() as session:
        assert statuses.start_processing(session, request_id, None)
        assert (
            statuses.finish_request(
                session, request_id, sub_status=sub_status, output={"no": 1}, error=error
            )
            == status
        )
    with factory() as session:
        record = session.get(Request, request_id)
        assert record is not None
        assert (record.status, record.error_detail, record.result) == (status, detail, None)
    processing, finished = events_of(factory, request_id)[1:]
    assert processing.properties is None
    assert (finished.event_type, finished.source) == (event, "worker")
    assert finished.message == (error if status == "Faulted" else None)
    assert finished.properties == {"status": status}


@pytest.mark.parametrize("status", TERMINAL)
def test_a_terminal_request_cannot_be_cancelled(
    client_as: ClientAs, factory: sessionmaker[Session], status: str
) -> None:
    request_id, before = submitted_then(client_as, factory, status)
    response = client_as("ClientA").post(f"/requests/{request_id}/cancel")
    assert response.status_code == 409
    assert stored(factory, request_id) == before
