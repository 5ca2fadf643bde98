"""Metrics: the counters and histograms move, the backlog gauges reflect rows in SQL, and the
multiprocess mode sums what other processes recorded."""

from __future__ import annotations

import dataclasses
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

from broker.adapters.locks import FileLockProvider
from broker.engine.run.results import JournalEntry
from broker.runtime import ids
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.steps import runner
from broker.settings import Settings
from broker.store import db
from broker.store.models import BookmarkQueueItem, DeadLetter, OutboxRow, Request, utcnow
from broker.telemetry import metrics
from broker.wiring.runtime import Runtime
from broker.wiring.web import create_internal_app
from tests.support.doubles import RecordingSender
from tests.support.ingress import signed_callback
from tests.support.runtime import prepare, runtime_env, submit_request
from tests.support.services import PROJECT_ROOT
from tests.support.sink import Sink
from tests.support.workflows import activity, literal, sink_workflow, workflow, write_workflow


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scraped(payload: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(payload.decode())
        for s in family.samples
    }


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
    with caplog.at_level(logging.WARNING, logger="broker.telemetry.metrics"):
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
    assert backlog.dead_letters == {"request": 1, "outbox": 0, "bookmark": 1, "webhook": 0}


def test_an_empty_backlog_reads_as_zeroes(factory: sessionmaker[Session]) -> None:
    with factory() as session:
        backlog = metrics.read_backlog(session)
    assert backlog.to_dict() == {
        "outbox": {"pending": 0, "dispatched": 0, "done": 0, "dead": 0},
        "oldestPendingAgeSeconds": 0.0,
        "oldestDispatchedAgeSeconds": 0.0,
        "webhookEndpointsDisabled": 0,
        "bookmarkQueueDepth": 0,
        "bookmarkQueueDelivered": 0,
        "deadLetters": {"request": 0, "outbox": 0, "bookmark": 0, "webhook": 0},
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


RECORD = "from broker.telemetry import metrics; metrics.record_accepted('MultiProcess')"


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


# Activity durations from a step's journal ---------------------------------------------------------


def entry(instance: str, kind: str, event: str, at: float) -> JournalEntry:
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=at)
    return JournalEntry(f"a-{instance}", instance, kind, None, event, None, stamp)


def test_record_journal_observes_each_activity_from_started_to_its_end() -> None:
    # Given a step in which one activity completed after 2s and another faulted after 0.5s
    done, failed = unique_type(), unique_type()
    journal = [
        entry("1", done, "Started", 0),
        entry("2", failed, "Started", 1),
        entry("2", failed, "Faulted", 1.5),
        entry("1", done, "Completed", 2),
    ]
    # When the runtime records the step
    metrics.record_journal(journal)
    # Then each is observed once with its own span
    assert sample("broker_activity_duration_seconds_count", activity_type=done) == 1
    assert sample("broker_activity_duration_seconds_sum", activity_type=done) == 2
    assert sample("broker_activity_duration_seconds_count", activity_type=failed) == 1
    assert sample("broker_activity_duration_seconds_sum", activity_type=failed) == 0.5


def test_record_journal_ignores_waits_that_open_or_close_in_another_step() -> None:
    # Given a step that suspends on an event, and the later step that completes it
    kind = unique_type()
    metrics.record_journal([entry("1", kind, "Started", 0)])
    metrics.record_journal([entry("1", kind, "Completed", 86400)])
    # Then the day of waiting is not counted as run time
    assert sample("broker_activity_duration_seconds_count", activity_type=kind) == 0


# Wired through the runtime ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Wired:
    rt: Runtime
    sink: Sink
    ok: str
    flaky: str
    broken: str


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[Wired]:
    """An in-process runtime on SQLite with three request types named for this test only."""
    tag = uuid.uuid4().hex[:8]
    folder = tmp_path / "wf"
    with Sink() as sink:
        sink.drop["/flaky"] = 1
        write_workflow(folder, sink_workflow("ok", f"Ok{tag}", sink.url("/ok")))
        write_workflow(
            folder,
            sink_workflow(
                "flaky",
                f"Flaky{tag}",
                sink.url("/flaky"),
                retry={"maxAttempts": 3, "initialDelay": 0.1, "maxDelay": 0.2},
            ),
        )
        write_workflow(
            folder,
            workflow(
                "broken",
                [activity("boom", "Elsa.Fault", message=literal("ledger refused"))],
                request_type=f"Broken{tag}",
            ),
        )
        database_url = f"sqlite:///{tmp_path / 'broker.db'}"
        settings = Settings.from_env(
            runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
        )
        factory, registry = prepare(settings)
        rt = Runtime(
            settings,
            factory=factory,
            registry=registry,
            sender=RecordingSender(),
            locks=FileLockProvider(tmp_path / "locks"),
        )
        try:
            yield Wired(rt, sink, f"Ok{tag}", f"Flaky{tag}", f"Broken{tag}")
        finally:
            db.dispose_engines()


