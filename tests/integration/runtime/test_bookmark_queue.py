"""The bookmark queue, timers, their dead letters and the purge, on SQLite and PostgreSQL.

No worker: the jobs run in-process against a migrated database with a recording sender, so each
test controls the clock of a run and looks at the rows it leaves.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.cli import ops as ops_commands
from broker.engine.run.results import PublishEvent
from broker.errors import Conflict
from broker.names import DEFAULT_QUEUE
from broker.runtime import ids, persist
from broker.runtime.admin import dead_letters, recovery
from broker.runtime.admin.runtime_status import runtime_view
from broker.runtime.bookmarks import queue as bookmarks
from broker.runtime.outbox.pause import set_paused
from broker.runtime.persist import Target
from broker.runtime.requests.cancellation import cancel_instances
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import (
    Bookmark,
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    Timer,
    WorkflowDefinition,
    WorkflowInstance,
    utcnow,
)
from broker.telemetry import metrics
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import bookmark_queue_settings


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return bookmark_queue_settings(database_url, tmp_path)


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
def rt(settings: Settings, factory: sessionmaker[Session], sender: RecordingSender) -> Runtime:
    locks = FileLockProvider(Path(settings.var_dir) / "locks")
    return Runtime(settings, factory=factory, locks=locks, sender=sender)


def waiting_instance(
    factory: sessionmaker[Session],
    instance_id: str,
    *,
    event: str = "approval",
    client_key: str = "clienta",
    due_at: dt.datetime | None = None,
    parent_id: str | None = None,
) -> str:
    """A running, suspended instance with one bookmark (an event, or a timer when ``due_at``);
    answers the bookmark id."""
    bookmark_id = ids.derive("bookmark", instance_id)
    now = utcnow()
    with transaction(factory) as session:
        session.add(
            WorkflowInstance(
                id=instance_id,
                definition_id="approval",
                definition_version_id="approval-v1",
                version=1,
                parent_id=parent_id,
                correlation_id=f"corr-{instance_id}",
                status="Running",
                sub_status="Suspended",
                checkpoint=1,
                created_at=now,
                updated_at=now,
            )
        )
        session.add(
            Bookmark(
                id=bookmark_id,
                instance_id=instance_id,
                activity_id="wait",
                activity_instance_id=f"{instance_id}-wait",
                name="Elsa.Delay" if due_at else bookmarks.EVENT_BOOKMARK,
                hash=ids.derive("hash", instance_id),
                payload={"eventName": event}
                if due_at is None
                else {"resumeAt": due_at.isoformat()},
                correlation_id=f"corr-{instance_id}",
                client_key=client_key,
                created_at=now,
            )
        )
        if due_at is not None:
            session.add(
                Timer(
                    id=ids.timer_id_for(bookmark_id),
                    instance_id=instance_id,
                    bookmark_id=bookmark_id,
                    due_at=due_at,
                )
            )
    return bookmark_id


def post_event(
    factory: sessionmaker[Session],
    item_id: str,
    name: str,
    correlation_id: str,
    *,
    client_key: str = "clienta",
    payload: Any = None,
) -> None:
    with transaction(factory) as session:
        bookmarks.enqueue_stimulus(
            session,
            item_id=item_id,
            name=name,
            payload=payload,
            correlation_id=correlation_id,
            client_key=client_key,
        )


def item(factory: sessionmaker[Session], item_id: str) -> BookmarkQueueItem | None:
    with transaction(factory, write=False) as session:
        found = session.get(BookmarkQueueItem, item_id)
        if found is not None:
            session.expunge(found)
        return found


def make_due(factory: sessionmaker[Session], item_id: str) -> None:
    with transaction(factory) as session:
        found = session.get(BookmarkQueueItem, item_id)
        assert found is not None
        found.next_attempt_at = utcnow() - dt.timedelta(seconds=1)


def letters(factory: sessionmaker[Session]) -> list[DeadLetter]:
    with transaction(factory, write=False) as session:
        found = list(session.scalars(select(DeadLetter).order_by(DeadLetter.created_at)))
        session.expunge_all()
        return found


def count_rows(factory: sessionmaker[Session]) -> int:
    with transaction(factory, write=False) as session:
        return int(session.scalar(select(func.count()).select_from(OutboxRow)) or 0)


# Matching -----------------------------------------------------------------------------------------


def test_event_resumes_the_waiting_bookmark_once_even_when_the_job_runs_twice(
    rt: Runtime, factory: sessionmaker[Session], sender: RecordingSender
) -> None:
    # Given an instance waiting for "approval" and that event for its correlation id
    bookmark_id = waiting_instance(factory, "i1")
    post_event(factory, "e1", "Approval", "corr-i1")
    # When the queue job runs twice (as two beats would make it)
    first = bookmarks.process_queue(rt)
    make_due(factory, "e1")
    second = bookmarks.process_queue(rt)
    # Then one resume row names the bookmark and the item, and it was published once
    assert first.matched == 1
    assert second.matched == 1  # the same match again finds its row: nothing new is written
    delivered = item(factory, "e1")
    assert delivered is not None
    assert delivered.delivery_attempts == 2  # each delivery counts an attempt
    expected = ids.outbox_id_for("resume", "e1", bookmark_id)
    with transaction(factory, write=False) as session:
        rows = session.scalars(select(OutboxRow)).all()
        assert [r.id for r in rows] == [expected]
        assert rows[0].args == {
            "instance_id": "i1",
            "bookmark_id": bookmark_id,
            "queue_item_id": "e1",
        }
    assert sender.ids == [expected]


def test_queue_depth_counts_only_items_still_waiting_for_delivery(
    rt: Runtime, factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given a stimulus that resumes a waiting instance and one that matches nothing yet
    waiting_instance(factory, "i1")
    post_event(factory, "e1", "approval", "corr-i1")
    post_event(factory, "e2", "approval", "corr-nobody")
    with transaction(factory, write=False) as session:
        assert metrics.bookmark_queue_counts(session) == (2, 0)
    # When the queue job delivers the first (kept as dispatched, for deduplication)
    assert bookmarks.process_queue(rt).matched == 1
    delivered = item(factory, "e1")
    assert delivered is not None
    assert (delivered.options or {}).get("dispatched")
    # Then the depth is the one still waiting, and the delivered item is a figure of its own:
    # in the backlog, the metric, the admin runtime view and `broker outbox status`
    with transaction(factory, write=False) as session:
        assert metrics.bookmark_queue_counts(session) == (1, 1)
        backlog = metrics.read_backlog(session)
        view = runtime_view(session)
    assert (backlog.bookmark_queue_depth, backlog.bookmark_queue_delivered) == (1, 1)
    assert view["bookmarkQueue"] == {"waiting": 1, "delivered": 1}
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(metrics.render_metrics(factory)[0].decode())
        for s in family.samples
    }
    assert samples["broker_bookmark_queue_depth"] == 1
    assert samples["broker_bookmark_queue_delivered"] == 1
    cli = CliRunner().invoke(
        ops_commands.outbox, ["status", "--database-url", settings.database_url, "--json"]
    )
    assert cli.exit_code == 0, cli.output
    status = json.loads(cli.stdout)
    assert (status["bookmarkQueueDepth"], status["bookmarkQueueDelivered"]) == (1, 1)


def test_work_caused_while_paused_waits_for_the_relay_instead_of_the_fast_path(
    rt: Runtime, factory: sessionmaker[Session], sender: RecordingSender
) -> None:
    # Given a paused runtime, an instance waiting for an event and one whose timer is due
    with transaction(factory) as session:
        set_paused(session, True)
    waiting_instance(factory, "i1")
    waiting_instance(factory, "t1", due_at=utcnow() - dt.timedelta(seconds=1))
    post_event(factory, "e1", "approval", "corr-i1")
    # When the queue job and the timer job run
    assert bookmarks.process_queue(rt).matched == 1
    assert bookmarks.fire_timers(rt) == 1
    # Then both resume rows are written but none is published: they wait, pending, for the
    # relay (which holds them until the resume)
    assert sender.ids == []
    with transaction(factory, write=False) as session:
        states = session.scalars(select(OutboxRow.state)).all()
    assert states == ["pending", "pending"]


def test_event_naming_an_instance_resumes_only_that_instance(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given two instances of the same client waiting for "approval"
    waiting_instance(factory, "i1")
    mine = waiting_instance(factory, "i2")
    # When an event for any correlation but naming i2 (a PublishEvent with isLocal) is processed
    with transaction(factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id="e1", name="approval", payload=None, instance_id="i2"
        )
    report = bookmarks.process_queue(rt)
    # Then only i2's bookmark is resumed
    assert report.matched == 1
    with transaction(factory, write=False) as session:
        rows = session.scalars(select(OutboxRow)).all()
        assert [r.args["bookmark_id"] for r in rows] == [mine]


def test_a_local_event_published_by_a_workflow_names_its_instance(
    factory: sessionmaker[Session],
) -> None:
    # Given a step of i1 that published one event locally and one to everybody
    target = Target(
        instance_id="i1",
        definition_id="d",
        version_id="d-v1",
        version=1,
        queue="broker.default",
        workflow_properties={},
        expected_checkpoint=1,
        client_key="clienta",
    )
    commands = [
        PublishEvent(name="mine", correlation_id=None, payload=None, local=True),
        PublishEvent(name="all", correlation_id=None, payload=None),
    ]
    # When the step's commands are saved
    with transaction(factory) as session:
        persist.save_commands(session, target, commands, utcnow())
    # Then the local event's queue item names i1 and the other names no instance
    with transaction(factory, write=False) as session:
        items = {i.name: i.instance_id for i in session.scalars(select(BookmarkQueueItem))}
    assert items == {"mine": "i1", "all": None}


def test_event_that_matches_nothing_yet_stays_queued(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given an event with no bookmark waiting for it
    post_event(factory, "e1", "approval", "corr-late")
    # When the queue job runs
    report = bookmarks.process_queue(rt)
    # Then the item waits for the next run and nothing was written
    assert report.waiting == 1
    assert report.matched == 0
    queued = item(factory, "e1")
    assert queued is not None
    assert queued.delivery_attempts == 0
    assert queued.next_attempt_at > queued.created_at
    assert count_rows(factory) == 0
    # When the workflow suspends on the event later, and the item is due again
    waiting_instance(factory, "late")
    with transaction(factory) as session:
        bm = session.scalars(select(Bookmark).where(Bookmark.instance_id == "late")).one()
        bm.correlation_id = "corr-late"
    make_due(factory, "e1")
    # Then the item resumes it
    assert bookmarks.process_queue(rt).matched == 1


def test_event_of_another_client_does_not_match(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given clienta's instance waiting for "approval"
    waiting_instance(factory, "i1", client_key="clienta")
    # When clientb sends "approval" naming clienta's correlation id
    post_event(factory, "e1", "approval", "corr-i1", client_key="clientb")
    report = bookmarks.process_queue(rt)
    # Then nothing is resumed
    assert report.matched == 0
    assert report.waiting == 1
    assert count_rows(factory) == 0


def test_a_bookmark_of_a_finished_instance_is_passed_over_for_the_next_one(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given two instances waiting for "approval", the older one finished since (its bookmark
    # lost the race with its last step)
    waiting_instance(factory, "old")
    live = waiting_instance(factory, "new")
    with transaction(factory) as session:
        old = session.get(WorkflowInstance, "old")
        assert old is not None
        old.status = "Finished"
        for bookmark in session.scalars(select(Bookmark)):
            bookmark.created_at = utcnow() - dt.timedelta(
                seconds=20 if bookmark.instance_id == "old" else 10
            )
    # When an event of the client for any correlation is processed
    with transaction(factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id="e1", name="approval", payload=None, client_key="clienta"
        )
    report = bookmarks.process_queue(rt)
    # Then the finished instance's bookmark is no match, and the running one is resumed
    assert report.matched == 1
    with transaction(factory, write=False) as session:
        assert [r.args["bookmark_id"] for r in session.scalars(select(OutboxRow))] == [live]


def test_a_run_counts_every_failed_and_every_expired_item(
    rt: Runtime, factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given two events for a bookmark whose instance is gone, and two older than the TTL
    waiting_instance(factory, "gone")
    with transaction(factory) as session:
        session.delete(session.get(WorkflowInstance, "gone"))
    for item_id in ("f1", "f2"):
        post_event(factory, item_id, "approval", "corr-gone")
    for item_id in ("x1", "x2"):
        post_event(factory, item_id, "approval", "corr-none")
    with transaction(factory) as session:
        for item_id in ("x1", "x2"):
            found = session.get(BookmarkQueueItem, item_id)
            assert found is not None
            found.created_at = utcnow() - dt.timedelta(seconds=settings.bookmark_queue_ttl + 1)
    # When the queue job runs once, Then its report counts both of each
    assert bookmarks.process_queue(rt) == bookmarks.QueueReport(expired=2, failed=2)


# Fairness -----------------------------------------------------------------------------------------


def flood(factory: sessionmaker[Session], client_key: str, count: int) -> None:
    """``count`` events of one client that match nothing, queued oldest first."""
    start = utcnow() - dt.timedelta(seconds=30)
    with transaction(factory) as session:
        session.add_all(
            BookmarkQueueItem(
                id=f"{client_key}-flood-{n:05d}",
                name="approval",
                correlation_id=f"nobody-{n}",
                client_key=client_key,
                created_at=start + dt.timedelta(milliseconds=n),
                next_attempt_at=start + dt.timedelta(milliseconds=n),
            )
            for n in range(count)
        )


def resumed(factory: sessionmaker[Session], bookmark_id: str) -> bool:
    with transaction(factory, write=False) as session:
        args = session.scalars(select(OutboxRow.args)).all()
    return any(a.get("bookmark_id") == bookmark_id for a in args)


def test_a_flooding_client_does_not_starve_another_clients_event(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given client A's 1,000 queued events that match nothing (five batches' worth, all older)
    flood(factory, "clienta", 1000)
    # And client B's workflow waiting for an event, and B's matching event, queued last
    mine = waiting_instance(factory, "b1", client_key="clientb")
    post_event(factory, "b-event", "approval", "corr-b1", client_key="clientb")
    # When the queue job runs once
    report = bookmarks.process_queue(rt)
    # Then B's workflow is resumed in that run, and A's flood filled the rest of the batch
    assert resumed(factory, mine)
    assert report.matched == 1
    assert report.waiting == bookmarks.BATCH - 1


def test_a_run_takes_each_clients_turn_before_anyones_second(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given three clients with unmatched events: A with many, B with two, C with one
    flood(factory, "clienta", 50)
    flood(factory, "clientb", 2)
    flood(factory, "clientc", 1)
    # When the due items of a batch of five are chosen
    with transaction(factory, write=False) as session:
        chosen = [i.id for i in bookmarks.due_items(session, utcnow(), limit=5)]
    # Then every client's oldest comes first, then the second of those that have one
    assert chosen == [
        "clienta-flood-00000",
        "clientb-flood-00000",
        "clientc-flood-00000",
        "clienta-flood-00001",
        "clientb-flood-00001",
    ]


def queue_items(factory: sessionmaker[Session], *items: tuple[str, str, dt.datetime]) -> None:
    """Unmatched items (id, client, due time), inserted in the order given."""
    for item_id, client_key, due in items:
        with transaction(factory) as session:
            session.add(
                BookmarkQueueItem(
                    id=item_id,
                    name="approval",
                    correlation_id="nobody",
                    client_key=client_key,
                    created_at=due,
                    next_attempt_at=due,
                )
            )


def test_the_clients_first_turns_go_longest_waiting_first_then_by_id(
    factory: sessionmaker[Session],
) -> None:
    # Given one due item per client: A's waits least, B's longest, C's and D's equally long
    # (their ids in the other order than their clients' names)
    start = utcnow() - dt.timedelta(seconds=30)
    second = start + dt.timedelta(seconds=1)
    queue_items(
        factory,
        ("a-item", "clienta", start + dt.timedelta(seconds=2)),
        ("b-item", "clientb", start),
        ("z-item", "clientc", second),
        ("y-item", "clientd", second),
    )
    # When the due items are chosen
    with transaction(factory, write=False) as session:
        chosen = [i.id for i in bookmarks.due_items(session, utcnow())]
    # Then the longest waiting comes first (not the smallest id), and a tie goes by id
    assert chosen == ["b-item", "y-item", "z-item", "a-item"]


def test_a_clients_items_due_at_the_same_time_take_their_turns_by_id(
    factory: sessionmaker[Session],
) -> None:
    # Given two items of one client due at the same instant, the larger id queued first, and
    # another client's item
    due = utcnow() - dt.timedelta(seconds=30)
    queue_items(factory, ("q-2", "clienta", due), ("q-1", "clienta", due), ("r-1", "clientb", due))
    # When a batch of two is chosen
    with transaction(factory, write=False) as session:
        chosen = [i.id for i in bookmarks.due_items(session, utcnow(), limit=2)]
    # Then A's first turn is its smaller id, and B's first turn comes before A's second
    assert chosen == ["q-1", "r-1"]


def test_a_clients_own_later_event_gets_its_turn_behind_its_unmatched_ones(
    rt: Runtime, factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given more unmatched events of client A than one batch holds, then A's matching event
    flood(factory, "clienta", bookmarks.BATCH + 20)
    mine = waiting_instance(factory, "a1", client_key="clienta")
    post_event(factory, "a-event", "approval", "corr-a1", client_key="clienta")
    # When the job runs twice, each run finding the put-off items due again at once
    immediate = settings.replace(bookmark_queue_interval=0.0)
    runs = 0
    while not resumed(factory, mine) and runs < 2:
        with transaction(factory) as session:
            bookmarks.process_due_items(session, immediate)
        runs += 1
    # Then the second run reached it: the first run's unmatched items went to the back
    assert resumed(factory, mine)
    assert runs == 2


# Dead letters -------------------------------------------------------------------------------------


def test_item_older_than_the_ttl_becomes_an_expired_dead_letter(
    rt: Runtime, factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given an event queued longer ago than the TTL, that still matches nothing
    post_event(factory, "e1", "approval", "corr-none", payload={"secret": "x"})
    with transaction(factory) as session:
        found = session.get(BookmarkQueueItem, "e1")
        assert found is not None
        found.created_at = utcnow() - dt.timedelta(seconds=settings.bookmark_queue_ttl + 1)
        found.instance_id, found.bookmark_id, found.hash = "inst-e1", "bm-e1", "hash-e1"
    # When the queue job runs
    report = bookmarks.process_queue(rt)
    # Then the item left the queue as an Expired, replayable dead letter holding its stimulus
    assert report.expired == 1
    assert item(factory, "e1") is None
    (letter,) = letters(factory)
    assert (letter.kind, letter.reason, letter.source_id) == ("bookmark", "Expired", "e1")
    assert letter.replayable
    # ... under an id derived from the item, saying why, with what a replay needs
    assert letter.id == ids.dead_letter_id_for("bookmark", "e1")
    assert letter.error == "no bookmark matched before the TTL"
    assert letter.instance_id == "inst-e1"
    assert letter.data == {
        "name": "approval",
        "hash": "hash-e1",
        "correlationId": "corr-none",
        "bookmarkId": "bm-e1",
        "instanceId": "inst-e1",
        "payload": {"secret": "x"},
    }
    assert letter.data is not None
    assert letter.data["payload"] == {"secret": "x"}
    # And its view shows no payload
    assert "secret" not in str(dead_letters.view(letter))


def test_failing_item_counts_attempts_and_is_dead_lettered_as_failed_at_the_maximum(
    rt: Runtime, factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given a bookmark whose instance row is gone, and an event for it
    bookmark_id = waiting_instance(factory, "gone")
    with transaction(factory) as session:
        instance = session.get(WorkflowInstance, "gone")
        session.delete(instance)
    post_event(factory, "e1", "approval", "corr-gone")
    # When the queue job keeps failing on it
    for attempt in range(1, settings.bookmark_queue_max_delivery_attempts):
        before = utcnow()
        assert bookmarks.process_queue(rt).failed == 1
        after = utcnow()
        queued = item(factory, "e1")
        # Then each failure counts an attempt and backs off: interval * 2**attempts
        assert queued is not None
        assert queued.delivery_attempts == attempt
        assert queued.last_error == (
            f"bookmark {bookmark_id} names workflow instance gone, which does not exist"
        )
        backoff = dt.timedelta(seconds=settings.bookmark_queue_interval * 2**attempt)
        assert before + backoff <= queued.next_attempt_at <= after + backoff
        make_due(factory, "e1")
    assert bookmarks.process_queue(rt).failed == 1
    # And at the maximum it is a Failed dead letter saying why, and no resume was written
    assert item(factory, "e1") is None
    (letter,) = letters(factory)
    assert letter.reason == "Failed"
    assert letter.error is not None
    assert "does not exist" in letter.error
    assert letter.attempts == settings.bookmark_queue_max_delivery_attempts
    assert count_rows(factory) == 0


def test_replaying_a_bookmark_dead_letter_queues_a_new_item_once(
    rt: Runtime, factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given an expired event for a workflow that now waits for it
    post_event(factory, "e1", "approval", "corr-i1", payload={"decision": "yes"})
    with transaction(factory) as session:
        found = session.get(BookmarkQueueItem, "e1")
        assert found is not None
        found.created_at = utcnow() - dt.timedelta(seconds=settings.bookmark_queue_ttl + 1)
    bookmarks.process_queue(rt)
    (letter,) = letters(factory)
    waiting_instance(factory, "i1")
    # When an operator replays it
    with transaction(factory) as session:
        replayed = dead_letters.replay(session, letter.id, ("bookmark",))
    # Then a new item carries the same stimulus and resumes the workflow
    new = item(factory, replayed.new_id)
    assert new is not None
    assert new.payload == {"decision": "yes"}
    assert new.client_key == "clienta"
    assert bookmarks.process_queue(rt).matched == 1
    # And the letter cannot be replayed twice
    with pytest.raises(Conflict), transaction(factory) as session:
        dead_letters.replay(session, letter.id, ("bookmark",))


def test_purge_removes_dead_letters_older_than_their_ttl_only(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given an old and a fresh dead letter
    now = utcnow()
    with transaction(factory) as session:
        for name, age in (("old", settings.dead_letter_ttl + 60), ("fresh", 60.0)):
            letter = DeadLetter(
                id=name,
                kind="bookmark",
                reason="Expired",
                created_at=now - dt.timedelta(seconds=age),
            )
            session.add(letter)
    # When the purge runs
    with transaction(factory) as session:
        report = recovery.purge_old(session, settings, now=now)
    # Then only the old one is gone
    assert report.dead_letters == 1
    assert [letter.id for letter in letters(factory)] == ["fresh"]


# Timers -------------------------------------------------------------------------------------------


def test_timer_fires_once_and_not_before_it_is_due(
    factory: sessionmaker[Session],
) -> None:
    # Given a timer due in ten seconds
    due = utcnow() + dt.timedelta(seconds=10)
    bookmark_id = waiting_instance(factory, "t1", due_at=due)
    # When the timer job runs before it is due
    with transaction(factory) as session:
        early = bookmarks.fire_due_timers(session, now=due - dt.timedelta(seconds=1))
    # Then nothing fires
    assert early == []
    # When it runs at the due time, and again
    with transaction(factory) as session:
        fired = bookmarks.fire_due_timers(session, now=due)
    with transaction(factory) as session:
        again = bookmarks.fire_due_timers(session, now=due + dt.timedelta(seconds=5))
    # Then it fired once, with one resume row for its bookmark
    assert fired == [ids.outbox_id_for("timer", ids.timer_id_for(bookmark_id))]
    assert again == []
    with transaction(factory, write=False) as session:
        timer = session.scalars(select(Timer)).one()
        assert timer.fired_at == due
        row = session.get(OutboxRow, fired[0])
        assert row is not None
        assert row.args == {"instance_id": "t1", "bookmark_id": bookmark_id}


class RecordingLocks:
    """The runtime's file locks, recording how each was asked for."""

    def __init__(self, inner: FileLockProvider) -> None:
        self.inner = inner
        self.asked: list[tuple[str, float | None, float | None]] = []

    def acquire(self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0) -> Any:
        self.asked.append((name, ttl, timeout))
        return self.inner.acquire(name, ttl=ttl, timeout=timeout)


