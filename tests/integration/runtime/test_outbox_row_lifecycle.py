"""An outbox row's life, one step at a time: pending, dispatched, done or dead, then purged.

Each step is a guarded UPDATE that only moves a row from the states it may leave, so a late or
repeated call (a redelivered message, a relay that republished the row) changes nothing. On SQLite
and PostgreSQL, without a relay or a worker.
"""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime import ids
from broker.runtime.outbox import rows as outbox
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import DeadLetter, OutboxRow, OutboxState, utcnow
from tests.support.runtime import runtime_env
from tests.support.waits import wait_until

PENDING, DISPATCHED = OutboxState.PENDING.value, OutboxState.DISPATCHED.value
DONE, DEAD = OutboxState.DONE.value, OutboxState.DEAD.value


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        runtime_env(tmp_path, database_url=database_url, workflows=tmp_path / "wf")
    )


def add(factory: sessionmaker[Session], row_id: str, state: str = PENDING, **fields: Any) -> None:
    with transaction(factory) as session:
        outbox.enqueue(
            session,
            outbox_id=row_id,
            task_name="broker.run_task",
            queue="broker",
            args={"n": row_id},
            request_id=f"req-{row_id}",
            instance_id=f"inst-{row_id}",
        )
        row = session.get(OutboxRow, row_id)
        assert row is not None
        row.state = state
        for name, value in fields.items():
            setattr(row, name, value)


def get(factory: sessionmaker[Session], row_id: str) -> OutboxRow:
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        session.expunge(row)
        return row


def test_a_row_is_written_pending_once_per_id(factory: sessionmaker[Session]) -> None:
    before = utcnow()
    later = before + dt.timedelta(minutes=5)
    with transaction(factory) as session:
        first = outbox.enqueue(
            session,
            outbox_id="r1",
            task_name="broker.resume_instance",
            queue="broker.special",
            args={"instance_id": "i1"},
            request_id="req-1",
            instance_id="i1",
        )
        scheduled = outbox.enqueue(
            session, outbox_id="r2", task_name="t", queue="q", args={}, available_at=later
        )
        # a retried step that enqueues the same work again finds its earlier row
        again = outbox.enqueue(
            session, outbox_id="r1", task_name="other", queue="other", args={"x": 1}
        )
        assert again is first
        assert scheduled.available_at == later
    row = get(factory, "r1")
    assert (row.task_name, row.queue, row.args) == (
        "broker.resume_instance",
        "broker.special",
        {"instance_id": "i1"},
    )
    assert (row.state, row.attempts, row.request_id, row.instance_id) == (
        PENDING,
        0,
        "req-1",
        "i1",
    )
    assert row.available_at == row.created_at
    assert before <= row.created_at <= utcnow()


@pytest.mark.parametrize(
    ("state", "finishes"), [(PENDING, True), (DISPATCHED, True), (DONE, False), (DEAD, False)]
)
def test_only_an_unfinished_row_can_be_marked_done(
    factory: sessionmaker[Session], state: str, finishes: bool
) -> None:
    add(factory, "r1", state, lease_expires_at=utcnow() + dt.timedelta(minutes=1))
    before = utcnow()
    with transaction(factory) as session:
        assert outbox.mark_done(session, "r1") is finishes
        assert outbox.mark_done(session, None) is False
    row = get(factory, "r1")
    if finishes:
        assert (row.state, row.lease_expires_at) == (DONE, None)
        assert row.finished_at is not None
        assert before <= row.finished_at <= utcnow()
        with transaction(factory) as session:
            assert outbox.mark_done(session, "r1") is False
    else:
        assert row.state == state
        assert row.finished_at is None


@pytest.mark.parametrize(
    ("state", "finished"), [(PENDING, False), (DISPATCHED, False), (DONE, True), (DEAD, True)]
)
def test_a_redelivered_message_of_a_done_or_dead_row_is_recognised(
    factory: sessionmaker[Session], state: str, finished: bool
) -> None:
    add(factory, "r1", state)
    with transaction(factory, write=False) as session:
        assert outbox.is_finished(session, "r1") is finished
        assert outbox.is_finished(session, None) is False
        assert outbox.is_finished(session, "no-such-row") is False


