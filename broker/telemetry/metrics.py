"""Prometheus metrics: counters and histograms the processes record (summed across processes
through ``PROMETHEUS_MULTIPROC_DIR``), and backlog gauges read from SQL at scrape time."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.store.models import (
    BookmarkQueueItem,
    DeadLetter,
    DeadLetterKind,
    OutboxRow,
    OutboxState,
    RequestStatus,
    WebhookEndpoint,
    utcnow,
)

logger = logging.getLogger(__name__)

P = ParamSpec("P")

# Submit-to-terminal spans seconds (a plain workflow) to days (a human approval).
LATENCY_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400, 604800)
ACTIVITY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


REQUESTS_ACCEPTED = Counter(
    "broker_requests_accepted", "Requests accepted, by request type", ["request_type"]
)
REQUESTS_COMPLETED = Counter(
    "broker_requests_completed",
    "Requests that reached Completed, by request type",
    ["request_type"],
)
REQUESTS_FAULTED = Counter(
    "broker_requests_faulted", "Requests that reached Faulted, by request type", ["request_type"]
)
RETRIES = Counter(
    "broker_retries", "Activity retries scheduled after a transient error", ["request_type"]
)
REQUEST_LATENCY = Histogram(
    "broker_request_latency_seconds",
    "Seconds from submission to a terminal status, by request type",
    ["request_type"],
    buckets=LATENCY_BUCKETS,
)
ACTIVITY_DURATION = Histogram(
    "broker_activity_duration_seconds",
    "Seconds one activity execution took, by activity type",
    ["activity_type"],
    buckets=ACTIVITY_BUCKETS,
)

WEBHOOK_DELIVERIES = Counter(
    "broker_webhook_deliveries",
    "Webhook delivery attempts, by outcome (delivered, retry, dead)",
    ["outcome"],
)
#: Alerts read these two as "beat silent" and "worker heartbeats missing" (deploy/alerts/).
MAINTENANCE_LAST_RUN = Gauge(
    "broker_maintenance_last_run_timestamp_seconds",
    "Unix time a worker last started this beat job",
    ["job"],
    multiprocess_mode="max",
)
WORKER_HEARTBEAT = Gauge(
    "broker_worker_heartbeat_timestamp_seconds",
    "Unix time this worker's event loop last beat (every 10 s while it runs)",
    multiprocess_mode="max",
)
WEBHOOK_LATENCY = Histogram(
    "broker_webhook_delivery_seconds",
    "Seconds one webhook delivery attempt took, from connect to the receiver's answer",
    buckets=ACTIVITY_BUCKETS,
)


# Recording ----------------------------------------------------------------------------------------


def _never_raise(fn: Callable[P, None]) -> Callable[P, None]:
    @functools.wraps(fn)
    def safe(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            logger.warning("recording metric %s failed", fn.__name__, exc_info=True)

    return safe


@_never_raise
def record_accepted(request_type: str) -> None:
    """A request was accepted (committed with its outbox row)."""
    REQUESTS_ACCEPTED.labels(request_type=request_type).inc()


@_never_raise
def record_finished(
    request_type: str,
    status: RequestStatus | str,
    submitted_at: dt.datetime,
    finished_at: dt.datetime | None = None,
) -> None:
    """A request reached a terminal status: count Completed/Faulted, observe its latency."""
    status = RequestStatus(status)
    if status is RequestStatus.COMPLETED:
        REQUESTS_COMPLETED.labels(request_type=request_type).inc()
    elif status is RequestStatus.FAULTED:
        REQUESTS_FAULTED.labels(request_type=request_type).inc()
    if not status.terminal:
        return
    latency = ((finished_at or utcnow()) - submitted_at).total_seconds()
    REQUEST_LATENCY.labels(request_type=request_type).observe(max(latency, 0.0))


@_never_raise
def record_retry(request_type: str) -> None:
    """An activity failed transiently and a retry was scheduled."""
    RETRIES.labels(request_type=request_type).inc()


@_never_raise
def record_activity(activity_type: str, seconds: float) -> None:
    """One activity execution took ``seconds``."""
    ACTIVITY_DURATION.labels(activity_type=activity_type).observe(max(seconds, 0.0))


@_never_raise
def record_webhook(outcome: str, seconds: float) -> None:
    """A webhook delivery attempt ended with ``outcome`` after ``seconds`` (after its commit)."""
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
    WEBHOOK_LATENCY.observe(max(seconds, 0.0))


@_never_raise
def record_maintenance(job: str) -> None:
    """A worker started the beat job ``job`` (beat is alive and its messages arrive)."""
    MAINTENANCE_LAST_RUN.labels(job=job).set(time.time())


@_never_raise
def record_worker_heartbeat() -> None:
    """The worker's event loop beat."""
    WORKER_HEARTBEAT.set(time.time())