def test_the_timer_job_publishes_at_once_and_skips_while_another_run_holds_its_lock(
    factory: sessionmaker[Session], sender: RecordingSender, settings: Settings
) -> None:
    # Given a due timer of an instance that serves a request
    bookmark_id = waiting_instance(factory, "t1", due_at=utcnow() - dt.timedelta(seconds=1))
    with transaction(factory) as session:
        instance = session.get(WorkflowInstance, "t1")
        assert instance is not None
        instance.request_id = "req-t1"
        # served by a dedicated queue: the resume goes there too
        session.add(
            WorkflowDefinition(
                id="approval-v1", definition_id="approval", version=1, queue="broker.special",
                content_hash="h", document={},
            )
        )  # fmt: skip
    locks = RecordingLocks(FileLockProvider(Path(settings.var_dir) / "locks"))
    rt = Runtime(settings, factory=factory, locks=locks, sender=sender)
    # When another run holds the timer lock, Then this run does nothing and does not wait
    held = locks.inner.acquire(bookmarks.TIMER_LOCK, ttl=60, timeout=0)
    assert held is not None
    assert bookmarks.fire_timers(rt) == 0
    held.release()
    assert count_rows(factory) == 0
    # When the lock is free, Then the timer's resume row is written and published at once
    assert bookmarks.fire_timers(rt) == 1
    expected = ids.outbox_id_for("timer", ids.timer_id_for(bookmark_id))
    assert sender.ids == [expected]
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, expected)
        assert row is not None
        assert (row.instance_id, row.request_id, row.queue) == ("t1", "req-t1", "broker.special")
    # And the job never waits for its lock, which expires if its holder dies
    assert locks.asked == [(bookmarks.TIMER_LOCK, settings.lock_ttl, 0)] * 2


