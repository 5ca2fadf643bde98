"""Committed audit events become structured log lines; rolled-back ones do not."""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings
from broker.store import audit, db
from broker.store.models import RequestEvent
from broker.telemetry.logs import JsonFormatter


def test_each_committed_audit_event_is_one_json_log_line(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a migrated database
    db.upgrade(settings.database_url)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    caplog.set_level(logging.INFO, logger="broker.audit")
    # When one transaction commits an audit event and another rolls one back
    with db.transaction(factory) as session:
        session.add(
            RequestEvent(
                request_id="r-1",
                event_type="RequestCompleted",
                source="worker",
                message="done",
                properties={"instanceId": "i-1", "payload": {"secret": "s3cr3t"}},
            )
        )

    def add_then_fail() -> None:
        with db.transaction(factory) as session:
            session.add(RequestEvent(request_id="r-2", event_type="RequestFaulted", source="x"))
            session.flush()
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        add_then_fail()
    # Then exactly the committed one was logged, with its ids and without its payload
    records = [r for r in caplog.records if r.name == "broker.audit"]
    assert [r.__dict__["event_type"] for r in records] == ["RequestCompleted"]
    line = json.loads(JsonFormatter().format(records[0]))
    assert line["event_type"] == "RequestCompleted"
    assert line["request_id"] == "r-1"
    assert line["instance_id"] == "i-1"
    assert line["source"] == "worker"
    assert "s3cr3t" not in json.dumps(line)


def test_every_factory_built_by_the_store_logs_audit_events(settings: Settings) -> None:
    # Given the session factory every process builds (workers, ingress, console, command line)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    # Then the audit listeners are on it
    assert audit.installed(factory)


def test_importing_audit_installs_nothing() -> None:
    # Given the audit module imported (above), When a factory is built without the store's builder
    factory = sessionmaker(bind=create_engine("sqlite://"))
    # Then neither it nor SQLAlchemy's global Session carries an audit listener
    assert not audit.installed(factory)
    for name, listener in audit._LISTENERS:
        assert not event.contains(Session, name, listener)


def test_installing_twice_logs_each_event_once(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a store factory the audit hook is installed on a second time
    db.upgrade(settings.database_url)
    factory = audit.install(db.make_session_factory(db.make_engine(settings.database_url)))
    caplog.set_level(logging.INFO, logger="broker.audit")
    # When one audit event commits
    with db.transaction(factory) as session:
        session.add(RequestEvent(request_id="r-1", event_type="RequestCompleted", source="x"))
    # Then it is logged once
    assert len([r for r in caplog.records if r.name == "broker.audit"]) == 1
