"""Committed audit events become structured log lines; rolled-back ones do not."""

from __future__ import annotations

import json
import logging

import pytest

import broker.runtime.audit  # noqa: F401 - registers the audit log hook
from broker.logs import JsonFormatter
from broker.settings import Settings
from broker.store import db
from broker.store.models import RequestEvent


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
