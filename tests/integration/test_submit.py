"""``requests.submit`` in one transaction, on SQLite and PostgreSQL: every column of the request,
its audit event and its outbox row, the answer the caller gets, idempotent replays and conflicts,
the pause, and the activation strategy's default."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import BadRequest, Conflict, RuntimePaused
from broker.names import DEFAULT_QUEUE, RUN_REQUEST
from broker.runtime.outbox.pause import set_paused
from broker.runtime.ports import OutboxMessage
from broker.runtime.requests.submission import Submission, submit
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow, Request, RequestEvent, utcnow


class Pinned:
    definition_id = "approval"
    version = 3
    version_id = "approval-v3"
    queue: str | None = None


class Dedicated(Pinned):
    queue = "broker.special"


@pytest.fixture
def settings(settings: Settings, database_url: str) -> Settings:
    """The suite's settings on each database, so ``factory`` runs on SQLite and PostgreSQL."""
    return settings.replace(database_url=database_url)


BODY = Submission("InvoiceProcess", {"InvoiceNumber": "INV-1"}, {"amount": 5})


def test_a_submission_writes_the_request_its_event_and_its_pending_outbox_row(
    factory: sessionmaker[Session],
) -> None:
    # When a client submits (no idempotency key, the default path)
    before = utcnow()
    with transaction(factory) as session:
        done = submit(session, client_id="ClientA", submission=BODY, workflow=Pinned())
    after = utcnow()
    # Then the answer names the new request, its one outbox row and the message to send
    assert done.created is True
    (outbox_id,) = done.outbox_ids
    assert done.messages == (
        OutboxMessage(outbox_id, RUN_REQUEST, DEFAULT_QUEUE, {"request_id": done.request_id},
                      done.request_id),
    )  # fmt: skip
    assert done.view["correlationId"] == done.request_id
    assert done.view["status"] == "Queued"
    assert done.view["workflow"]["definitionId"] == "approval"
    with transaction(factory, write=False) as session:
        record = session.get(Request, done.request_id)
        assert record is not None
        assert (record.client_id, record.client_key) == ("ClientA", "clienta")
        assert (record.request_type, record.request_type_key) == (
            "InvoiceProcess",
            "invoiceprocess",
        )
        assert (record.keys, record.payload, record.status) == (
            {"InvoiceNumber": "INV-1"}, {"amount": 5}, "Queued",
        )  # fmt: skip
        assert (record.idempotency_key, record.body_hash) == (None, BODY.body_hash())
        assert (record.definition_id, record.definition_version, record.definition_version_id) == (
            "approval", 3, "approval-v3",
        )  # fmt: skip
        assert before <= record.submitted_at <= after
        assert record.updated_at == record.submitted_at
        (event,) = session.scalars(select(RequestEvent))
        assert (event.request_id, event.event_type, event.source) == (
            done.request_id, "RequestSubmitted", "ingress",
        )  # fmt: skip
        assert event.timestamp == record.submitted_at
        assert event.message == "Submitted by ClientA"
        assert event.properties == {
            "requestType": "InvoiceProcess",
            "definitionId": "approval",
            "version": 3,
            "idempotencyKey": None,
        }
        row = session.get(OutboxRow, outbox_id)
        assert row is not None
        assert (row.task_name, row.queue, row.args, row.request_id) == (
            RUN_REQUEST, DEFAULT_QUEUE, {"request_id": done.request_id}, done.request_id,
        )  # fmt: skip
        assert (row.state, row.attempts, row.dispatched_at, row.lease_expires_at) == (
            "pending", 0, None, None,
        )  # fmt: skip
        assert row.available_at == row.created_at == record.submitted_at


