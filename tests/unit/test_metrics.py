"""Metrics: the counters and histograms move, the backlog gauges reflect rows in SQL, and the
multiprocess mode sums what other processes recorded."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from broker import metrics
from broker.store import db
from broker.store.models import BookmarkQueueItem, DeadLetter, OutboxRow, utcnow
from tests.conftest import PROJECT_ROOT


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scraped(payload: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(payload.decode())
        for s in family.samples
    }


@pytest.fixture
def factory(sqlite_url: str) -> Iterator[sessionmaker[Session]]:
    db.upgrade(sqlite_url)
    yield db.make_session_factory(db.make_engine(sqlite_url))
    db.dispose_engines()


def unique_type() -> str:
    # Counters are process-wide; a fresh label keeps each test's numbers its own.
    return f"Type{uuid.uuid4().hex[:8]}"


# Recording ----------------------------------------------------------------------------------------


def test_accepted_and_retries_count_per_request_type() -> None:
    kind = unique_type()
    metrics.record_accepted(kind)
    metrics.record_accepted(kind)
    metrics.record_retry(kind)
    assert sample("broker_requests_accepted_total", request_type=kind) == 2
    assert sample("broker_retries_total", request_type=kind) == 1


def test_a_finished_request_counts_its_status_and_observes_its_latency() -> None:
    # Given a request submitted 90 seconds before it completed, and one that faulted
    kind = unique_type()
    submitted = utcnow()
    metrics.record_finished(kind, "Completed", submitted, submitted + dt.timedelta(seconds=90))
    metrics.record_finished(kind, "Faulted", submitted, submitted + dt.timedelta(seconds=1))
    # Then each status is counted and both latencies fall in their buckets
    assert sample("broker_requests_completed_total", request_type=kind) == 1
    assert sample("broker_requests_faulted_total", request_type=kind) == 1
    assert sample("broker_request_latency_seconds_count", request_type=kind) == 2
    assert sample("broker_request_latency_seconds_sum", request_type=kind) == 91
    assert sample("broker_request_latency_seconds_bucket", request_type=kind, le="60.0") == 1


def test_a_cancelled_request_observes_latency_but_counts_neither_outcome() -> None:
    kind = unique_type()
    metrics.record_finished(kind, "Cancelled", utcnow())
    assert sample("broker_request_latency_seconds_count", request_type=kind) == 1
    assert sample("broker_requests_completed_total", request_type=kind) == 0
    assert sample("broker_requests_faulted_total", request_type=kind) == 0


def test_a_non_terminal_status_observes_nothing() -> None:
    kind = unique_type()
    metrics.record_finished(kind, "Processing", utcnow())
    assert sample("broker_request_latency_seconds_count", request_type=kind) == 0


def test_timed_activity_observes_the_block_even_when_it_raises() -> None:
    kind = unique_type()
    with metrics.timed_activity(kind):
        pass
    with pytest.raises(RuntimeError), metrics.timed_activity(kind):
        raise RuntimeError("activity failed")
    metrics.record_activity(kind, 2.0)
    assert sample("broker_activity_duration_seconds_count", activity_type=kind) == 3
    assert sample("broker_activity_duration_seconds_sum", activity_type=kind) >= 2.0


def test_recording_never_raises_into_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    # When a helper is called with a status that does not exist
    with caplog.at_level(logging.WARNING, logger="broker.metrics"):
        metrics.record_finished(unique_type(), "Bogus", utcnow())
    # Then it logs instead of failing the work it describes
    assert "record_finished" in caplog.text


# Backlog gauges -----------------------------------------------------------------------------------


def seed_backlog(factory: sessionmaker[Session]) -> None:
    now = utcnow()

    def row(state: str, available_at: dt.datetime = now) -> OutboxRow:
        return OutboxRow(id=str(uuid.uuid4()), task_name="t", queue="q", args={}, state=state,
                         available_at=available_at)  # fmt: skip

    with db.transaction(factory) as session:
        session.add_all([
            row("pending", now - dt.timedelta(minutes=5)),
            row("pending", now + dt.timedelta(minutes=5)),  # a scheduled retry, not late
            row("dispatched"),
            row("done"),
            BookmarkQueueItem(id="q-1", name="Approved"),
            BookmarkQueueItem(id="q-2", name="Approved"),
            DeadLetter(id="d-1", kind="bookmark", reason="Expired"),
            DeadLetter(id="d-2", kind="request", reason="Exhausted"),
            DeadLetter(id="d-3", kind="request", reason="Exhausted", replayable=False,
                       replayed_at=now),
        ])  # fmt: skip


def test_read_backlog_counts_rows_and_the_oldest_due_pending_age(
    factory: sessionmaker[Session],
) -> None:
    seed_backlog(factory)
    with factory() as session:
        backlog = metrics.read_backlog(session)
    assert backlog.outbox == {"pending": 2, "dispatched": 1, "done": 1, "dead": 0}
    assert 300 <= backlog.oldest_pending_age < 3600
    assert backlog.bookmark_queue_depth == 2
    assert backlog.dead_letters == {"request": 1, "outbox": 0, "bookmark": 1}


def test_an_empty_backlog_reads_as_zeroes(factory: sessionmaker[Session]) -> None:
    with factory() as session:
        backlog = metrics.read_backlog(session)
    assert backlog.to_dict() == {
        "outbox": {"pending": 0, "dispatched": 0, "done": 0, "dead": 0},
        "oldestPendingAgeSeconds": 0.0,
        "bookmarkQueueDepth": 0,
        "deadLetters": {"request": 0, "outbox": 0, "bookmark": 0},
    }


def test_render_metrics_exposes_gauges_from_rows_and_process_counters(
    factory: sessionmaker[Session],
) -> None:
    # Given rows in the database and a counted acceptance in this process
    seed_backlog(factory)
    kind = unique_type()
    metrics.record_accepted(kind)
    # When /metrics renders
    payload, content_type = metrics.render_metrics(factory)
    samples = scraped(payload)
    # Then the gauges are what the rows say and the counter is there too
    assert content_type.startswith("text/plain")
    assert samples[("broker_backlog_database_up", ())] == 1
    assert samples[("broker_outbox_pending", ())] == 2
    assert samples[("broker_outbox_oldest_pending_age_seconds", ())] >= 300
    assert samples[("broker_bookmark_queue_depth", ())] == 2
    assert samples[("broker_dead_letters", (("kind", "bookmark"),))] == 1
    assert samples[("broker_dead_letters", (("kind", "request"),))] == 1
    assert samples[("broker_dead_letters", (("kind", "outbox"),))] == 0
    assert samples[("broker_requests_accepted_total", (("request_type", kind),))] == 1


def test_the_gauges_move_when_rows_change(factory: sessionmaker[Session]) -> None:
    before = scraped(metrics.render_metrics(factory)[0])
    with db.transaction(factory) as session:
        session.add(BookmarkQueueItem(id="q-new", name="Approved"))
    after = scraped(metrics.render_metrics(factory)[0])
    assert before[("broker_bookmark_queue_depth", ())] == 0
    assert after[("broker_bookmark_queue_depth", ())] == 1


def test_an_unreadable_database_reports_down_instead_of_failing_the_scrape(
    tmp_path: Path,
) -> None:
    # Given a database without the broker's tables
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        samples = scraped(metrics.render_metrics(db.make_session_factory(engine))[0])
    finally:
        engine.dispose()
    assert samples[("broker_backlog_database_up", ())] == 0
    assert ("broker_outbox_pending", ()) not in samples


# Multiprocess mode --------------------------------------------------------------------------------


RECORD = "from broker import metrics; metrics.record_accepted('MultiProcess')"


def test_multiprocess_render_sums_what_other_processes_recorded(tmp_path: Path) -> None:
    # Given two processes that each counted one acceptance into the shared folder
    folder = tmp_path / "prometheus"
    folder.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}  # noqa: TID251 - the child's
    for _ in range(2):
        subprocess.run([sys.executable, "-c", RECORD], env=env, cwd=PROJECT_ROOT, check=True,
                       timeout=60)  # fmt: skip
    # When this process renders from that folder
    samples = scraped(metrics.render_metrics(None, multiprocess_dir=str(folder))[0])
    # Then both are summed, and nothing of this process's own registry leaks in
    assert samples[("broker_requests_accepted_total", (("request_type", "MultiProcess"),))] == 2
    assert not any(name.startswith("python_") for name, _ in samples)
