"""The request status state machine: the allowed moves as data, and the guarded move itself."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime import statuses
from broker.store import db
from broker.store.models import (
    Request,
    RequestEvent,
    RequestStatus,
    WebhookDelivery,
    WebhookEndpoint,
    utcnow,
)

Q, P = RequestStatus.QUEUED, RequestStatus.PROCESSING
C, F, X = RequestStatus.COMPLETED, RequestStatus.FAULTED, RequestStatus.CANCELLED


def _insert(factory: sessionmaker[Session], request_id: str, status: RequestStatus) -> None:
    now = utcnow()
    with db.transaction(factory) as session:
        session.add(
            Request(
                id=request_id,
                client_id="ClientA",
                client_key="clienta",
                request_type="T",
                request_type_key="t",
                keys={},
                status=status.value,
                definition_id="d",
                definition_version=1,
                definition_version_id="d-v1",
                submitted_at=now,
                updated_at=now,
            )
        )


def _state(factory: sessionmaker[Session], request_id: str) -> tuple[str, list[str]]:
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, request_id)
        assert record is not None
        events = session.scalars(
            select(RequestEvent.event_type).where(RequestEvent.request_id == request_id)
        ).all()
        return record.status, list(events)


def _stamp(at: dt.datetime) -> str:
    """A webhook body's timestamp."""
    return at.isoformat().replace("+00:00", "Z")


def test_every_status_has_its_moves_and_only_faulted_leaves_a_terminal_status() -> None:
    assert set(statuses.TRANSITIONS) == set(RequestStatus)
    for status, moves in statuses.TRANSITIONS.items():
        if status is F:
            assert dict(moves) == {P: "RequestReplayed"}
        elif status.terminal:
            assert not moves
        else:
            assert {C, F, X} <= set(moves)
    assert statuses.TERMINAL == ("Completed", "Faulted", "Cancelled")
    assert statuses.INITIAL is Q


def test_a_move_not_in_the_table_is_refused_before_any_sql() -> None:
    with pytest.raises(ValueError, match="no single transition"):
        statuses.event_of((C,), P)
    # Processing is reached two ways, with two events: a move must say which
    with pytest.raises(ValueError, match="no single transition"):
        statuses.event_of((Q, F), P)
    assert statuses.event_of((Q,), P) == "RequestProcessing"
    assert statuses.event_of(statuses.ACTIVE, X) == "RequestCancelled"


def test_a_terminal_request_never_moves_and_writes_no_event(
    factory: sessionmaker[Session],
) -> None:
    # Given a completed request
    _insert(factory, "r-1", C)
    # When a late fault and a cancel arrive
    with db.transaction(factory) as session:
        faulted = statuses.finish_request(
            session, "r-1", sub_status="Faulted", output=None, error="late"
        )
        cancelled = statuses.cancel(session, "r-1", source="api", now=utcnow())
    # Then nothing changed
    assert faulted is None
    assert cancelled is False
    assert _state(factory, "r-1") == ("Completed", [])


def test_replay_is_the_one_way_out_of_faulted(factory: sessionmaker[Session]) -> None:
    # Given a faulted request
    _insert(factory, "r-2", F)
    with db.transaction(factory) as session:
        # When a worker tries to start it, it stays Faulted
        assert statuses.start_processing(session, "r-2", "i-2") is False
        # When an operator replays it, it is Processing again with its event
        reopened = statuses.reopen(session, "r-2", source="admin", properties={}, now=utcnow())
    assert reopened is True
    assert _state(factory, "r-2") == ("Processing", ["RequestReplayed"])


def test_queued_to_processing_to_completed_writes_one_event_per_move(
    factory: sessionmaker[Session],
) -> None:
    _insert(factory, "r-3", Q)
    with db.transaction(factory) as session:
        assert statuses.start_processing(session, "r-3", "i-3") is True
        # A redelivered start changes nothing
        assert statuses.start_processing(session, "r-3", "i-3") is False
        done = statuses.finish_request(
            session, "r-3", sub_status="Finished", output={"ok": True}, error=None
        )
    assert done == "Completed"
    assert _state(factory, "r-3") == ("Completed", ["RequestProcessing", "RequestCompleted"])


def test_a_cancel_records_when_and_through_what(factory: sessionmaker[Session]) -> None:
    # Given a queued request
    _insert(factory, "r-4", Q)
    now = utcnow()
    # When the console cancels it
    with db.transaction(factory) as session:
        assert statuses.cancel(session, "r-4", source="console", now=now) is True
    # Then it is Cancelled at that moment, and its event says through what
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, "r-4")
        assert record is not None
        assert (record.status, record.completed_at) == ("Cancelled", now)
        event = session.scalars(select(RequestEvent).where(RequestEvent.request_id == "r-4")).one()
        assert (event.event_type, event.source) == ("RequestCancelled", "console")
        assert event.message == "Cancelled through the console"


def test_a_run_through_records_both_moves_as_a_start_then_a_finish_would(
    factory: sessionmaker[Session],
) -> None:
    # Given a queued request whose client listens to every status change
    _insert(factory, "r-5", Q)
    with db.transaction(factory) as session:
        session.add(
            WebhookEndpoint(
                id="we-1",
                client_id="ClientA",
                client_key="clienta",
                url="https://hooks.example/in",
                events=["request.processing", "request.faulted"],
                secrets=["whsec_x"],
                source="api",
            )
        )
    # When its first step faulted before its start was written
    now = utcnow() - dt.timedelta(minutes=1)
    started = now - dt.timedelta(seconds=30)
    with db.transaction(factory) as session:
        status = statuses.run_through(
            session,
            "r-5",
            "i-5",
            started=started,
            sub_status="Faulted",
            output=None,
            error="step failed: boom",
            now=now,
        )
        # (a second run-through finds it no longer queued and writes nothing)
        again = statuses.run_through(
            session, "r-5", "i-5", started=now, sub_status="Finished", output=1, error=None, now=now
        )
    assert (status, again) == ("Faulted", None)
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, "r-5")
        assert record is not None
        assert (record.status, record.instance_id, record.error_detail) == (
            "Faulted",
            "i-5",
            "step failed: boom",
        )
        assert (record.completed_at, record.updated_at) == (now, now)
        # Then it has the start's event at its start, the fault's at its end, both the worker's
        events = session.scalars(
            select(RequestEvent)
            .where(RequestEvent.request_id == "r-5")
            .order_by(RequestEvent.timestamp)
        ).all()
        assert [(e.event_type, e.source, e.properties, e.message, e.timestamp) for e in events] == [
            ("RequestProcessing", "worker", {"instanceId": "i-5"}, None, started),
            ("RequestFaulted", "worker", {"status": "Faulted"}, "step failed: boom", now),
        ]
        # And one webhook delivery per move, each dated at its move
        deliveries = session.scalars(
            select(WebhookDelivery)
            .where(WebhookDelivery.request_id == "r-5")
            .order_by(WebhookDelivery.created_at)
        ).all()
        assert [
            (
                d.endpoint_id,
                d.event_type,
                d.created_at,
                d.next_attempt_at,
                json.loads(d.body)["timestamp"],
                json.loads(d.body)["data"]["status"],
            )
            for d in deliveries
        ] == [
            ("we-1", "request.processing", started, started, _stamp(started), "Processing"),
            ("we-1", "request.faulted", now, now, _stamp(now), "Faulted"),
        ]
