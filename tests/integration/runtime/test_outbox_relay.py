"""The outbox relay and the fast path on SQLite and PostgreSQL (no worker: a recording sender)."""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.errors import LockLost
from broker.runtime import ids
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.pause import set_paused
from broker.runtime.outbox.publisher import OutboxPublisher
from broker.settings import Settings
from broker.store.db import (
    acquire_lease,
    dispose_engines,
    fence,
    make_engine,
    make_session_factory,
    transaction,
    upgrade,
)
from broker.store.models import DeadLetter, Lease, OutboxRow, utcnow
from tests.support.doubles import RecordingSender
from tests.support.runtime import runtime_env


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        runtime_env(
            tmp_path,
            database_url=database_url,
            workflows=tmp_path / "wf",
            BROKER_OUTBOX_BATCH_SIZE="10",
            BROKER_MAX_OUTBOX_DELIVERY_ATTEMPTS="3",
            BROKER_MAX_WORKER_DEATHS="2",
            BROKER_OUTBOX_LEASE="60",
        )
    )


@pytest.fixture
def locks(tmp_path: Path) -> FileLockProvider:
    return FileLockProvider(tmp_path / "locks")


def add_rows(factory: sessionmaker[Session], count: int, *, delay: float = 0.0) -> list[str]:
    written = []
    with transaction(factory) as session:
        for n in range(count):
            row = outbox.enqueue(
                session,
                outbox_id=f"row-{delay}-{n:04d}",
                task_name="broker.run_request",
                queue="broker.default",
                args={"request_id": f"r{n}"},
                available_at=utcnow() + dt.timedelta(seconds=delay),
            )
            written.append(row.id)
    return written


def states(factory: sessionmaker[Session]) -> dict[str, tuple[str, int]]:
    with transaction(factory, write=False) as session:
        return {r.id: (r.state, r.attempts) for r in session.scalars(select(OutboxRow))}