def test_the_queue_job_skips_while_another_run_holds_its_lock_and_never_waits(
    factory: sessionmaker[Session], sender: RecordingSender, settings: Settings
) -> None:
    waiting_instance(factory, "i1")
    post_event(factory, "e1", "approval", "corr-i1")
    locks = RecordingLocks(FileLockProvider(Path(settings.var_dir) / "locks"))
    rt = Runtime(settings, factory=factory, locks=locks, sender=sender)
    held = locks.inner.acquire(bookmarks.QUEUE_LOCK, ttl=60, timeout=0)
    assert held is not None
    assert bookmarks.process_queue(rt) == bookmarks.QueueReport(skipped=True)
    held.release()
    assert bookmarks.process_queue(rt).matched == 1
    assert locks.asked == [(bookmarks.QUEUE_LOCK, settings.lock_ttl, 0)] * 2


def test_a_timer_whose_instance_is_gone_still_fires_on_the_default_queue(
    factory: sessionmaker[Session],
) -> None:
    bookmark_id = waiting_instance(factory, "gone", due_at=utcnow() - dt.timedelta(seconds=1))
    with transaction(factory) as session:
        session.delete(session.get(WorkflowInstance, "gone"))
    with transaction(factory) as session:
        (fired,) = bookmarks.fire_due_timers(session)
    assert fired == ids.outbox_id_for("timer", ids.timer_id_for(bookmark_id))
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, fired)
        assert row is not None
        assert (row.queue, row.request_id, row.instance_id) == (DEFAULT_QUEUE, None, "gone")


