"""Prometheus metrics the listeners record; ``/metrics`` renders them."""

from __future__ import annotations

from prometheus_client import Counter
from sqlalchemy.orm import Session, sessionmaker

from broker.telemetry import metrics as shared

REJECTED = Counter(
    "broker_requests_rejected", "Submissions refused by authorization checks", ["reason"]
)
CALLBACKS = Counter("broker_callbacks", "Remote-executor callbacks, by outcome", ["outcome"])
RESPONSES = Counter(
    "broker_http_responses", "HTTP responses, by listener and status class", ["listener", "status"]
)


def record_accepted(request_type: str) -> None:
    shared.record_accepted(request_type)


def exposition(session_factory: sessionmaker[Session]) -> tuple[bytes, str]:
    """The text exposition: every process's counters plus the backlog gauges read from SQL."""
    return shared.render_metrics(session_factory)