def test_relay_publishes_every_due_row_once_in_batches(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given 25 due rows and 2 rows due later
    due = add_rows(factory, 25)
    later = add_rows(factory, 2, delay=3600)
    sender = RecordingSender()
    # When the relay runs twice
    first = outbox.relay(settings, factory, sender, locks)
    second = outbox.relay(settings, factory, sender, locks)
    # Then each due row was published once (in batches of 10) and marked dispatched
    assert first.published == 25
    assert second.published == 0
    assert sorted(sender.ids) == sorted(due)
    rows = states(factory)
    assert all(rows[r] == ("dispatched", 1) for r in due)
    assert all(rows[r] == ("pending", 0) for r in later)


def test_a_relay_batch_claims_and_marks_its_rows_in_one_statement_each(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given a full batch of due rows, and a fenced lease
    due = add_rows(factory, settings.outbox_batch_size)
    with transaction(factory) as session:
        epoch = acquire_lease(session, outbox.RELAY_LEASE, "me", settings.lock_ttl)
    assert epoch is not None
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    engine = make_engine(settings.database_url)
    event.listen(engine, "before_cursor_execute", count)
    # When one batch runs
    try:
        with transaction(factory) as session:
            report = outbox.relay_batch(
                session, settings, RecordingSender(), owner="me", epoch=epoch
            )
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # Then all were published, with one claim and one UPDATE for the batch, not one per row
    assert report.published == len(due)
    outbox_writes = [s for s in statements if s.lstrip().upper().startswith("UPDATE OUTBOX")]
    claims = [s for s in statements if "FROM outbox" in s and "outbox.available_at" in s]
    assert len(outbox_writes) == 1, statements
    assert len(claims) == 1, statements
    assert all(state == ("dispatched", 1) for state in states(factory).values())


def test_a_dispatched_row_whose_lease_ran_out_is_published_again(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given a row published once whose consumer never finished it
    (row_id,) = add_rows(factory, 1)
    sender = RecordingSender()
    outbox.relay(settings, factory, sender, locks)
    with transaction(factory) as session:
        session.get(OutboxRow, row_id).lease_expires_at = utcnow() - dt.timedelta(seconds=1)
    # When the relay runs again
    outbox.relay(settings, factory, sender, locks)
    # Then it was published a second time
    assert sender.ids == [row_id, row_id]
    assert states(factory)[row_id] == ("dispatched", 2)


def test_a_finished_row_is_never_published_again(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    (row_id,) = add_rows(factory, 1)
    with transaction(factory) as session:
        assert outbox.mark_done(session, row_id)
        assert not outbox.mark_done(session, row_id)
    sender = RecordingSender()
    outbox.relay(settings, factory, sender, locks)
    assert sender.ids == []


def test_a_row_that_never_finishes_becomes_an_outbox_dead_letter_and_replays(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given a row published max_outbox_delivery_attempts (3) times without finishing
    (row_id,) = add_rows(factory, 1)
    with transaction(factory) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        row.request_id, row.instance_id = "req-of-row", "inst-of-row"
    sender = RecordingSender()
    for _ in range(3):
        outbox.relay(settings, factory, sender, locks)
        with transaction(factory) as session:
            session.get(OutboxRow, row_id).lease_expires_at = utcnow() - dt.timedelta(seconds=1)
    # When the relay meets it again
    report = outbox.relay(settings, factory, sender, locks)
    # Then it is dead, with a replayable outbox dead letter, and not published a fourth time
    assert report.dead == 1
    assert len(sender.ids) == 3
    assert states(factory)[row_id] == ("dead", 3)
    with transaction(factory) as session:
        letter = session.scalars(select(DeadLetter).where(DeadLetter.source_id == row_id)).one()
        assert (letter.kind, letter.reason, letter.name) == (
            "outbox",
            "Undeliverable",
            "broker.run_request",
        )
        # ... whose id derives from the row (a second burial finds it), naming the row's work
        assert letter.id == ids.dead_letter_id_for("outbox", row_id)
        assert (letter.request_id, letter.instance_id) == ("req-of-row", "inst-of-row")
        assert (letter.error, letter.attempts) == ("not finished after 3 deliveries", 3)
        assert letter.data == {
            "taskName": "broker.run_request",
            "queue": "broker.default",
            "args": {"request_id": "r0"},
        }
        dead_row = session.get(OutboxRow, row_id)
        assert dead_row is not None
        assert dead_row.finished_at is not None
        assert dead_row.lease_expires_at is None
        # When an operator replays it, the same task is written as a new pending row
        replayed = dead_letter_admin.replay(session, letter.id)
    outbox.relay(settings, factory, sender, locks)
    assert sender.ids[-1] == replayed.new_id
    with transaction(factory, write=False) as session:
        again = session.get(OutboxRow, replayed.new_id)
        assert again is not None
        assert (again.task_name, again.queue, again.args) == (
            "broker.run_request",
            "broker.default",
            {"request_id": "r0"},
        )


def test_a_dead_letter_keeps_the_last_publish_error(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given a row at its last allowed delivery whose publish failed last time
    (row_id,) = add_rows(factory, 1)
    with transaction(factory) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        row.attempts = 3
        row.last_error = "publish failed: transport down"
    # When the relay meets it
    assert outbox.relay(settings, factory, RecordingSender(), locks).dead == 1
    # Then its dead letter says why, not only how often
    with transaction(factory, write=False) as session:
        letter = session.get(DeadLetter, ids.dead_letter_id_for("outbox", row_id))
        assert letter is not None
        assert letter.error == "publish failed: transport down"


class RecordingLocks:
    """File locks that record how each was asked for."""

    def __init__(self, inner: FileLockProvider) -> None:
        self.inner = inner
        self.asked: list[tuple[str, float | None, float | None]] = []

    def acquire(self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0) -> Any:
        self.asked.append((name, ttl, timeout))
        return self.inner.acquire(name, ttl=ttl, timeout=timeout)


def test_a_relay_run_reports_its_epoch_and_tells_the_observer_of_each_fenced_claim(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given due rows
    due = add_rows(factory, 3)
    seen: list[tuple[int, list[str], str]] = []

    def observer(epoch: int, rows: list[OutboxRow]) -> None:
        with transaction(factory, write=False) as session:
            lease = session.get(Lease, outbox.RELAY_LEASE)
            assert lease is not None
            seen.append((epoch, [r.id for r in rows], lease.owner))

    recording = RecordingLocks(locks)
    # When the relay runs
    report = outbox.relay(settings, factory, RecordingSender(), recording, observer=observer)
    # Then the observer saw the claim under the run's epoch, while the run's owner held the lease
    assert report.epoch == 1
    assert report.published == 3
    assert [(epoch, rows) for epoch, rows, _ in seen] == [(1, due)]
    owner = seen[0][2]
    host, pid, tag = owner.rsplit(":", 2)
    assert (host, pid) == (socket.gethostname(), str(os.getpid()))
    assert re.fullmatch("[0-9a-f]{8}", tag)
    # And it never waits for the lock, which expires if its holder dies
    assert recording.asked == [(outbox.RELAY_LOCK, settings.lock_ttl, 0)]


def test_a_relay_skips_while_another_holds_the_lock_or_the_lease(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    add_rows(factory, 1)
    sender = RecordingSender()
    # When another run holds the lock
    held = locks.acquire(outbox.RELAY_LOCK, ttl=60, timeout=0)
    assert held is not None
    assert outbox.relay(settings, factory, sender, locks) == outbox.RelayReport(skipped=True)
    held.release()
    # When another relay (elsewhere) holds the live lease
    with transaction(factory) as session:
        assert acquire_lease(session, outbox.RELAY_LEASE, "elsewhere", 60) == 1
    assert outbox.relay(settings, factory, sender, locks) == outbox.RelayReport(skipped=True)
    assert sender.ids == []


def test_a_failed_publish_is_counted_and_stops_the_run(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    add_rows(factory, 3)
    report = outbox.relay(settings, factory, RecordingSender(fail=True), locks)
    assert (report.published, report.failed, report.epoch) == (0, 1, 1)
    assert all(state == ("pending", 0) for state in states(factory).values())


class TakeoverLock:
    """The relay's lock, whose extension between batches finds the lease taken over (as after
    a pause longer than the lease): it expires the lease and lets another owner take it."""

    def __init__(self, inner: Any, factory: sessionmaker[Session]) -> None:
        self.inner = inner
        self.factory = factory
        self.extended: list[float | None] = []

    def extend(self, ttl: float | None = None) -> None:
        self.extended.append(ttl)
        with transaction(self.factory) as session:
            lease = session.get(Lease, outbox.RELAY_LEASE)
            assert lease is not None
            lease.expires_at = utcnow() - dt.timedelta(seconds=1)
        with transaction(self.factory) as session:
            assert acquire_lease(session, outbox.RELAY_LEASE, "thief", 60) is not None

    def release(self) -> None:
        self.inner.release()


def test_a_relay_that_loses_its_lease_between_batches_stops_and_reports_what_it_did(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given more due rows than one batch (10)
    add_rows(factory, 15)
    sender = RecordingSender()
    taken: list[TakeoverLock] = []

    class Locks:
        def acquire(self, name: str, *, ttl: float | None = None, timeout: float = 0) -> Any:
            taken.append(TakeoverLock(locks.acquire(name, ttl=ttl, timeout=timeout), factory))
            return taken[-1]

    # When its lease is taken over after the first batch
    report = outbox.relay(settings, factory, sender, Locks())
    # Then the first batch stands, the second was never published, and the run says skipped
    assert report == outbox.RelayReport(published=10, skipped=True, epoch=1)
    assert len(sender.ids) == 10
    assert taken[0].extended == [settings.lock_ttl]
    # And its lock was released: the next run may take it
    again = locks.acquire(outbox.RELAY_LOCK, ttl=5, timeout=0)
    assert again is not None
    again.release()


def test_a_full_batch_of_dead_rows_does_not_end_the_run(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given a batch (10) of rows out of deliveries, due before two that are not
    exhausted = add_rows(factory, 10, delay=-60)
    fresh = add_rows(factory, 2)
    with transaction(factory) as session:
        for row_id in exhausted:
            row = session.get(OutboxRow, row_id)
            assert row is not None
            row.attempts = settings.max_outbox_delivery_attempts
    sender = RecordingSender()
    # When the relay runs once
    report = outbox.relay(settings, factory, sender, locks)
    # Then the dead batch was buried and the run went on to publish the rest
    assert (report.dead, report.published) == (10, 2)
    assert sorted(sender.ids) == sorted(fresh)


def test_failures_add_up_over_the_batches_of_a_run(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given 15 due rows and a transport that fails on the twelfth publish
    add_rows(factory, 15)

    class FailingLater(RecordingSender):
        def send(self, row: OutboxRow) -> None:
            if len(self.sent) == 11:
                raise ConnectionError("transport down")
            super().send(row)

    report = outbox.relay(settings, factory, FailingLater(), locks)
    assert (report.published, report.failed) == (11, 1)


def test_a_relay_whose_lease_was_taken_over_publishes_nothing(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given relay A holding the lease, paused until its lease expired
    add_rows(factory, 3)
    with transaction(factory) as session:
        epoch_a = acquire_lease(session, outbox.RELAY_LEASE, "relay-a", settings.lock_ttl)
        assert epoch_a is not None
        session.get(Lease, outbox.RELAY_LEASE).expires_at = utcnow() - dt.timedelta(seconds=1)
    # And relay B took over
    with transaction(factory) as session:
        epoch_b = acquire_lease(session, outbox.RELAY_LEASE, "relay-b", settings.lock_ttl)
    assert epoch_b is not None
    assert epoch_b > epoch_a
    # When A resumes its batch
    sender = RecordingSender()
    with pytest.raises(LockLost) as info, transaction(factory) as session:
        outbox.relay_batch(session, settings, sender, owner="relay-a", epoch=epoch_a)
    # Then it published nothing, said whose holding was stale, and B's batch still can
    assert sender.ids == []
    assert info.value.message == "the outbox relay lease was taken over"
    assert info.value.details == {"owner": "relay-a", "epoch": epoch_a}
    with transaction(factory) as session:
        report = outbox.relay_batch(session, settings, sender, owner="relay-b", epoch=epoch_b)
    assert report == outbox.RelayReport(published=3, epoch=epoch_b)


def test_a_batch_reports_its_epoch_when_paused_and_keeps_a_redacted_publish_error(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    (row_id,) = add_rows(factory, 1)
    with transaction(factory) as session:
        epoch = acquire_lease(session, outbox.RELAY_LEASE, "relay-a", settings.lock_ttl)
    assert epoch is not None
    # A paused runtime: the batch stops at once, under its epoch
    with transaction(factory) as session:
        set_paused(session, True)
    with transaction(factory) as session:
        paused = outbox.relay_batch(
            session, settings, RecordingSender(), owner="relay-a", epoch=epoch
        )
    assert paused == outbox.RelayReport(epoch=epoch, paused=True)
    with transaction(factory) as session:
        set_paused(session, False)

    # A transport whose error names its password: the row keeps the error, redacted
    class Refusing(RecordingSender):
        def send(self, row: OutboxRow) -> None:
            raise ConnectionError("cannot reach amqp://broker:s3cr3t-pw@mq.internal:5672//")

    with transaction(factory) as session:
        failed = outbox.relay_batch(session, settings, Refusing(), owner="relay-a", epoch=epoch)
    assert failed == outbox.RelayReport(failed=1, epoch=epoch)
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        assert row.last_error is not None
        assert row.last_error.startswith("publish failed: cannot reach amqp://")
        assert "s3cr3t-pw" not in row.last_error


def test_a_takeover_waits_for_a_batch_that_passed_the_fence(postgres_url: str) -> None:
    # PostgreSQL only: SQLite serializes writers with BEGIN IMMEDIATE instead of a row lock.
    dispose_engines()
    upgrade(postgres_url)
    factory = make_session_factory(make_engine(postgres_url))
    # Given relay A inside a batch that passed the fence, with its lease already expired
    with transaction(factory) as session:
        epoch_a = acquire_lease(session, outbox.RELAY_LEASE, "relay-a", 0.01)
    assert epoch_a is not None
    order: list[str] = []
    fenced = threading.Event()
    release = threading.Event()

    def relay_a() -> None:
        with transaction(factory) as session:
            assert fence(session, outbox.RELAY_LEASE, "relay-a", epoch_a, 0.01)
            fenced.set()
            release.wait(10)
            order.append("A committed")

    def relay_b() -> None:
        fenced.wait(10)
        with transaction(factory) as session:
            epoch = None
            while epoch is None:
                epoch = acquire_lease(session, outbox.RELAY_LEASE, "relay-b", 30)
            order.append("B took over")

    threads = [threading.Thread(target=relay_a), threading.Thread(target=relay_b)]
    for thread in threads:
        thread.start()
    # When A is let go after B has started its takeover
    fenced.wait(10)
    threading.Timer(0.3, release.set).start()
    for thread in threads:
        thread.join(15)
    dispose_engines()
    # Then B's takeover happened only after A's batch committed
    assert order == ["A committed", "B took over"]


def test_the_fast_path_marks_only_rows_that_are_still_pending(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given two committed rows, one of which its consumer already finished
    first, second = add_rows(factory, 2)
    with transaction(factory) as session:
        outbox.mark_done(session, second)
    sender = RecordingSender()
    # When the fast path publishes both
    OutboxPublisher(settings, factory, sender).publish([first, second])
    # Then only the pending one was sent and marked dispatched; the done one stays done
    assert sender.ids == [first]
    assert states(factory) == {first: ("dispatched", 1), second: ("done", 0)}


def test_a_failed_fast_path_publish_leaves_the_row_to_the_relay(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    (row_id,) = add_rows(factory, 1)
    OutboxPublisher(settings, factory, RecordingSender(fail=True)).publish([row_id])
    assert states(factory)[row_id] == ("pending", 0)
    sender = RecordingSender()
    outbox.relay(settings, factory, sender, locks)
    assert sender.ids == [row_id]


def test_purge_removes_only_old_finished_rows(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    old_done, old_pending, new_done = add_rows(factory, 3)
    long_ago = utcnow() - dt.timedelta(days=2)
    with transaction(factory) as session:
        outbox.mark_done(session, old_done)
        outbox.mark_done(session, new_done)
        session.get(OutboxRow, old_done).finished_at = long_ago
        session.get(OutboxRow, old_pending).created_at = long_ago
    with transaction(factory) as session:
        removed = outbox.purge_orphans(session, retention=settings.orphaned_outbox_retention)
    assert removed == 1
    assert set(states(factory)) == {old_pending, new_done}
