"""The purge keeps the timers table bounded: fired timers go after the finished-outbox retention,
timers still waiting stay (the soak found the table growing by one row per timer)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime.admin import recovery
from broker.settings import Settings
from broker.store.db import make_engine, make_session_factory, transaction, upgrade
from broker.store.models import Timer, utcnow
from tests.support.runtime import runtime_env


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        runtime_env(
            tmp_path,
            database_url=database_url,
            workflows=tmp_path / "wf",
            BROKER_ORPHANED_OUTBOX_RETENTION="3600",
        )
    )


@pytest.fixture
def factory(settings: Settings) -> Iterator[sessionmaker[Session]]:
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    yield make_session_factory(engine)
    engine.dispose()


def timer(name: str, *, due: dt.datetime, fired: dt.datetime | None) -> Timer:
    return Timer(id=name, instance_id=f"i-{name}", bookmark_id=f"b-{name}", due_at=due,
                 fired_at=fired)  # fmt: skip


def test_the_purge_removes_fired_timers_past_the_retention_only(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Given timers fired two hours ago, fired ten minutes ago, and waiting (one long overdue)
    now = utcnow()
    old, recent = now - dt.timedelta(hours=2), now - dt.timedelta(minutes=10)
    with transaction(factory) as session:
        session.add_all(
            [
                timer("fired-old", due=old, fired=old),
                timer("fired-recent", due=recent, fired=recent),
                timer("waiting", due=now + dt.timedelta(hours=1), fired=None),
                timer("overdue", due=old, fired=None),
            ]
        )
    # When the purge runs, twice
    with transaction(factory) as session:
        first = recovery.purge_old(session, settings, now=now)
    with transaction(factory) as session:
        second = recovery.purge_old(session, settings, now=now)
    # Then only the timer fired before the retention is gone, and the second run finds nothing
    assert (first.timers, second.timers) == (1, 0)
    with transaction(factory, write=False) as session:
        left = sorted(session.scalars(select(Timer.id)))
    assert left == ["fired-recent", "overdue", "waiting"]
