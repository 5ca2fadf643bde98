"""The ingress's fast path on SQLite and PostgreSQL: a submission's row is inserted already
dispatched and sent without being read back; a lost or failed send still reaches the relay."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.errors import RuntimePaused
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.pause import is_paused_cached, paused_if_known, set_paused
from broker.runtime.outbox.publisher import CelerySender, OutboxPublisher
from broker.runtime.ports import NullPublisher
from broker.runtime.requests.submission import Submission, Submitted, submit
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow, RuntimeFlag, utcnow
from broker.wiring.runtime import make_publisher
from tests.support.doubles import RecordingSender
from tests.support.runtime import runtime_env


class Pinned:
    definition_id = "approval"
    version = 1
    version_id = "approval-v1"
    queue = "broker.special"


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        runtime_env(
            tmp_path, database_url=database_url, workflows=tmp_path, BROKER_OUTBOX_LEASE="60"
        )
    )


@pytest.fixture
def locks(tmp_path: Path) -> FileLockProvider:
    return FileLockProvider(tmp_path / "locks")


def submit_one(factory: sessionmaker[Session], lease: float | None) -> Submitted:
    with transaction(factory) as session:
        return submit(
            session,
            client_id="TestClient",
            submission=Submission(request_type="Approval", keys={}),
            workflow=Pinned(),
            dispatch_lease=lease,
        )


def row_of(factory: sessionmaker[Session], row_id: str) -> OutboxRow:
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        session.expunge(row)
        return row


def test_a_fast_path_submission_is_inserted_dispatched_and_sent_as_written(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given a publisher that takes the fast path
    sender = RecordingSender()
    publisher = OutboxPublisher(settings, factory, sender)
    # When a submission is recorded with its lease and published
    submitted = submit_one(factory, publisher.dispatch_lease)
    publisher.publish_new(submitted.messages)
    # Then its row was inserted dispatched, with one attempt and a lease of outbox_lease
    (outbox_id,) = submitted.outbox_ids
    row = row_of(factory, outbox_id)
    assert (row.state, row.attempts) == ("dispatched", 1)
    assert row.lease_expires_at is not None
    assert row.dispatched_at is not None
    lease = row.lease_expires_at - row.dispatched_at
    assert lease == dt.timedelta(seconds=settings.outbox_lease)
    # And the task sent is the one the row describes
    assert [(r.id, r.task_name, r.queue, dict(r.args)) for r in sender.sent] == [
        (outbox_id, row.task_name, "broker.special", {"request_id": submitted.request_id})
    ]


def test_without_a_lease_the_submission_stays_pending_for_the_relay(
    factory: sessionmaker[Session],
) -> None:
    # Given a caller without a fast path
    # When it submits
    submitted = submit_one(factory, NullPublisher().dispatch_lease)
    # Then the row waits, pending and unattempted, for the relay
    row = row_of(factory, submitted.outbox_ids[0])
    assert (row.state, row.attempts, row.lease_expires_at) == ("pending", 0, None)


def test_the_relay_republishes_a_lost_fast_path_send_when_its_lease_runs_out(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given a submission committed as dispatched whose send never happened (the process died)
    submitted = submit_one(factory, settings.outbox_lease)
    (outbox_id,) = submitted.outbox_ids
    # When the relay looks before the lease runs out, then after it
    with transaction(factory) as session:
        early = [r.id for r in outbox.claim_due(session, limit=10)]
    later = utcnow() + dt.timedelta(seconds=settings.outbox_lease + 1)
    with transaction(factory) as session:
        late = [r.id for r in outbox.claim_due(session, limit=10, now=later)]
    # Then it leaves the row alone during the lease and claims it after
    assert early == []
    assert late == [outbox_id]


def test_a_finished_fast_path_row_is_marked_done(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given a submission committed as dispatched
    (outbox_id,) = submit_one(factory, settings.outbox_lease).outbox_ids
    # When its consumer finishes it
    with transaction(factory) as session:
        finished = outbox.mark_done(session, outbox_id)
    # Then the row is done and the relay never claims it again
    assert finished
    assert row_of(factory, outbox_id).state == "done"


def test_a_failed_fast_path_send_hands_the_row_back_to_the_relay_at_once(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given a submission committed as dispatched and a transport that is down
    submitted = submit_one(factory, settings.outbox_lease)
    (outbox_id,) = submitted.outbox_ids
    # When the fast path fails to send it
    OutboxPublisher(settings, factory, RecordingSender(fail=True)).publish_new(submitted.messages)
    # Then the row is pending again, due now, and the next relay run publishes it
    row = row_of(factory, outbox_id)
    assert row.state == "pending"
    assert row.last_error is not None
    assert "transport down" in row.last_error
    sender = RecordingSender()
    report = outbox.relay(settings, factory, sender, locks)
    assert report.published == 1
    assert sender.ids == [outbox_id]


def test_after_a_failed_send_the_fast_path_stands_aside_and_the_relay_publishes(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given a fast path whose transport just failed a send (down, or cut off by a partition)
    down = RecordingSender(fail=True)
    publisher = OutboxPublisher(settings, factory, down)
    publisher.publish_new(submit_one(factory, settings.outbox_lease).messages)
    # When more submissions commit right after
    later = [submit_one(factory, settings.outbox_lease) for _ in range(3)]
    down.fail = False
    for submitted in later:
        publisher.publish_new(submitted.messages)
    # Then the fast path sent none of them (no caller waits for a send that would fail): each
    # row is handed to the relay at once, which publishes it
    assert down.ids == []
    for submitted in later:
        (outbox_id,) = submitted.outbox_ids
        row = row_of(factory, outbox_id)
        assert row.state == "pending"
        assert "skipped" in (row.last_error or "")
    sender = RecordingSender()
    assert outbox.relay(settings, factory, sender, locks).published == 4


def test_the_paused_flag_is_cached_but_a_local_change_is_seen_at_once(
    factory: sessionmaker[Session],
) -> None:
    # Given a runtime that is running, as this process last read it
    with transaction(factory, write=False) as session:
        assert is_paused_cached(session) is False
    assert paused_if_known(factory) is False
    # When another process pauses it (a direct write this process's cache does not see)
    with transaction(factory) as session:
        session.add(RuntimeFlag(name="paused", value=True))
    # Then the cached flag holds for its time to live, and a fresh read sees the pause
    with transaction(factory, write=False) as session:
        assert is_paused_cached(session) is False
        assert is_paused_cached(session, ttl=0) is True
    # And a pause made through this process is seen at once by the submissions
    with transaction(factory) as session:
        set_paused(session, False)
    with transaction(factory) as session:
        set_paused(session, True)
    assert paused_if_known(factory) is None
    with pytest.raises(RuntimePaused):
        submit_one(factory, None)


def test_the_ingress_publisher_sends_no_task_sent_event(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given the ingress's fast-path publisher
    publisher = make_publisher(settings, factory)
    # Then its Celery app does not emit the task-sent event (the workers' events remain)
    assert isinstance(publisher.sender, CelerySender)
    assert publisher.sender.app.conf.task_send_sent_event is False


@pytest.mark.parametrize("transport", ["filesystem", "redis"])
def test_a_batch_of_new_submissions_is_sent_together_on_one_producer(
    settings: Settings,
    factory: sessionmaker[Session],
    transport: str,
    request: pytest.FixtureRequest,
) -> None:
    # Given the ingress's real publisher on a real transport
    if transport == "redis":
        settings = settings.replace(queue_url=str(request.getfixturevalue("redis_url")))
    publisher = make_publisher(settings, factory)
    assert isinstance(publisher.sender, CelerySender)
    app = publisher.sender.app
    # And three submissions committed together, as the group committer writes them
    with transaction(factory) as session:
        done = [submit_one_in(session, settings.outbox_lease) for _ in range(3)]
    messages = [message for submitted in done for message in submitted.messages]
    # When the fast path publishes them in one call
    acquired: list[object] = []
    real = app.producer_or_acquire

    def counted(producer: object = None) -> object:
        acquired.append(producer)
        return real(producer)

    app.producer_or_acquire = counted  # type: ignore[method-assign]
    try:
        publisher.publish_new(messages)
    finally:
        app.producer_or_acquire = real  # type: ignore[method-assign]
    # Then one producer was acquired, and each send reused it
    assert acquired[0] is None
    assert len(acquired) == 1 + len(messages)
    assert len({id(producer) for producer in acquired[1:]}) == 1
    # And the three tasks are on their queue, each under its outbox id
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue(Pinned.queue)
        received = []
        for _ in messages:
            message = queue.get(timeout=5)
            received.append(message.headers["id"])
            message.ack()
        queue.close()
    assert sorted(received) == sorted(m.outbox_id for m in messages)
    # And none was handed back to the relay
    assert {row_of(factory, m.outbox_id).state for m in messages} == {"dispatched"}


def submit_one_in(session: Session, lease: float | None) -> Submitted:
    return submit(
        session,
        client_id="TestClient",
        submission=Submission(request_type="Approval", keys={}),
        workflow=Pinned(),
        dispatch_lease=lease,
    )


def test_a_batch_the_transport_refuses_goes_back_to_the_relay_whole(
    settings: Settings, factory: sessionmaker[Session], redis_url: str
) -> None:
    # Given the ingress's real publisher on Redis, which sends a batch in one round trip, that
    # has sent to the queue before (so it declares it no more)
    import redis

    settings = settings.replace(queue_url=redis_url)
    publisher = make_publisher(settings, factory)
    publisher.publish_new(submit_one(factory, settings.outbox_lease).messages)
    # And a queue key Redis cannot push onto now (it holds a string: the batch's LPUSHes fail)
    server = redis.Redis.from_url(redis_url)
    server.set(Pinned.queue, "not a list")
    # When three submissions committed together are published
    with transaction(factory) as session:
        done = [submit_one_in(session, settings.outbox_lease) for _ in range(3)]
    publisher.publish_new([message for submitted in done for message in submitted.messages])
    # Then none is known to be sent, so each row went back to the relay, due now
    rows = [row_of(factory, outbox_id) for submitted in done for outbox_id in submitted.outbox_ids]
    assert {row.state for row in rows} == {"pending"}
    assert all((row.last_error or "").startswith("publish failed") for row in rows)
    assert all(row.available_at <= utcnow() for row in rows)
    assert server.get(Pinned.queue) == b"not a list"