def run(wired: Wired, request_type: str) -> tuple[str, Outcome]:
    """Submit a request and run its first step, as the worker's task would."""
    rt = wired.rt
    request_id = submit_request(rt.factory, rt.registry, request_type, publisher=rt.publisher)
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    return request_id, runner.run_request(rt, request_id, sender.sent[-1].id)


def test_a_completed_request_counts_once_with_its_latency_and_activity_durations(
    wired: Wired,
) -> None:
    http_before = sample(
        "broker_activity_duration_seconds_count", activity_type="Elsa.SendHttpRequest"
    )
    # Given a request whose workflow runs to completion
    request_id, outcome = run(wired, wired.ok)
    assert outcome is Outcome.DONE
    # When its task is delivered a second time
    assert runner.run_request(wired.rt, request_id, None) is Outcome.SKIPPED
    # Then it is counted once as completed, with one latency observation
    assert sample("broker_requests_completed_total", request_type=wired.ok) == 1
    assert sample("broker_requests_faulted_total", request_type=wired.ok) == 0
    assert sample("broker_request_latency_seconds_count", request_type=wired.ok) == 1
    # And the HTTP call it made was observed as an activity duration
    http_after = sample(
        "broker_activity_duration_seconds_count", activity_type="Elsa.SendHttpRequest"
    )
    assert http_after == http_before + 1


def test_a_faulted_workflow_counts_as_faulted(wired: Wired) -> None:
    _, outcome = run(wired, wired.broken)
    assert outcome is Outcome.DONE
    assert sample("broker_requests_faulted_total", request_type=wired.broken) == 1
    assert sample("broker_requests_completed_total", request_type=wired.broken) == 0
    assert sample("broker_request_latency_seconds_count", request_type=wired.broken) == 1


def test_a_scheduled_retry_is_counted_and_the_retried_request_completes(wired: Wired) -> None:
    # Given a request whose HTTP call fails once with 503
    request_id, _ = run(wired, wired.flaky)
    # Then a retry is counted and the request is not finished yet
    assert sample("broker_retries_total", request_type=wired.flaky) == 1
    assert sample("broker_request_latency_seconds_count", request_type=wired.flaky) == 0
    # When the retry runs (as its outbox row would deliver it)
    instance_id = ids.instance_id_for_request(request_id)
    assert runner.resume_instance(wired.rt, instance_id, None, retry=2) is Outcome.DONE
    # Then the request completes, counted once, and no further retry is counted
    assert sample("broker_requests_completed_total", request_type=wired.flaky) == 1
    assert sample("broker_retries_total", request_type=wired.flaky) == 1


def test_a_remote_callback_counts_the_request_it_finishes(tmp_path: Path) -> None:
    # Given a Processing request of a remotely executed type
    kind = unique_type()
    settings = Settings.from_env({
        "BROKER_VAR_DIR": str(tmp_path / "var"),
        "BROKER_DATABASE_URL": f"sqlite:///{tmp_path / 'broker.db'}",
        "BROKER_CALLBACK_SECRET": "s3cret",
        "BROKER_WATCH_WORKFLOWS": "false",
    })  # fmt: skip
    db.upgrade(settings.database_url)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    with db.transaction(factory) as session:
        session.add(
            Request(
                id="r-1",
                client_id="A",
                client_key="a",
                request_type=kind,
                request_type_key=kind.lower(),
                keys={},
                status="Processing",
                remote_attempt=1,
            )
        )
    client = create_internal_app(settings, session_factory=factory).test_client()
    callback = {"status": "Completed", "result": 1}
    try:
        # When the executor reports completion, and then (late) reports it again
        statuses = []
        for _ in range(2):
            body, headers = signed_callback("s3cret", "r-1", 1, callback)
            posted = client.post("/internal/requests/r-1/result", data=body, headers=headers)
            statuses.append(posted.status_code)
    finally:
        db.dispose_engines()
    # Then the request is counted once
    assert statuses == [204, 409]
    assert sample("broker_requests_completed_total", request_type=kind) == 1
    assert sample("broker_request_latency_seconds_count", request_type=kind) == 1


