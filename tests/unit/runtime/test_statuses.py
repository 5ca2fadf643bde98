"""The request status state machine: the allowed moves as data, and the guarded move itself."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime.requests import transitions as statuses
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


def _request(factory: sessionmaker[Session], request_id: str) -> Request:
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, request_id)
        assert record is not None
        return record


def _state(factory: sessionmaker[Session], request_id: str) -> tuple[str, list[str]]:
    record = _request(factory, request_id)
    with db.transaction(factory, write=False) as session:
        events = session.scalars(
            select(RequestEvent.event_type).where(RequestEvent.request_id == request_id)
        ).all()
        return record.status, list(events)


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


def test_a_replay_clears_the_fault_and_records_when_through_what_and_why(
    factory: sessionmaker[Session],
) -> None:
    # Given a request that faulted with an error
    _insert(factory, "r-7", Q)
    with db.transaction(factory) as session:
        statuses.start_processing(session, "r-7", "i-7")
        statuses.finish_request(session, "r-7", sub_status="Faulted", output=None, error="boom")
    now = utcnow() - dt.timedelta(seconds=1)  # when the operator replayed it
    # When the operator replays its dead letter
    with db.transaction(factory) as session:
        assert statuses.reopen(
            session, "r-7", source="admin", properties={"deadLetterId": "dl-7"}, now=now
        )
        # (a second replay finds it no longer Faulted)
        assert not statuses.reopen(session, "r-7", source="admin", properties={}, now=now)
    # Then it is Processing again at that moment, its fault cleared
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, "r-7")
        assert record is not None
        assert (record.status, record.error_detail, record.completed_at, record.updated_at) == (
            "Processing",
            None,
            None,
            now,
        )
        # And one event says when, through what, why and for which dead letter
        event = session.scalars(
            select(RequestEvent)
            .where(RequestEvent.request_id == "r-7")
            .order_by(RequestEvent.id.desc())
            .limit(1)
        ).one()
        assert (event.event_type, event.source, event.timestamp, event.properties) == (
            "RequestReplayed",
            "admin",
            now,
            {"deadLetterId": "dl-7"},
        )
        assert event.message == "Dead letter replayed; resuming at the failed activity"
    assert _state(factory, "r-7")[1] == ["RequestProcessing", "RequestFaulted", "RequestReplayed"]


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
    now = utcnow() - dt.timedelta(seconds=1)  # when the cancel was asked
    # When the console cancels it
    with db.transaction(factory) as session:
        assert statuses.cancel(session, "r-4", source="console", now=now) is True
    # Then it is Cancelled at that moment, and its event says through what
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, "r-4")
        assert record is not None
        assert (record.status, record.completed_at, record.updated_at) == ("Cancelled", now, now)
        event = session.scalars(select(RequestEvent).where(RequestEvent.request_id == "r-4")).one()
        assert (event.event_type, event.source, event.timestamp) == (
            "RequestCancelled",
            "console",
            now,
        )
        assert event.message == "Cancelled through the console"


def test_a_request_whose_first_step_ended_runs_through_processing_in_one_move(
    factory: sessionmaker[Session],
) -> None:
    # Given a queued request whose workflow started, then faulted in its first step, and a
    # webhook endpoint of its client that hears of both moves
    _insert(factory, "r-5", Q)
    with db.transaction(factory) as session:
        session.add(
            WebhookEndpoint(
                id="hook-1",
                client_id="ClientA",
                client_key="clienta",
                url="https://hooks.example/a",
                events=["request.processing", "request.faulted"],
                secrets=["whsec_x"],
                source="api",
            )
        )
    started = utcnow() - dt.timedelta(seconds=2)
    now = started + dt.timedelta(seconds=1)
    # When the step's outcome is saved before its start was written
    with db.transaction(factory) as session:
        status = statuses.run_through(
            session,
            "r-5",
            "inst-5",
            started=started,
            sub_status="Faulted",
            output=None,
            error="boom",
            now=now,
        )
    # Then the request is Faulted with the step's error, and both moves have their event: the
    # start at its own time naming the instance, then the fault
    assert status == "Faulted"
    with db.transaction(factory, write=False) as session:
        record = session.get(Request, "r-5")
        assert record is not None
        assert (record.status, record.instance_id, record.error_detail) == (
            "Faulted",
            "inst-5",
            "boom",
        )
        assert (record.completed_at, record.updated_at) == (now, now)
        events = [
            (e.event_type, e.source, e.timestamp, e.message, e.properties)
            for e in session.scalars(
                select(RequestEvent)
                .where(RequestEvent.request_id == "r-5")
                .order_by(RequestEvent.timestamp)
            )
        ]
        deliveries = [
            (d.event_type, d.created_at)
            for d in session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.created_at))
        ]
    assert events == [
        ("RequestProcessing", "worker", started, None, {"instanceId": "inst-5"}),
        ("RequestFaulted", "worker", now, "boom", {"status": "Faulted"}),
    ]
    # And the endpoint is told of each move, at the time of each
    assert deliveries == [("request.processing", started), ("request.faulted", now)]
    # And a request no longer Queued is not run through again
    with db.transaction(factory) as session:
        again = statuses.run_through(
            session,
            "r-5",
            "inst-5",
            started=started,
            sub_status="Finished",
            output=None,
            error=None,
            now=now,
        )
    assert again is None
    assert _state(factory, "r-5") == ("Faulted", ["RequestProcessing", "RequestFaulted"])


def test_a_request_whose_first_step_finished_runs_through_to_completed_with_its_result(
    factory: sessionmaker[Session],
) -> None:
    _insert(factory, "r-6", Q)
    now = utcnow()
    with db.transaction(factory) as session:
        status = statuses.run_through(
            session,
            "r-6",
            "inst-6",
            started=now,
            sub_status="Finished",
            output={"approved": True},
            error=None,
            now=now,
        )
    assert status == "Completed"
    record = _request(factory, "r-6")
    assert (record.status, record.result, record.error_detail) == (
        "Completed",
        {"approved": True},
        None,
    )
    assert _state(factory, "r-6") == ("Completed", ["RequestProcessing", "RequestCompleted"])


def test_an_event_noted_before_a_move_stays_before_it_in_the_audit_trail(
    factory: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a processing request
    _insert(factory, "r-5", P)
    # When one transaction notes an event (an ORM object, flushed later) and then faults the
    # request (its event written at once, by a statement), without autoflush as a step's save
    with caplog.at_level("INFO", logger="broker.audit"), db.transaction(factory) as session:
        session.autoflush = False
        statuses.note(session, "r-5", "RemoteDispatchFailed", source="worker", message="boom")
        statuses.finish_request(session, "r-5", sub_status="Faulted", output=None, error="boom")
    # Then the trail keeps the order they were recorded in
    with db.transaction(factory, write=False) as session:
        events = session.scalars(
            select(RequestEvent.event_type)
            .where(RequestEvent.request_id == "r-5")
            .order_by(RequestEvent.id)
        ).all()
    assert list(events) == ["RemoteDispatchFailed", "RequestFaulted"]
    # And both were logged once, after the commit
    logged = [r.event_type for r in caplog.records if r.name == "broker.audit"]  # type: ignore[attr-defined]
    assert logged == ["RemoteDispatchFailed", "RequestFaulted"]


def test_a_noted_event_keeps_the_time_it_is_given_or_else_takes_the_current_one(
    factory: sessionmaker[Session],
) -> None:
    # Given a processing request
    _insert(factory, "r-7", P)
    asked = utcnow() - dt.timedelta(minutes=5)  # when the noted thing happened
    # When one event is noted with its time and one without
    before = utcnow()
    with db.transaction(factory) as session:
        statuses.note(session, "r-7", "RemoteDispatchFailed", source="worker", now=asked)
        statuses.note(session, "r-7", "RemoteDispatchRetried", source="worker")
    after = utcnow()
    # Then the first keeps its time, and the second has the moment it was noted
    with db.transaction(factory, write=False) as session:
        given, current = session.scalars(
            select(RequestEvent.timestamp)
            .where(RequestEvent.request_id == "r-7")
            .order_by(RequestEvent.id)
        ).all()
    assert given == asked
    assert before <= current <= after