def test_postponing_puts_an_unfinished_row_back_to_pending_later_and_spares_a_finished_one(
    factory: sessionmaker[Session],
) -> None:
    lease = utcnow() + dt.timedelta(minutes=1)
    add(factory, "working", DISPATCHED, lease_expires_at=lease, attempts=1)
    add(factory, "waiting", PENDING)
    add(factory, "finished", DONE, lease_expires_at=None)
    add(factory, "bystander", PENDING)
    before = utcnow()
    with transaction(factory) as session:
        for row_id in ("working", "waiting", "finished"):
            outbox.postpone(
                session, row_id, delay=30, error="instance locked by postgresql://u:pw@db/x"
            )
    after = utcnow()
    for row_id in ("working", "waiting"):
        row = get(factory, row_id)
        assert (row.state, row.lease_expires_at) == (PENDING, None)
        delay = dt.timedelta(seconds=30)
        assert before + delay <= row.available_at <= after + delay
        assert row.last_error is not None
        assert "pw" not in row.last_error
        assert row.last_error.startswith("instance locked by postgresql://")
    assert get(factory, "working").attempts == 1
    finished = get(factory, "finished")
    assert (finished.state, finished.last_error) == (DONE, None)
    assert finished.available_at < before
    # A row not named is left as it was
    bystander = get(factory, "bystander")
    assert (bystander.state, bystander.last_error) == (PENDING, None)
    assert bystander.available_at < before


def test_a_heartbeat_extends_only_a_dispatched_rows_lease(factory: sessionmaker[Session]) -> None:
    soon = utcnow() + dt.timedelta(seconds=5)
    add(factory, "working", DISPATCHED, lease_expires_at=soon)
    add(factory, "finished", DONE, lease_expires_at=None)
    add(factory, "other", DISPATCHED, lease_expires_at=soon)  # another worker's
    before = utcnow()
    with transaction(factory) as session:
        outbox.extend_lease(session, "working", 120)
        outbox.extend_lease(session, "finished", 120)
    after = utcnow()
    lease = get(factory, "working").lease_expires_at
    assert lease is not None
    assert before + dt.timedelta(seconds=120) <= lease <= after + dt.timedelta(seconds=120)
    assert get(factory, "finished").lease_expires_at is None
    # A dispatched row not named keeps its own lease (its own worker beats for it)
    assert get(factory, "other").lease_expires_at == soon


def test_a_publish_is_recorded_once_per_publish_and_never_on_a_finished_row(
    factory: sessionmaker[Session],
) -> None:
    add(factory, "fresh", PENDING)
    add(factory, "republished", DISPATCHED, attempts=1)
    add(factory, "finished", DONE)
    before = utcnow()
    with transaction(factory) as session:
        assert outbox.mark_dispatched(session, "fresh", lease=60, only_pending=True)
        # the fast path leaves a row the relay already published alone
        assert not outbox.mark_dispatched(session, "republished", lease=60, only_pending=True)
        # the relay republishes a row whose lease ran out
        assert outbox.mark_dispatched(session, "republished", lease=60, only_pending=False)
        assert not outbox.mark_dispatched(session, "finished", lease=60, only_pending=False)
    after = utcnow()
    fresh, republished = get(factory, "fresh"), get(factory, "republished")
    assert (fresh.state, fresh.attempts) == (DISPATCHED, 1)
    assert (republished.state, republished.attempts) == (DISPATCHED, 2)
    assert fresh.dispatched_at is not None
    assert before <= fresh.dispatched_at <= after
    assert fresh.lease_expires_at == fresh.dispatched_at + dt.timedelta(seconds=60)
    finished = get(factory, "finished")
    assert (finished.state, finished.attempts, finished.dispatched_at) == (DONE, 0, None)


def test_the_relay_claims_due_rows_oldest_first_and_dispatched_ones_only_past_their_lease(
    factory: sessionmaker[Session],
) -> None:
    now = utcnow()
    past, future = now - dt.timedelta(minutes=1), now + dt.timedelta(minutes=1)
    add(factory, "b-due", PENDING, available_at=past)
    add(factory, "a-due", PENDING, available_at=past)
    add(factory, "c-due-now", PENDING, available_at=now)
    add(factory, "early", PENDING, available_at=past - dt.timedelta(minutes=1))
    add(factory, "not-yet", PENDING, available_at=future)
    add(factory, "lost", DISPATCHED, available_at=past, lease_expires_at=now)
    add(factory, "leased", DISPATCHED, available_at=past, lease_expires_at=future)
    add(factory, "done", DONE, available_at=past, lease_expires_at=past)
    add(factory, "dead", DEAD, available_at=past, lease_expires_at=past)
    with transaction(factory) as session:
        claimed = [r.id for r in outbox.claim_due(session, limit=10, now=now)]
        first_two = [r.id for r in outbox.claim_due(session, limit=2, now=now)]
    assert claimed == ["early", "a-due", "b-due", "lost", "c-due-now"]
    assert first_two == ["early", "a-due"]