@pytest.mark.parametrize("bind", ["9808", "host:", "host:port", "0.0.0.0:70000", ""])
def test_a_malformed_metrics_bind_is_refused_naming_its_setting(bind: str) -> None:
    from broker.errors import ConfigError

    with pytest.raises(ConfigError, match="BROKER_INGRESS_METRICS_BIND") as caught:
        metrics.parse_bind(bind, "BROKER_INGRESS_METRICS_BIND")
    assert caught.value.details["field"] == "BROKER_INGRESS_METRICS_BIND"


def test_a_metrics_bind_without_host_listens_everywhere() -> None:
    assert metrics.parse_bind(":9808", "X") == ("0.0.0.0", 9808)  # noqa: S104
    assert metrics.parse_bind("127.0.0.1:9807", "X") == ("127.0.0.1", 9807)
    assert metrics.parse_bind("[::1]:9807", "X") == ("::1", 9807)


# The gauges the alert rules read (deploy/alerts/) ----------------------------------------------


def test_the_backlog_reads_the_oldest_unfinished_publish_and_disabled_webhook_endpoints(
    factory: sessionmaker[Session],
) -> None:
    from broker.store.models import WebhookEndpoint

    # Given a row published ten minutes ago and not finished, and one disabled endpoint of two
    now = utcnow()
    with db.transaction(factory) as session:
        session.add_all([
            OutboxRow(id=str(uuid.uuid4()), task_name="t", queue="q", args={},
                      state="dispatched", dispatched_at=now - dt.timedelta(minutes=10)),
            *(WebhookEndpoint(id=f"e-{enabled}", client_id="A", client_key="a", url="https://x",
                              events=[], secrets=[], source="api", enabled=enabled)
              for enabled in (True, False)),
        ])  # fmt: skip
    # When /metrics renders
    samples = scraped(metrics.render_metrics(factory)[0])
    # Then both gauges say so
    assert 600 <= samples[("broker_outbox_oldest_dispatched_age_seconds", ())] < 3600
    assert samples[("broker_webhook_endpoints_disabled", ())] == 1


def test_beat_jobs_and_worker_beats_are_recorded_as_timestamps() -> None:
    # Given no beat recorded for a fresh job name
    job = f"job_{uuid.uuid4().hex[:8]}"
    before = utcnow().timestamp()
    # When a worker starts that job and its loop beats
    metrics.record_maintenance(job)
    metrics.record_worker_heartbeat()
    # Then both are the current time
    assert sample("broker_maintenance_last_run_timestamp_seconds", job=job) >= before
    assert sample("broker_worker_heartbeat_timestamp_seconds") >= before


def test_a_metrics_port_answers_the_probes_and_names_what_is_down() -> None:
    from broker.adapters import health
    from tests.support.services import free_port

    # Given a metrics port whose readiness finds the transport down
    port = free_port()
    state = {"transport": "down"}

    def ready() -> health.Readiness:
        return health.Readiness({"database": "ok", **state})

    from broker.serving import metrics_port

    server = metrics_port.serve(f"127.0.0.1:{port}", "BROKER_WORKER_METRICS_BIND", ready=ready)
    try:
        import urllib.error
        import urllib.request

        def get(path: str) -> tuple[int, bytes]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        # Then liveness is ok, readiness is 503 naming the transport, metrics are served
        assert get("/healthz") == (200, b'{"status": "ok"}')
        status, body = get("/readyz")
        assert status == 503
        assert b'"down": ["transport"]' in body
        status, body = get("/metrics")
        assert status == 200
        assert b"broker_requests_accepted" in body
        # And once the transport is back, readiness is ok
        state["transport"] = "ok"
        assert get("/readyz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
