"""Pausing the runtime, on SQLite and PostgreSQL: the relay publishes nothing, task adapters hand
their rows back, submissions are refused; after the resume the held work is published."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.errors import RuntimePaused
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.pause import forget_paused, is_paused_cached, paused_if_known, set_paused
from broker.runtime.requests.submission import Submission, submit
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow, Request, utcnow
from tests.support.doubles import RecordingSender
from tests.support.runtime import runtime_env


class Pinned:
    definition_id = "approval"
    version = 1
    version_id = "approval-v1"
    queue = None


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(runtime_env(tmp_path, database_url=database_url, workflows=tmp_path))


@pytest.fixture
def locks(tmp_path: Path) -> FileLockProvider:
    return FileLockProvider(tmp_path / "locks")


def pause(factory: sessionmaker[Session], paused: bool) -> None:
    with transaction(factory) as session:
        set_paused(session, paused)


def add_row(factory: sessionmaker[Session], row_id: str) -> str:
    with transaction(factory) as session:
        outbox.enqueue(
            session,
            outbox_id=row_id,
            task_name="broker.resume_instance",
            queue="broker.default",
            args={"instance_id": "i1"},
        )
    return row_id


def state_of(factory: sessionmaker[Session], row_id: str) -> tuple[str, str | None]:
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        return row.state, row.last_error


def test_relay_publishes_nothing_while_paused_and_everything_after_resume(
    settings: Settings, factory: sessionmaker[Session], locks: FileLockProvider
) -> None:
    # Given queued work and a paused runtime
    add_row(factory, "r1")
    pause(factory, True)
    sender = RecordingSender()
    # When the relay runs
    report = outbox.relay(settings, factory, sender, locks)
    # Then it publishes nothing and says why
    assert report.paused
    assert report.published == 0
    assert sender.ids == []
    assert state_of(factory, "r1")[0] == "pending"
    # When the runtime is resumed and the relay runs again
    pause(factory, False)
    report = outbox.relay(settings, factory, sender, locks)
    # Then the held work is published
    assert not report.paused
    assert report.published == 1
    assert sender.ids == ["r1"]


def test_task_adapter_hands_its_row_back_while_paused(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given a row already published to a worker
    add_row(factory, "r1")
    with transaction(factory) as session:
        outbox.mark_dispatched(session, "r1", lease=60, only_pending=True)
    # When the runtime is running, the task adapter may run it
    assert outbox.hold_if_paused(factory, "r1") is False
    assert state_of(factory, "r1")[0] == "dispatched"
    # When the runtime is paused
    pause(factory, True)
    held = outbox.hold_if_paused(factory, "r1")
    # Then the task adapter must not run it: the row is pending again, due a little later
    assert held is True
    assert state_of(factory, "r1") == ("pending", "runtime paused")
    with transaction(factory, write=False) as session:
        row = session.get(OutboxRow, "r1")
        assert row is not None
        assert row.available_at > utcnow()
    # And a call without a row is never held (nothing would pick it up again)
    assert outbox.hold_if_paused(factory, None) is False


@pytest.mark.parametrize("paused", [True, False])
def test_task_adapter_trusts_a_fresh_cached_flag_either_way(
    factory: sessionmaker[Session], paused: bool
) -> None:
    # Given a dispatched row and a flag this process read a moment ago
    add_row(factory, "r1")
    with transaction(factory) as session:
        outbox.mark_dispatched(session, "r1", lease=60, only_pending=True)
    pause(factory, paused)
    forget_paused()
    with transaction(factory, write=False) as session:
        assert is_paused_cached(session) is paused
    assert paused_if_known(factory) is paused
    # When the adapter asks, Then it answers from the cache: hold (and hand back) only if paused
    assert outbox.hold_if_paused(factory, "r1") is paused
    assert state_of(factory, "r1")[0] == ("pending" if paused else "dispatched")


def test_submissions_are_refused_while_paused_and_accepted_after_resume(
    factory: sessionmaker[Session],
) -> None:
    # Given a paused runtime
    pause(factory, True)
    submission = Submission(request_type="Approval", keys={})
    # When a client submits
    # Then the submission is refused and nothing is written
    with pytest.raises(RuntimePaused), transaction(factory) as session:
        submit(session, client_id="ClientA", submission=submission, workflow=Pinned())
    with transaction(factory, write=False) as session:
        assert session.scalar(select(func.count()).select_from(Request)) == 0
    # When the runtime is resumed, the same submission is accepted
    pause(factory, False)
    with transaction(factory) as session:
        accepted = submit(session, client_id="ClientA", submission=submission, workflow=Pinned())
    assert accepted.created
    assert accepted.outbox_ids