def test_a_fast_path_submission_is_written_dispatched_with_its_lease_on_its_queue(
    factory: sessionmaker[Session],
) -> None:
    with transaction(factory) as session:
        done = submit(
            session, client_id="ClientA", submission=BODY, workflow=Dedicated(),
            dispatch_lease=30, source="console",
        )  # fmt: skip
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, done.outbox_ids[0])
        record = session.get(Request, done.request_id)
        event = session.scalars(select(RequestEvent)).one()
        assert row is not None
        assert record is not None
        assert (row.state, row.attempts, row.queue) == ("dispatched", 1, "broker.special")
        assert row.dispatched_at == record.submitted_at
        assert row.lease_expires_at == record.submitted_at + dt.timedelta(seconds=30)
        assert event.source == "console"
    assert done.messages[0].queue == "broker.special"


def test_the_same_idempotency_key_answers_the_earlier_request_or_a_conflict(
    factory: sessionmaker[Session],
) -> None:
    keyed = Submission(BODY.request_type, BODY.keys, BODY.payload, idempotency_key="k-1")
    with transaction(factory) as session:
        first = submit(session, client_id="ClientA", submission=keyed, workflow=Pinned())
    # When the same client (in another case) sends the same body under the key again
    with transaction(factory) as session:
        again = submit(session, client_id="CLIENTA", submission=keyed, workflow=Pinned())
    # Then it gets the first request, created earlier, and nothing new is written
    assert (again.request_id, again.created, again.outbox_ids) == (first.request_id, False, ())
    assert again.view == first.view
    # When it sends another body under the same key, Then the conflict names both
    other = Submission(BODY.request_type, BODY.keys, {"amount": 6}, idempotency_key="k-1")
    with pytest.raises(Conflict) as info, transaction(factory) as session:
        submit(session, client_id="ClientA", submission=other, workflow=Pinned())
    assert info.value.message == "Idempotency-Key was already used with a different body"
    assert info.value.details == {"idempotencyKey": "k-1", "correlationId": first.request_id}
    with transaction(factory, write=False) as session:
        assert session.scalar(select(func.count()).select_from(Request)) == 1
        assert session.scalar(select(func.count()).select_from(OutboxRow)) == 1
        event = session.scalars(select(RequestEvent)).one()
        assert event.properties is not None
        assert event.properties["idempotencyKey"] == "k-1"
    # And another client may use the same key for its own request
    with transaction(factory) as session:
        theirs = submit(session, client_id="ClientB", submission=keyed, workflow=Pinned())
    assert theirs.created
    assert theirs.request_id != first.request_id


def test_a_paused_runtime_refuses_with_a_message_saying_so(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        set_paused(session, True)
    with pytest.raises(RuntimePaused) as info, transaction(factory) as session:
        submit(session, client_id="ClientA", submission=BODY, workflow=Pinned())
    assert info.value.message == "The workflow runtime is paused; try again later"


def test_a_workflow_that_names_no_activation_strategy_always_starts(
    factory: sessionmaker[Session],
) -> None:
    # Given a request of the same workflow still active
    with transaction(factory) as session:
        submit(session, client_id="ClientA", submission=BODY, workflow=Pinned())
    # When another is submitted for a workflow without an activation strategy
    with transaction(factory) as session:
        second = submit(session, client_id="ClientA", submission=BODY, workflow=Pinned())
    # Then it is accepted: the default strategy is "always"
    assert second.created


def test_a_callback_url_is_taken_with_the_clients_secret_and_refused_without_one(
    factory: sessionmaker[Session],
) -> None:
    # Given a submission that names a callbackUrl
    body = Submission(
        "InvoiceProcess", {"InvoiceNumber": "INV-2"}, callback_url="https://hooks.test/done"
    )
    # When a client allowed callbacks (it has a signing secret) submits it, then it is taken
    with transaction(factory) as session:
        done = submit(
            session,
            client_id="ClientA",
            submission=body,
            workflow=Pinned(),
            callback_secret="signing-secret",
        )
    assert done.created is True
    # And a client without a secret is refused, naming the field, and nothing is written
    with pytest.raises(BadRequest) as refused, transaction(factory) as session:
        submit(session, client_id="ClientB", submission=body, workflow=Pinned())
    assert refused.value.details["field"] == "callbackUrl"
    assert refused.value.message == "this client may not name a callbackUrl"
    with transaction(factory, write=False) as session:
        assert session.scalar(select(func.count()).select_from(Request)) == 1
