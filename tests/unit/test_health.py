"""Readiness (``broker.adapters.health``): each part checked, the part that is down named, a
part that hangs counted as down instead of holding the probe past its timeout."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters import health
from broker.settings import Settings
from broker.store import db
from broker.wiring.runtime import connect


@pytest.fixture
def factory(settings: Settings) -> sessionmaker[Session]:
    db.upgrade(settings.database_url)
    return db.make_session_factory(db.make_engine(settings.database_url))


def test_both_parts_reachable_is_ready(settings: Settings, factory: sessionmaker[Session]) -> None:
    ready = health.readiness(settings, factory)
    assert ready.status == 200
    assert ready.body() == {"status": "ok", "checks": {"database": "ok", "transport": "ok"}}


def test_an_unreachable_transport_is_named(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    ready = health.readiness(settings.replace(queue_url="redis://127.0.0.1:1/0"), factory)
    assert ready.status == 503
    assert ready.body()["down"] == ["transport"]
    assert ready.body()["error"] == "Not ready: transport unreachable"


def test_a_hanging_database_is_down_without_holding_the_probe(
    settings: Settings, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a database check that never answers (a host that drops packets)
    release = threading.Event()

    def hangs(_factory: Any) -> str:
        release.wait(30)
        return "ok"

    monkeypatch.setattr(health, "check_database", hangs)
    monkeypatch.setattr(health, "READY_TIMEOUT", 0.2)
    try:
        # When the probe asks, then the database is down and the transport still checked
        ready = health.readiness(settings, factory)
        assert ready.checks == {"database": "down", "transport": "ok"}
        assert ready.status == 503
    finally:
        release.set()


def test_the_probe_of_a_process_without_a_session_factory_builds_one_on_first_use(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    check = health.probe(settings, connect(settings))
    assert check().status == 200
    bogus = settings.replace(database_url="bogus://nowhere")
    broken = health.probe(bogus, connect(bogus))
    assert broken().checks["database"] == "down"