class JournalEntry(Protocol):
    """What ``record_journal`` reads of an engine journal entry (``broker.engine.run.results``)."""

    @property
    def activity_instance_id(self) -> str: ...
    @property
    def activity_type(self) -> str: ...
    @property
    def event_name(self) -> str: ...
    @property
    def timestamp(self) -> dt.datetime: ...


#: journal events that end an execution the engine started in the same step
_CLOSING_EVENTS = frozenset({"Completed", "Faulted"})


@_never_raise
def record_journal(entries: Iterable[JournalEntry]) -> None:
    """Observe the activity durations of one engine step from its journal's own timestamps.

    An activity started and completed (or faulted) within the step counts once, from ``Started``
    to its end, composite activities including their children. One that suspends (a bookmark) or
    waits for a retry is not observed when it ends in a later step: that span would be waiting
    time, not run time. Reading the journal after the step keeps the engine's loop untouched.
    """
    started: dict[str, dt.datetime] = {}
    children: dict[str, Any] = {}
    for entry in entries:
        event = entry.event_name
        if event == "Started":
            started[entry.activity_instance_id] = entry.timestamp
        elif event in _CLOSING_EVENTS:
            began = started.pop(entry.activity_instance_id, None)
            if began is None:
                continue
            kind = entry.activity_type
            child = children.get(kind)
            if child is None:
                child = children[kind] = ACTIVITY_DURATION.labels(activity_type=kind)
            child.observe(max((entry.timestamp - began).total_seconds(), 0.0))