def test_the_relay_passes_over_a_row_another_transaction_holds(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite has no row locks: its one writer serializes the claims")
    # Given two due rows, one of them locked by another transaction (a worker finishing it)
    past = utcnow() - dt.timedelta(minutes=1)
    add(factory, "held", PENDING, available_at=past)
    add(factory, "free", PENDING, available_at=past)
    holder = factory()
    holder.execute(select(OutboxRow).where(OutboxRow.id == "held").with_for_update())
    claimed: list[str] = []
    done = threading.Event()

    def claim() -> None:
        with transaction(factory) as session:
            claimed.extend(r.id for r in outbox.claim_due(session, limit=10))
        done.set()

    def waiting_for_a_lock() -> bool:
        with transaction(factory, write=False) as session:
            return bool(
                session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                )
            )

    # When the relay claims meanwhile
    thread = threading.Thread(target=claim)
    thread.start()
    try:
        wait_until(lambda: done.is_set() or waiting_for_a_lock(), timeout=10, interval=0.01)
        answered_while_held = done.is_set()
    finally:
        holder.rollback()
        holder.close()
        thread.join(10)
    # Then it answered at once with the free row only, instead of waiting for the held one
    assert answered_while_held
    assert claimed == ["free"]


def test_the_fast_path_takes_only_its_own_rows_that_are_still_pending_and_due(
    factory: sessionmaker[Session],
) -> None:
    add(factory, "mine", PENDING)
    add(factory, "later", PENDING, available_at=utcnow() + dt.timedelta(minutes=1))
    add(factory, "relayed", DISPATCHED)
    add(factory, "other", PENDING)
    with transaction(factory, write=False) as session:
        assert outbox.pending_ids(session, []) == []
        found = outbox.pending_ids(session, ["mine", "later", "relayed", "missing"])
        assert [r.id for r in found] == ["mine"]


def test_a_row_published_too_often_becomes_an_undeliverable_dead_letter(
    factory: sessionmaker[Session],
) -> None:
    add(factory, "flaky", DISPATCHED, attempts=5, lease_expires_at=utcnow())
    add(factory, "silent", DISPATCHED, attempts=3, last_error="publish failed: broker down")
    before = utcnow()
    with transaction(factory) as session:
        for row_id in ("flaky", "silent"):
            row = session.get(OutboxRow, row_id)
            assert row is not None
            outbox.bury(session, row)
    after = utcnow()
    flaky = get(factory, "flaky")
    assert (flaky.state, flaky.lease_expires_at) == (DEAD, None)
    assert flaky.finished_at is not None
    assert before <= flaky.finished_at <= after
    with transaction(factory, write=False) as session:
        letters = {d.source_id: d for d in session.scalars(select(DeadLetter))}
        session.expunge_all()
    letter = letters["flaky"]
    assert letter.id == ids.dead_letter_id_for("outbox", "flaky")
    assert (letter.kind, letter.reason, letter.name, letter.attempts) == (
        "outbox",
        "Undeliverable",
        "broker.run_task",
        5,
    )
    assert (letter.request_id, letter.instance_id) == ("req-flaky", "inst-flaky")
    assert letter.error == "not finished after 5 deliveries"
    assert letter.data == {"taskName": "broker.run_task", "queue": "broker", "args": {"n": "flaky"}}
    assert letters["silent"].error == "publish failed: broker down"


def test_the_purge_removes_finished_rows_past_their_retention_only(
    factory: sessionmaker[Session],
) -> None:
    now = utcnow()
    old, recent = now - dt.timedelta(hours=2), now - dt.timedelta(minutes=10)
    add(factory, "old-done", DONE, finished_at=old)
    add(factory, "old-dead", DEAD, finished_at=old)
    add(factory, "recent-done", DONE, finished_at=recent)
    add(factory, "old-pending", PENDING, created_at=old, available_at=old)
    add(factory, "old-dispatched", DISPATCHED, created_at=old, dispatched_at=old)
    with transaction(factory) as session:
        assert outbox.purge_orphans(session, retention=3600, now=now) == 2
    with transaction(factory, write=False) as session:
        left = sorted(session.scalars(select(OutboxRow.id)))
    assert left == ["old-dispatched", "old-pending", "recent-done"]


def test_the_relay_records_the_publish_of_its_whole_batch_in_one_go(
    factory: sessionmaker[Session],
) -> None:
    # Given a fresh row, one republished after its lease ran out, and a finished one
    add(factory, "fresh", PENDING)
    add(factory, "republished", DISPATCHED, attempts=1)
    add(factory, "finished", DONE)
    before = utcnow()
    with transaction(factory) as session:
        # When the relay records the batch's publish (an empty batch marks nothing)
        assert outbox.mark_all_dispatched(session, [], lease=60) == 0
        marked = outbox.mark_all_dispatched(session, ["fresh", "republished", "finished"], lease=60)
    after = utcnow()
    # Then each unfinished row counts one more publish, with its lease from now; the finished
    # row is untouched
    assert marked == 2
    for name, attempts in (("fresh", 1), ("republished", 2)):
        row = get(factory, name)
        assert (row.state, row.attempts) == (DISPATCHED, attempts)
        assert row.dispatched_at is not None
        assert before <= row.dispatched_at <= after
        assert row.lease_expires_at == row.dispatched_at + dt.timedelta(seconds=60)
    finished = get(factory, "finished")
    assert (finished.state, finished.attempts, finished.dispatched_at) == (DONE, 0, None)
