"""The client API in process: submission, idempotency, authorization, lookups, cancel, events."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime.requests import queries as request_queries
from broker.runtime.requests import submission
from broker.settings import Settings
from broker.store.models import (
    BookmarkQueueItem,
    InstanceSubStatus,
    OutboxRow,
    Request,
    RequestEvent,
    RuntimeFlag,
    WorkflowInstance,
    utcnow,
)
from broker.wiring.web import create_public_app
from tests.support.doubles import RecordingPublisher
from tests.support.ingress import INVOICE_KEYS, Pki
from tests.support.services import free_port

ClientAs = Callable[[str], FlaskClient]


def invoice(**overrides: Any) -> dict[str, Any]:
    return {
        "requestType": "InvoiceProcess",
        "keys": dict(INVOICE_KEYS),
        "payload": {"amount": 250},
        **overrides,
    }


def count(factory: sessionmaker[Session], model: Any) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_submission_is_recorded_with_event_and_outbox_row_then_published(
    client_as: ClientAs, session_factory: sessionmaker[Session], publisher: RecordingPublisher
) -> None:
    # Given ClientA, allowed to submit InvoiceProcess
    # When it submits a valid request
    response = client_as("ClientA").post("/requests", json=invoice())
    # Then it is accepted with its location, and request, audit event and outbox row exist
    assert response.status_code == 202
    body = response.get_json()
    assert body["status"] == "Queued"
    assert response.headers["Location"] == f"/requests/{body['correlationId']}"
    with session_factory() as session:
        record = session.get(Request, body["correlationId"])
        assert record is not None
        assert record.client_id == "ClientA"
        assert record.definition_id == "invoice-process"
        assert record.definition_version_id
        events = session.execute(select(RequestEvent.event_type, RequestEvent.source)).all()
        assert [tuple(event) for event in events] == [("RequestSubmitted", "ingress")]
        row = session.scalars(select(OutboxRow)).one()
        assert row.task_name == "broker.run_request"
        assert row.args == {"request_id": record.id}
        assert row.state == "pending"
    # And the fast path was asked to publish exactly that row, after the commit
    assert publisher.published == [row.id]


def test_get_answers_the_documented_view(client_as: ClientAs) -> None:
    # Given a submitted request
    client = client_as("ClientA")
    request_id = client.post("/requests", json=invoice()).get_json()["correlationId"]
    # When its owner reads it
    view = client.get(f"/requests/{request_id}").get_json()
    # Then every documented field is there
    assert view["correlationId"] == request_id
    assert view["clientId"] == "ClientA"
    assert view["requestType"] == "InvoiceProcess"
    assert view["keys"] == INVOICE_KEYS
    assert view["status"] == "Queued"
    assert view["result"] is None
    assert view["errorDetail"] is None
    assert view["workflow"]["definitionId"] == "invoice-process"
    assert view["workflow"]["version"] == 1
    assert set(view) >= {"submittedAt", "updatedAt"}


def test_request_type_lookup_is_case_insensitive(client_as: ClientAs) -> None:
    response = client_as("ClientA").post("/requests", json=invoice(requestType="invoiceprocess"))
    assert response.status_code == 202


def test_unknown_request_type_uses_elsa_brokers_message(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    # Given ClientB, which may not submit InvoiceProcess
    # When it tries
    response = client_as("ClientB").post("/requests", json=invoice())
    # Then it gets elsa-broker's message and nothing is written
    assert response.status_code == 400
    message = "Unknown request type 'InvoiceProcess' for client 'ClientB'"
    assert response.get_json()["error"] == message
    assert count(session_factory, Request) == 0


def test_missing_required_keys_are_named(client_as: ClientAs) -> None:
    response = client_as("ClientA").post("/requests", json=invoice(keys={"InvoiceNumber": "1"}))
    assert response.status_code == 400
    assert response.get_json()["error"] == "Missing required keys"
    assert response.get_json()["keys"] == ["VendorCode"]


def test_unexpected_keys_are_named_unless_additional_keys_are_allowed(client_as: ClientAs) -> None:
    client = client_as("ClientA")
    response = client.post("/requests", json=invoice(keys={**INVOICE_KEYS, "Extra": "x"}))
    assert response.status_code == 400
    assert response.get_json() == {
        "error": "Unexpected keys",
        "code": "unexpected_keys",
        "keys": ["Extra"],
    }
    open_type = client.post("/requests", json={"requestType": "OpenType", "keys": {"Any": "x"}})
    assert open_type.status_code == 202


def test_key_names_match_required_keys_case_insensitively(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    # Given ClientA's InvoiceProcess rule (InvoiceNumber, VendorCode, no additional keys)
    # When it sends the keys in other cases
    keys = {"invoicenumber": "INV-1", "VENDORCODE": "V-1"}
    response = client_as("ClientA").post("/requests", json=invoice(keys=keys))
    # Then the request is accepted and the keys are kept as sent
    assert response.status_code == 202, response.get_json()
    with session_factory() as session:
        stored = session.query(Request).one()
        assert stored.keys == keys


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"requestType": "OpenType", "keys": {"a": NaN}}', "body"),
        (b'{"requestType": "", "keys": {}}', "requestType"),
        (b'{"requestType": 5}', "requestType"),
        (b'{"requestType": "OpenType", "keys": {"a": 1}}', "keys"),
        (b'{"requestType": "OpenType", "keys": ["a"]}', "keys"),
        (b'{"requestType": "OpenType", "payload": [1]}', "payload"),
        (b'{"requestType": "OpenType", "clientId": "Admin"}', "body"),
        (b"", "body"),
    ],
)
def test_malformed_bodies_are_refused_naming_the_field(
    client_as: ClientAs, session_factory: sessionmaker[Session], body: bytes, field: str
) -> None:
    response = client_as("ClientA").post("/requests", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["field"] == field
    assert count(session_factory, Request) == 0


def test_too_deep_json_is_refused(client_as: ClientAs) -> None:
    payload: Any = {}
    for _ in range(40):
        payload = {"x": payload}
    response = client_as("ClientA").post(
        "/requests", json={"requestType": "OpenType", "payload": payload}
    )
    assert response.status_code == 400
    assert "nesting" in response.get_json()["error"]


def test_body_over_the_limit_is_413_from_content_length_and_from_a_chunked_stream(
    ingress_settings: Settings, session_factory: sessionmaker[Session], pki: Pki
) -> None:
    # Given a listener that accepts 200 bytes
    app = create_public_app(
        ingress_settings.replace(max_body_bytes=200), session_factory=session_factory
    )
    client = app.test_client()
    client.environ_base["broker.peer_cert"] = pki.der("ClientA")  # type: ignore[assignment]
    big = invoice(payload={"text": "x" * 500})
    # When the body is larger, declared or streamed without a length
    declared = client.post("/requests", json=big)
    # (a chunked body reaches the app as gunicorn passes it: no length, input terminated)
    streamed = client.post(
        "/requests",
        input_stream=io.BytesIO(json.dumps(big).encode()),
        content_type="application/json",
        headers={"Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},
    )
    # Then both are refused with 413 and nothing is written
    assert declared.status_code == 413
    assert declared.get_json()["code"] == "payload_too_large"
    assert streamed.status_code == 413, streamed.get_data(as_text=True)
    assert count(session_factory, Request) == 0


def test_idempotent_retry_answers_the_same_record(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    # Given a submission with an Idempotency-Key
    client = client_as("ClientA")
    headers = {"Idempotency-Key": "order-42"}
    first = client.post("/requests", json=invoice(), headers=headers)
    # When the same body comes again with the same key
    again = client.post("/requests", json=invoice(), headers=headers)
    # Then it answers 200 with the first record (the GET body), and one request exists
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.get_json() == client.get(first.headers["Location"]).get_json()
    assert count(session_factory, Request) == 1


def test_idempotency_key_with_another_body_is_a_conflict(client_as: ClientAs) -> None:
    client = client_as("ClientA")
    headers = {"Idempotency-Key": "order-43"}
    client.post("/requests", json=invoice(), headers=headers)
    other = client.post("/requests", json=invoice(payload={"amount": 1}), headers=headers)
    assert other.status_code == 409


def test_idempotency_keys_are_per_client(client_as: ClientAs) -> None:
    headers = {"Idempotency-Key": "shared"}
    a = client_as("ClientA").post("/requests", json={"requestType": "OpenType"}, headers=headers)
    b = client_as("Admin").post("/requests", json={"requestType": "OpenType"}, headers=headers)
    assert (a.status_code, b.status_code) == (202, 202)
    assert a.get_json()["correlationId"] != b.get_json()["correlationId"]


def test_concurrent_insert_with_the_same_key_is_resolved_by_the_unique_constraint(
    client_as: ClientAs, session_factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given another submission with the same key that committed after our lookup missed it
    body = {"requestType": "OpenType"}
    winner = submission.Submission("OpenType", {}, None, "race")
    with session_factory.begin() as session:
        session.add(
            Request(
                id="raced",
                client_id="ClientA",
                client_key="clienta",
                request_type="OpenType",
                request_type_key="opentype",
                keys={},
                idempotency_key="race",
                body_hash=winner.body_hash(),
            )
        )
    original = submission.find_by_idempotency_key
    lookups = {"n": 0}

    def late_lookup(session: Session, client_id: str, key: str) -> Request | None:
        lookups["n"] += 1
        return None if lookups["n"] == 1 else original(session, client_id, key)

    monkeypatch.setattr(submission, "find_by_idempotency_key", late_lookup)
    # When our submission hits the unique constraint
    response = client_as("ClientA").post(
        "/requests", json=body, headers={"Idempotency-Key": "race"}
    )
    # Then it answers the winner's record instead of a 500, and wrote nothing of its own
    assert response.status_code == 200
    assert response.get_json()["correlationId"] == "raced"
    assert count(session_factory, Request) == 1
    assert count(session_factory, OutboxRow) == 0


def test_another_clients_record_is_forbidden_and_a_missing_one_not_found(
    client_as: ClientAs,
) -> None:
    request_id = client_as("ClientA").post("/requests", json=invoice()).get_json()["correlationId"]
    other = client_as("Admin")
    assert other.get(f"/requests/{request_id}").status_code == 403
    assert other.get(f"/requests/{request_id}/events").status_code == 403
    assert other.post(f"/requests/{request_id}/cancel").status_code == 403
    assert other.get("/requests/no-such-id").status_code == 404


def test_list_pages_newest_first_with_a_cursor_and_own_records_only(client_as: ClientAs) -> None:
    # Given five requests of ClientA and one of Admin
    client = client_as("ClientA")
    ids = [
        client.post("/requests", json={"requestType": "OpenType"}).get_json()["correlationId"]
        for _ in range(5)
    ]
    client_as("Admin").post("/requests", json={"requestType": "OpenType"})
    # When ClientA lists two at a time
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = client.get("/requests", query_string=query).get_json()
        seen += [item["correlationId"] for item in page["items"]]
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    # Then it sees exactly its five, newest first, in three pages
    assert seen == list(reversed(ids))
    assert pages == 3


def test_list_filters_by_status_type_and_since(client_as: ClientAs) -> None:
    client = client_as("ClientA")
    client.post("/requests", json={"requestType": "OpenType"})
    invoice_id = client.post("/requests", json=invoice()).get_json()["correlationId"]
    client.post(f"/requests/{invoice_id}/cancel")
    by_type = client.get("/requests?requestType=invoiceprocess").get_json()["items"]
    assert [i["correlationId"] for i in by_type] == [invoice_id]
    by_status = client.get("/requests?status=Cancelled").get_json()["items"]
    assert [i["correlationId"] for i in by_status] == [invoice_id]
    assert client.get("/requests?since=2999-01-01T00:00:00Z").get_json()["items"] == []


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=501", "limit=x", "status=Done", "since=yesterday", "cursor=!!"]
)
def test_bad_list_parameters_are_400(client_as: ClientAs, query: str) -> None:
    response = client_as("ClientA").get(f"/requests?{query}")
    assert response.status_code == 400
    assert response.get_json()["field"] == query.split("=")[0]


def test_cancel_marks_the_request_and_its_instances_then_refuses_twice(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    # Given a request whose workflow instance (with a child) is suspended
    client = client_as("ClientA")
    request_id = client.post("/requests", json=invoice()).get_json()["correlationId"]
    with session_factory.begin() as session:
        for instance_id, parent in (("root-1", None), ("child-1", "root-1")):
            session.add(
                WorkflowInstance(
                    id=instance_id,
                    definition_id="invoice-process",
                    definition_version_id="v",
                    version=1,
                    request_id=request_id if parent is None else None,
                    parent_id=parent,
                    sub_status=InstanceSubStatus.SUSPENDED.value,
                )
            )
        session.get(Request, request_id).instance_id = "root-1"  # type: ignore[union-attr]
    # When the client cancels it
    response = client.post(f"/requests/{request_id}/cancel")
    # Then it is Cancelled, both instances too, the audit says so, and a second cancel is 409
    assert response.status_code == 202
    assert response.get_json() == {"correlationId": request_id, "status": "Cancelled"}
    with session_factory() as session:
        subs = {i.id: i.sub_status for i in session.scalars(select(WorkflowInstance))}
    assert subs == {"root-1": "Cancelled", "child-1": "Cancelled"}
    events = [e["eventType"] for e in client.get(f"/requests/{request_id}/events").get_json()]
    assert events == ["RequestSubmitted", "RequestCancelled"]
    assert client.post(f"/requests/{request_id}/cancel").status_code == 409
    assert client.get(f"/requests/{request_id}").get_json()["workflow"]["subStatus"] == "Cancelled"


def test_paused_runtime_answers_503_with_retry_after(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    with session_factory.begin() as session:
        session.add(RuntimeFlag(name="paused", value=True, updated_at=utcnow()))
    response = client_as("ClientA").post("/requests", json=invoice())
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    assert count(session_factory, Request) == 0


def test_event_is_queued_for_this_client(
    client_as: ClientAs, session_factory: sessionmaker[Session]
) -> None:
    response = client_as("ClientA").post(
        "/events/Approved", json={"correlationId": "c-1", "payload": {"ok": True}}
    )
    assert response.status_code == 202
    with session_factory() as session:
        item = session.get(BookmarkQueueItem, response.get_json()["queueItemId"])
    assert item is not None
    assert (item.name, item.correlation_id, item.client_key, item.payload) == (
        "Approved",
        "c-1",
        "clienta",
        {"ok": True},
    )


def test_event_without_correlation_id_is_400(client_as: ClientAs) -> None:
    response = client_as("ClientA").post("/events/Approved", json={"payload": {}})
    assert response.status_code == 400
    assert response.get_json()["field"] == "correlationId"


def test_request_types_lists_this_clients_rules_with_workflow_versions(
    client_as: ClientAs,
) -> None:
    types = client_as("ClientA").get("/request-types").get_json()["requestTypes"]
    assert [t["requestType"] for t in types] == ["InvoiceProcess", "OpenType"]
    assert types[0]["requiredKeys"] == ["InvoiceNumber", "VendorCode"]
    assert types[0]["workflow"] == {"definitionId": "invoice-process", "version": 1}


def test_unknown_certificate_is_401_everywhere_even_on_unknown_paths(client_as: ClientAs) -> None:
    stranger = client_as("Stranger")
    for path in ("/requests", "/request-types", "/no-such-path"):
        response = stranger.get(path)
        assert response.status_code == 401
        assert response.get_json()["error"] == "Unknown client certificate"


def test_no_certificate_is_401(app: Flask) -> None:
    response = app.test_client().get("/requests")
    assert response.status_code == 401


def test_unknown_path_and_method_answer_json(client_as: ClientAs) -> None:
    client = client_as("ClientA")
    missing = client.get("/nowhere")
    wrong = client.delete("/requests")
    assert missing.status_code == 404
    assert missing.get_json()["code"] == "not_found"
    assert wrong.status_code == 405
    assert "POST" in wrong.headers["Allow"]
    assert wrong.get_json()["error"]


def test_database_down_answers_503_not_500(
    ingress_settings: Settings, pki: Pki, session_factory: sessionmaker[Session]
) -> None:
    # Given a listener whose database server does not answer
    from broker.store import db

    down = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/broker"
    broken = db.make_session_factory(db.make_engine(down))
    app = create_public_app(
        ingress_settings, session_factory=broken, clients=_AllowAll(), registry=_OneWorkflow()
    )
    client = app.test_client()
    client.environ_base["broker.peer_cert"] = pki.der("ClientA")  # type: ignore[assignment]
    # When a client submits
    response = client.post("/requests", json={"requestType": "OpenType"})
    # Then it is told to come back later
    assert response.status_code == 503
    assert response.get_json()["code"] == "store_unavailable"
    assert response.headers["Retry-After"]


def test_unexpected_exception_is_a_500_without_details(
    app: Flask, client_as: ClientAs, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(request_queries, "list_requests", explode)
    response = client_as("ClientA").get("/requests")
    assert response.status_code == 500
    assert "secret" not in response.get_data(as_text=True)


class _Client:
    client_id = "ClientA"
    scopes: frozenset[str] = frozenset()


class _Rule:
    request_type = "OpenType"
    required_keys: tuple[str, ...] = ()
    allow_additional_keys = True


class _AllowAll:
    def authenticate(self, *, sha1_thumbprint: str, sha256_fingerprint: str) -> _Client:
        return _Client()

    def rule_for(self, client_id: str, request_type: str) -> _Rule:
        return _Rule()

    def rules_for(self, client_id: str) -> list[_Rule]:
        return [_Rule()]


class _Workflow:
    definition_id = "open-type"
    version = 1
    version_id = "v1"
    queue = None
    activation_strategy = "always"


class _OneWorkflow:
    def for_request_type(self, name: str) -> _Workflow:
        return _Workflow()


class _SingletonWorkflow(_Workflow):
    activation_strategy = "singleton"


class _SingletonRegistry:
    def for_request_type(self, name: str) -> _Workflow:
        return _SingletonWorkflow()


def test_a_singleton_workflow_refuses_a_second_request_while_one_runs(
    ingress_settings: Settings, session_factory: sessionmaker[Session], pki: Pki
) -> None:
    # Given a workflow whose options.activationStrategyType is Elsa's SingletonStrategy
    app = create_public_app(
        ingress_settings,
        session_factory=session_factory,
        clients=_AllowAll(),
        registry=_SingletonRegistry(),
        publisher=RecordingPublisher(),
    )
    client = app.test_client()
    client.environ_base["broker.peer_cert"] = pki.der("ClientA")  # type: ignore[assignment]
    first = client.post("/requests", json={"requestType": "OpenType"})
    assert first.status_code == 202
    # When a second request comes while the first is not finished
    second = client.post("/requests", json={"requestType": "OpenType"})
    # Then the submitter is told why, and nothing is written
    assert second.status_code == 409
    body = second.get_json()
    assert body["code"] == "activation_refused"
    assert "singleton" in body["error"]
    assert first.get_json()["correlationId"] not in body["error"]
    assert count(session_factory, Request) == 1
    # And once the first is finished, a new one is accepted
    with session_factory.begin() as session:
        session.get_one(Request, first.get_json()["correlationId"]).status = "Completed"
    assert client.post("/requests", json={"requestType": "OpenType"}).status_code == 202


class _CorrelationWorkflow(_Workflow):
    activation_strategy = "correlation"


class _CorrelationRegistry:
    def for_request_type(self, name: str) -> _Workflow:
        return _CorrelationWorkflow()


def test_a_correlation_workflow_refuses_a_second_request_with_the_clients_correlation_id(
    ingress_settings: Settings, session_factory: sessionmaker[Session], pki: Pki
) -> None:
    # Given a workflow whose options.activationStrategyType is Elsa's CorrelationStrategy
    app = create_public_app(
        ingress_settings,
        session_factory=session_factory,
        clients=_AllowAll(),
        registry=_CorrelationRegistry(),
        publisher=RecordingPublisher(),
    )
    client = app.test_client()
    client.environ_base["broker.peer_cert"] = pki.der("ClientA")  # type: ignore[assignment]
    order_7 = {"X-Correlation-ID": "order-7"}
    first = client.post("/requests", json={"requestType": "OpenType"}, headers=order_7)
    assert first.status_code == 202
    # When a second request with the same client correlation id comes while the first is queued
    second = client.post("/requests", json={"requestType": "OpenType"}, headers=order_7)
    # Then it is refused, and nothing is written
    assert second.status_code == 409
    assert second.get_json()["code"] == "activation_refused"
    assert count(session_factory, Request) == 1
    # And another correlation id is accepted
    other = client.post(
        "/requests", json={"requestType": "OpenType"}, headers={"X-Correlation-ID": "order-8"}
    )
    assert other.status_code == 202
    # And a malformed one is refused with the header named
    blank = client.post(
        "/requests", json={"requestType": "OpenType"}, headers={"X-Correlation-ID": " "}
    )
    assert blank.status_code == 400
    assert "X-Correlation-ID" in blank.get_json()["error"]