@contextlib.contextmanager
def timed_activity(activity_type: str) -> Iterator[None]:
    """Observe the duration of the block as one execution of ``activity_type`` (also on error)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        record_activity(activity_type, time.perf_counter() - started)


# The backlog, read from SQL -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Backlog:
    """What is waiting: outbox rows by state, the bookmark queue, unreplayed dead letters."""

    outbox: dict[str, int]
    #: seconds the oldest pending outbox row has been due (0 when none is due)
    oldest_pending_age: float
    #: stimuli still waiting for delivery (``bookmark_queue_counts``)
    bookmark_queue_depth: int
    dead_letters: dict[str, int]
    #: stimuli already delivered, kept for deduplication until the purge removes them
    bookmark_queue_delivered: int = 0
    #: seconds the oldest published outbox row has waited for a worker to finish it
    oldest_dispatched_age: float = 0.0
    #: webhook endpoints the broker disabled after failing deliveries
    webhook_endpoints_disabled: int = 0

    @property
    def outbox_pending(self) -> int:
        return self.outbox.get(OutboxState.PENDING.value, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outbox": {"pending": self.outbox_pending, **self.outbox},
            "oldestPendingAgeSeconds": round(self.oldest_pending_age, 3),
            "oldestDispatchedAgeSeconds": round(self.oldest_dispatched_age, 3),
            "webhookEndpointsDisabled": self.webhook_endpoints_disabled,
            "bookmarkQueueDepth": self.bookmark_queue_depth,
            "bookmarkQueueDelivered": self.bookmark_queue_delivered,
            "deadLetters": dict(self.dead_letters),
        }


def read_backlog(session: Session, now: dt.datetime | None = None) -> Backlog:
    """Count the backlog in one read; ``now`` is injectable for tests."""
    now = now or utcnow()
    outbox = {state.value: 0 for state in OutboxState}
    for state, count in session.execute(
        select(OutboxRow.state, func.count()).group_by(OutboxRow.state)
    ):
        outbox[str(state)] = int(count)
    # A row scheduled for a later retry is not late, so the age counts from available_at.
    oldest = session.scalar(
        select(func.min(OutboxRow.available_at)).where(
            OutboxRow.state == OutboxState.PENDING.value, OutboxRow.available_at <= now
        )
    )
    dispatched = session.scalar(
        select(func.min(OutboxRow.dispatched_at)).where(
            OutboxRow.state == OutboxState.DISPATCHED.value
        )
    )
    disabled = session.scalar(
        select(func.count()).select_from(WebhookEndpoint).where(WebhookEndpoint.enabled.is_(False))
    )
    depth, delivered = bookmark_queue_counts(session)
    letters = {kind.value: 0 for kind in DeadLetterKind}
    for kind, count in session.execute(
        select(DeadLetter.kind, func.count())
        .where(DeadLetter.replayed_at.is_(None))
        .group_by(DeadLetter.kind)
    ):
        letters[str(kind)] = int(count)
    return Backlog(
        outbox,
        _age(oldest, now),
        depth,
        letters,
        delivered,
        oldest_dispatched_age=_age(dispatched, now),
        webhook_endpoints_disabled=int(disabled or 0),
    )


def _age(oldest: dt.datetime | str | None, now: dt.datetime) -> float:
    """Seconds since ``oldest`` (0 when None)."""
    if oldest is None:
        return 0.0
    # min() bypasses the column type on SQLite, so the value may come back naive (UTC).
    if isinstance(oldest, str):
        oldest = dt.datetime.fromisoformat(oldest)
    if oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=dt.UTC)
    return max((now - oldest).total_seconds(), 0.0)


def bookmark_queue_counts(session: Session) -> tuple[int, int]:
    """(waiting, delivered) items of the bookmark queue. The queue job marks an item it delivered
    with ``options.dispatched`` (its resume rows) and keeps it, for deduplication, until the purge
    removes it: such an item is no backlog, so it is counted apart from those still waiting."""
    # as_string: SQLite renders a plain JSON_EXTRACT (NULL when the key is absent)
    delivered = BookmarkQueueItem.options["dispatched"].as_string().is_not(None)
    total, done = session.execute(
        select(func.count(), func.count(case((delivered, 1)))).select_from(BookmarkQueueItem)
    ).one()
    return int(total) - int(done), int(done)


class BacklogCollector(Collector):
    """A prometheus collector that reads the backlog from the database at every scrape."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory

    def describe(self) -> list[Metric]:
        # Nothing up front: registering must not query the database.
        return []

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "broker_backlog_database_up", "1 when the backlog gauges could read the database"
        )
        try:
            with self.session_factory() as session:
                backlog = read_backlog(session)
        except Exception as exc:
            logger.warning("metrics: the backlog could not be read: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily(
            "broker_outbox_pending", "Outbox rows not yet published", value=backlog.outbox_pending
        )
        yield GaugeMetricFamily(
            "broker_outbox_oldest_pending_age_seconds",
            "Seconds the oldest due outbox row has waited to be published",
            value=backlog.oldest_pending_age,
        )
        yield GaugeMetricFamily(
            "broker_outbox_oldest_dispatched_age_seconds",
            "Seconds the oldest published outbox row has waited for a worker to finish it",
            value=backlog.oldest_dispatched_age,
        )
        yield GaugeMetricFamily(
            "broker_webhook_endpoints_disabled",
            "Webhook endpoints disabled after failing deliveries",
            value=backlog.webhook_endpoints_disabled,
        )
        yield GaugeMetricFamily(
            "broker_bookmark_queue_depth",
            "Stimuli in the bookmark queue still waiting for delivery",
            value=backlog.bookmark_queue_depth,
        )
        yield GaugeMetricFamily(
            "broker_bookmark_queue_delivered",
            "Stimuli already delivered, kept in the bookmark queue for deduplication",
            value=backlog.bookmark_queue_delivered,
        )
        letters = GaugeMetricFamily(
            "broker_dead_letters", "Dead letters not yet replayed, by kind", labels=["kind"]
        )
        for kind, count in sorted(backlog.dead_letters.items()):
            letters.add_metric([kind], count)
        yield letters


class _Forward(Collector):
    """Exposes another registry's metrics inside a fresh one (the process-local ones)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()


def multiprocess_enabled() -> bool:
    """Whether prometheus-client writes values to files (it read PROMETHEUS_MULTIPROC_DIR)."""
    return values.ValueClass is not values.MutexValue


def parse_bind(bind: str, setting: str) -> tuple[str, int]:
    """``host:port`` of a metrics listener; ``ConfigError`` naming ``setting`` when malformed."""
    from broker.errors import ConfigError

    host, sep, port = bind.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{setting} must be host:port, got {bind!r}", field=setting)
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - the operator's choice


def render_metrics(
    session_factory: sessionmaker[Session] | None,
    *,
    multiprocess_dir: str | None = None,
) -> tuple[bytes, str]:
    """The text exposition for ``/metrics``: every process's counters plus the backlog gauges.

    Multiprocess mode (``multiprocess_dir`` given, or prometheus-client's own switch) sums the
    files of all processes; otherwise this process's default registry is rendered.
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir is not None or multiprocess_enabled():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=multiprocess_dir)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Forward(REGISTRY))
    if session_factory is not None:
        registry.register(BacklogCollector(session_factory))
    return generate_latest(registry), CONTENT_TYPE_LATEST