def test_a_failing_item_backs_off_exponentially(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given an item that failed twice already, with attempts left
    lenient = settings.replace(bookmark_queue_max_delivery_attempts=10, bookmark_queue_interval=3)
    post_event(factory, "e1", "approval", "corr-x")
    now = utcnow()
    with transaction(factory) as session:
        found = session.get(BookmarkQueueItem, "e1")
        assert found is not None
        found.delivery_attempts = 2
        # When it fails a third time
        bookmarks._failed(session, lenient, found, "boom", now)
        # Then it waits interval * 2**3 seconds
        assert found.delivery_attempts == 3
        assert found.next_attempt_at == now + dt.timedelta(seconds=3 * 8)
        assert found.last_error == "boom"


def test_the_timer_job_fires_the_earliest_timers_first_in_batches(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three due timers and a batch of two
    now = utcnow()
    for n, minutes in enumerate((1, 3, 2)):
        waiting_instance(factory, f"t{n}", due_at=now - dt.timedelta(minutes=minutes))
    # And statistics that show the table as small as it is (as autovacuum would gather them), so
    # the database may read the table in its own order rather than through the due-time index
    with transaction(factory) as session:
        session.execute(text("ANALYZE timers"))
    monkeypatch.setattr(bookmarks, "BATCH", 2)
    # When the job runs twice, Then the two most overdue fire first, the last one next
    with transaction(factory) as session:
        first = bookmarks.fire_due_timers(session, now=now)
    with transaction(factory) as session:
        second = bookmarks.fire_due_timers(session, now=now)

    def timer_of(instance_id: str) -> str:
        return ids.outbox_id_for("timer", ids.timer_id_for(ids.derive("bookmark", instance_id)))

    assert first == [timer_of("t1"), timer_of("t2")]
    assert second == [timer_of("t0")]


# Cancellation -------------------------------------------------------------------------------------


def test_cancel_removes_bookmarks_timers_and_open_work_of_the_whole_tree(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given a parent waiting on a timer, its child waiting on an event with a resume row queued
    waiting_instance(factory, "parent", due_at=utcnow() + dt.timedelta(seconds=60))
    waiting_instance(factory, "child", parent_id="parent")
    post_event(factory, "e1", "approval", "corr-child")
    assert bookmarks.process_queue(rt).matched == 1
    # When the parent is cancelled
    with transaction(factory) as session:
        changed = cancel_instances(session, ["parent"])
    # Then both are Cancelled, with no bookmarks, timers or open outbox rows left
    assert sorted(changed) == ["child", "parent"]
    with transaction(factory, write=False) as session:
        subs = session.scalars(select(WorkflowInstance.sub_status)).all()
        assert set(subs) == {"Cancelled"}
        assert session.scalars(select(Bookmark)).all() == []
        assert session.scalars(select(Timer)).all() == []
        states = session.scalars(select(OutboxRow.state)).all()
        assert states
        assert set(states) == {"done"}
