"""Which bookmarks a stimulus resumes, and what one queue run does with several stimuli.

A stimulus that names its bookmark resumes that one alone; an event resumes every bookmark waiting
for its name, oldest first. One run of the queue job handles each due item on its own: a failing
item is counted and put off while the others are still served, and the report counts each
outcome once. On SQLite and PostgreSQL, in-process, with a recording sender.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.names import RESUME_INSTANCE
from broker.runtime import ids
from broker.runtime.bookmarks import queue as bookmarks
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import (
    Bookmark,
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    WorkflowDefinition,
    WorkflowInstance,
    utcnow,
)
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import bookmark_queue_settings


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return bookmark_queue_settings(database_url, tmp_path)


@pytest.fixture
def rt(settings: Settings, factory: sessionmaker[Session]) -> Runtime:
    locks = FileLockProvider(Path(settings.var_dir) / "locks")
    return Runtime(settings, factory=factory, locks=locks, sender=RecordingSender())


def instance(
    factory: sessionmaker[Session],
    instance_id: str,
    *,
    status: str = "Running",
    request_id: str | None = None,
) -> None:
    now = utcnow()
    with transaction(factory) as session:
        session.add(
            WorkflowInstance(
                id=instance_id,
                definition_id="approval",
                definition_version_id="approval-v1",
                version=1,
                request_id=request_id,
                status=status,
                sub_status="Suspended" if status == "Running" else status,
                checkpoint=1,
                created_at=now,
                updated_at=now,
            )
        )


def bookmark(
    factory: sessionmaker[Session],
    bookmark_id: str,
    instance_id: str,
    *,
    payload: dict[str, str] | None = None,
    name: str = bookmarks.EVENT_BOOKMARK,
    created_at: dt.datetime | None = None,
    correlation_id: str | None = None,
    client_key: str = "clienta",
) -> str:
    with transaction(factory) as session:
        session.add(
            Bookmark(
                id=bookmark_id,
                instance_id=instance_id,
                activity_id="wait",
                activity_instance_id=f"{bookmark_id}-wait",
                name=name,
                hash=ids.derive("hash", bookmark_id),
                payload={"eventName": "approval"} if payload is None else payload,
                correlation_id=correlation_id,
                client_key=client_key,
                created_at=created_at or utcnow(),
            )
        )
    return bookmark_id


def stimulus(
    factory: sessionmaker[Session],
    item_id: str,
    name: str = "approval",
    *,
    bookmark_id: str | None = None,
    correlation_id: str | None = None,
    client_key: str | None = "clienta",
    due_at: dt.datetime | None = None,
    created_at: dt.datetime | None = None,
) -> None:
    with transaction(factory) as session:
        queued = bookmarks.enqueue_stimulus(
            session,
            item_id=item_id,
            name=name,
            payload={"item": item_id},
            bookmark_id=bookmark_id,
            correlation_id=correlation_id,
            client_key=client_key,
        )
        if due_at is not None:
            queued.next_attempt_at = due_at
        if created_at is not None:
            queued.created_at = created_at


def matches(factory: sessionmaker[Session], item_id: str) -> list[str]:
    with transaction(factory, write=False) as session:
        found = session.get(BookmarkQueueItem, item_id)
        assert found is not None
        return [b.id for b in bookmarks.matching_bookmarks(session, found)]


def resumed(factory: sessionmaker[Session]) -> list[tuple[str, str]]:
    """(instance, bookmark) of every resume row written, in id order."""
    with transaction(factory, write=False) as session:
        rows = session.scalars(select(OutboxRow).order_by(OutboxRow.id)).all()
        return sorted((r.args["instance_id"], r.args["bookmark_id"]) for r in rows)


# Matching -----------------------------------------------------------------------------------------


def test_a_stimulus_naming_its_bookmark_resumes_that_bookmark_alone(
    rt: Runtime, factory: sessionmaker[Session]
) -> None:
    # Given two instances waiting for the same event, and a third waiting on a bookmark of
    # another kind (a child's completion)
    for name in ("i1", "i2", "parent"):
        instance(factory, name)
    bookmark(factory, "bm-1", "i1")
    bookmark(factory, "bm-2", "i2")
    bookmark(factory, "bm-child", "parent", name="Elsa.DispatchWorkflow", payload={})
    # When stimuli name one bookmark each (one of them gone since)
    stimulus(factory, "to-2", bookmark_id="bm-2")
    stimulus(factory, "to-child", "child-done", bookmark_id="bm-child")
    stimulus(factory, "to-gone", bookmark_id="bm-gone")
    # Then each resumes its own bookmark only, whatever the event bookmarks wait for
    assert matches(factory, "to-2") == ["bm-2"]
    assert matches(factory, "to-child") == ["bm-child"]
    assert matches(factory, "to-gone") == []
    report = bookmarks.process_queue(rt)
    assert (report.matched, report.waiting) == (2, 1)
    assert resumed(factory) == [("i2", "bm-2"), ("parent", "bm-child")]


def test_an_event_resumes_every_bookmark_waiting_for_it_oldest_first(
    factory: sessionmaker[Session],
) -> None:
    # Given three instances waiting for "Approval" (in any case), created in an order their ids
    # do not follow, two of them in the same instant
    start = utcnow() - dt.timedelta(minutes=5)
    for name in ("i1", "i2", "i3", "i4"):
        instance(factory, name)
    bookmark(factory, "bm-c", "i1", payload={"eventName": "Approval"}, created_at=start)
    bookmark(factory, "bm-b", "i2", created_at=start + dt.timedelta(seconds=2))
    bookmark(factory, "bm-a", "i3", created_at=start + dt.timedelta(seconds=2))
    # and one waiting for something else
    bookmark(factory, "bm-other", "i4", payload={"eventName": "rejection"})
    # When an event of that name comes, for no particular correlation id
    stimulus(factory, "e1", "APPROVAL")
    # Then it resumes the three, the oldest first (and by id within the same instant)
    assert matches(factory, "e1") == ["bm-c", "bm-a", "bm-b"]


def test_an_event_bookmark_without_an_event_name_is_resumed_by_no_event(
    factory: sessionmaker[Session],
) -> None:
    instance(factory, "i1")
    bookmark(factory, "bm-unnamed", "i1", payload={})
    # not even by an event whose name reads like a missing value
    stimulus(factory, "e1", "None")
    assert matches(factory, "e1") == []


def test_an_event_with_an_empty_name_resumes_no_bookmark_without_a_name(
    factory: sessionmaker[Session],
) -> None:
    # Given bookmarks with no event name: missing, empty, and null
    instance(factory, "i1")
    bookmark(factory, "bm-missing", "i1", payload={})
    bookmark(factory, "bm-empty", "i1", payload={"eventName": ""})
    bookmark(factory, "bm-null", "i1", payload={"eventName": None})  # type: ignore[dict-item]
    # When an event with an empty name comes
    stimulus(factory, "e-empty", "")
    # Then it resumes none of them
    assert matches(factory, "e-empty") == []


def test_a_bookmark_whose_event_name_is_null_is_not_resumed_by_the_event_none(
    factory: sessionmaker[Session],
) -> None:
    # Given a bookmark whose eventName is null (JSON null, not the text "None")
    instance(factory, "i1")
    bookmark(factory, "bm-null", "i1", payload={"eventName": None})  # type: ignore[dict-item]
    # When events named "none" and "None" come
    stimulus(factory, "e-lower", "none")
    stimulus(factory, "e-title", "None")
    # Then neither resumes it
    assert matches(factory, "e-lower") == []
    assert matches(factory, "e-title") == []


def test_an_event_for_one_correlation_id_resumes_only_that_conversation(
    factory: sessionmaker[Session],
) -> None:
    for name in ("i1", "i2"):
        instance(factory, name)
    bookmark(factory, "bm-1", "i1", correlation_id="order-1")
    bookmark(factory, "bm-2", "i2", correlation_id="order-2")
    stimulus(factory, "e1", correlation_id="order-2")
    stimulus(factory, "e-any", correlation_id=None)
    assert matches(factory, "e1") == ["bm-2"]
    assert sorted(matches(factory, "e-any")) == ["bm-1", "bm-2"]


def test_a_stimulus_of_the_runtime_itself_reaches_every_clients_bookmark(
    factory: sessionmaker[Session],
) -> None:
    # A stimulus with no client (the runtime's own) is not limited to one client's bookmarks
    for name in ("i1", "i2"):
        instance(factory, name)
    bookmark(factory, "bm-a", "i1", client_key="clienta")
    bookmark(factory, "bm-b", "i2", client_key="clientb")
    stimulus(factory, "e1", client_key=None)
    stimulus(factory, "e-b", client_key="clientb")
    assert sorted(matches(factory, "e1")) == ["bm-a", "bm-b"]
    assert matches(factory, "e-b") == ["bm-b"]


# Queueing ---------------------------------------------------------------------------------------


def test_a_queued_stimulus_keeps_what_it_was_given_and_is_due_at_once(
    factory: sessionmaker[Session],
) -> None:
    before = utcnow()
    with transaction(factory) as session:
        bookmarks.enqueue_stimulus(
            session,
            item_id="s1",
            name="approval",
            payload={"approved": True},
            instance_id="i1",
            bookmark_id="bm-1",
            correlation_id="order-1",
            client_key="clienta",
        )
    # And queueing the same id again (a retried request) keeps the first
    with transaction(factory) as session:
        again = bookmarks.enqueue_stimulus(
            session, item_id="s1", name="other", payload={"approved": False}
        )
        assert again.name == "approval"
    with transaction(factory, write=False) as session:
        queued = session.get(BookmarkQueueItem, "s1")
        assert queued is not None
        assert (
            queued.name,
            queued.payload,
            queued.instance_id,
            queued.bookmark_id,
            queued.correlation_id,
            queued.client_key,
            queued.delivery_attempts,
        ) == ("approval", {"approved": True}, "i1", "bm-1", "order-1", "clienta", 0)
        assert queued.created_at == queued.next_attempt_at
        assert before <= queued.created_at <= utcnow()
        assert session.scalars(select(BookmarkQueueItem.id)).all() == ["s1"]


# One run over several items ---------------------------------------------------------------------


def test_one_run_handles_each_due_item_on_its_own_and_counts_each_outcome_once(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    now = utcnow()
    earlier = now - dt.timedelta(seconds=30)
    # Given, in the order they fall due:
    # - an item whose bookmark names an instance that is gone (it fails),
    instance(factory, "gone")
    bookmark(factory, "bm-gone", "gone", payload={"eventName": "broken"})
    with transaction(factory) as session:
        session.delete(session.get(WorkflowInstance, "gone"))
    stimulus(factory, "a-fails", "broken", due_at=earlier)
    # - an event that resumes two instances, one serving a request on a dedicated queue,
    instance(factory, "i1", request_id="req-1")
    instance(factory, "i2")
    bookmark(factory, "bm-1", "i1", payload={"eventName": "approval"})
    bookmark(factory, "bm-2", "i2", payload={"eventName": "approval"})
    stimulus(factory, "b-two", "approval", due_at=earlier + dt.timedelta(seconds=1))
    # - an event that matches nothing yet, and one that matches nothing since the TTL,
    stimulus(factory, "c-waits", "later", due_at=earlier + dt.timedelta(seconds=2))
    stimulus(
        factory,
        "d-expires",
        "never",
        due_at=earlier + dt.timedelta(seconds=3),
        created_at=now - dt.timedelta(seconds=settings.bookmark_queue_ttl + 5),
    )
    # - an event whose only bookmark belongs to a finished instance (it lost the race),
    instance(factory, "done", status="Finished")
    bookmark(factory, "bm-done", "done", payload={"eventName": "late"})
    stimulus(factory, "e-finished", "late", due_at=earlier + dt.timedelta(seconds=4))
    # - and one more event that resumes a third instance
    instance(factory, "i3")
    bookmark(factory, "bm-3", "i3", payload={"eventName": "signed"})
    stimulus(factory, "f-one", "signed", due_at=earlier + dt.timedelta(seconds=5))
    with transaction(factory) as session:
        session.add(
            WorkflowDefinition(
                id="approval-v1", definition_id="approval", version=1, queue="broker.special",
                content_hash="h", document={},
            )
        )  # fmt: skip
    # When the queue job runs once
    with transaction(factory) as session:
        started = utcnow()
        report, written = bookmarks.process_due_items(session, settings)
        finished = utcnow()
    # Then every outcome is counted once, and the failure did not stop the items after it
    assert report == bookmarks.QueueReport(matched=2, waiting=2, expired=1, failed=1)
    expected = {
        ("b-two", "bm-1"): ("i1", "req-1"),
        ("b-two", "bm-2"): ("i2", None),
        ("f-one", "bm-3"): ("i3", None),
    }
    assert sorted(written) == sorted(
        ids.outbox_id_for("resume", item_id, bookmark_id) for item_id, bookmark_id in expected
    )
    with transaction(factory, write=False) as session:
        for (item_id, bookmark_id), (instance_id, request_id) in expected.items():
            row = session.get(OutboxRow, ids.outbox_id_for("resume", item_id, bookmark_id))
            assert row is not None
            assert (row.task_name, row.queue, row.state) == (
                RESUME_INSTANCE,
                "broker.special",
                "pending",
            )
            assert (row.instance_id, row.request_id) == (instance_id, request_id)
            assert row.args == {
                "instance_id": instance_id,
                "bookmark_id": bookmark_id,
                "queue_item_id": item_id,
            }
            assert started <= row.available_at <= finished
        items = {i.id: i for i in session.scalars(select(BookmarkQueueItem))}
        letters = session.scalars(select(DeadLetter)).all()
    # The delivered items stay, as dispatched, for the dead-letter TTL (their resumes read them)
    delivered = dt.timedelta(seconds=settings.dead_letter_ttl)
    for item_id in ("b-two", "f-one"):
        kept = items[item_id]
        assert kept.delivery_attempts == 1
        assert kept.options is not None
        assert sorted(kept.options["dispatched"]) == sorted(
            ids.outbox_id_for("resume", i, b) for i, b in expected if i == item_id
        )
        assert started + delivered <= kept.next_attempt_at <= finished + delivered
    # The unmatched ones wait one interval, the failed one backs off, the expired one is buried
    interval = dt.timedelta(seconds=settings.bookmark_queue_interval)
    for item_id in ("c-waits", "e-finished"):
        assert items[item_id].delivery_attempts == 0
        assert started + interval <= items[item_id].next_attempt_at <= finished + interval
    assert items["a-fails"].delivery_attempts == 1
    assert items["a-fails"].next_attempt_at >= started + 2 * interval
    assert "d-expires" not in items
    assert [(d.source_id, d.reason) for d in letters] == [("d-expires", "Expired")]


def test_a_run_takes_at_most_one_batch_of_the_items_due_by_then(
    factory: sessionmaker[Session],
) -> None:
    now = utcnow()
    for n in range(3):
        stimulus(factory, f"e{n}", due_at=now - dt.timedelta(seconds=10 - n))
    stimulus(factory, "not-yet", due_at=now + dt.timedelta(minutes=5))
    with transaction(factory, write=False) as session:
        assert [i.id for i in bookmarks.due_items(session, now, limit=2)] == ["e0", "e1"]
        assert [i.id for i in bookmarks.due_items(session, now)] == ["e0", "e1", "e2"]
        # an item due at the very instant of the run is due
        exactly = now - dt.timedelta(seconds=8)
        assert [i.id for i in bookmarks.due_items(session, exactly)] == ["e0", "e1", "e2"]
        assert bookmarks.due_items(session, now - dt.timedelta(minutes=1)) == []
