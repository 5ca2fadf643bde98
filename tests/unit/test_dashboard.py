"""The Grafana dashboard in deploy/ plots only series the broker exports, with labels they carry.

The exported series are read from a real exposition: one of each counter and histogram recorded,
the backlog gauges read from a migrated database, rendered by
``broker.telemetry.metrics.render_metrics``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.store import db
from broker.store.models import RequestStatus, utcnow
from broker.telemetry import metrics
from tests.support.services import PROJECT_ROOT

DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "elsa-celery-broker.json"
SERIES = re.compile(r"\b(broker_[a-z0-9_]+)\b")
GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")


def exported(tmp_path: Path) -> dict[str, set[str]]:
    """Every series name the broker exposes, with the label names it carries."""
    metrics.record_accepted("Probe")
    metrics.record_finished("Probe", RequestStatus.COMPLETED, utcnow())
    metrics.record_finished("Probe", RequestStatus.FAULTED, utcnow())
    metrics.record_retry("Probe")
    metrics.record_activity("Elsa.WriteLine", 0.01)
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    db.upgrade(url)
    try:
        factory = db.make_session_factory(db.make_engine(url))
        body, _ = metrics.render_metrics(factory)
    finally:
        db.dispose_engines()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def targets() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t for panel in dashboard["panels"] for t in panel["targets"]]


def test_every_series_the_dashboard_plots_is_exported_with_its_labels(tmp_path: Path) -> None:
    # Given the series the code exports
    series = exported(tmp_path)
    # Then every name in every query is one of them
    for target in targets():
        names = SERIES.findall(target["expr"])
        assert names, target["expr"]
        for name in names:
            assert name in series, f"{name} in {target['expr']!r} is not exported"
        # And every label it groups by is one those series carry (le: histogram buckets)
        carried = set().union(*(series[n] for n in names))
        for group in GROUPING.findall(target["expr"]):
            for label in filter(None, (w.strip() for w in group.split(","))):
                assert label in carried, f"{label!r} in {target['expr']!r}"


@pytest.mark.parametrize(
    "needed",
    [
        "broker_requests_accepted_total",
        "broker_requests_completed_total",
        "broker_requests_faulted_total",
        "broker_request_latency_seconds_bucket",
        "broker_outbox_pending",
        "broker_bookmark_queue_depth",
        "broker_outbox_oldest_pending_age_seconds",
        "broker_dead_letters",
        "broker_retries_total",
    ],
)
def test_the_dashboard_shows_throughput_latency_queues_age_dead_letters_and_retries(
    needed: str,
) -> None:
    plotted = {name for t in targets() for name in SERIES.findall(t["expr"])}
    assert needed in plotted


def test_latency_is_shown_as_percentiles() -> None:
    quantiles = {
        m.group(1)
        for t in targets()
        for m in re.finditer(r"histogram_quantile\(([0-9.]+),.*broker_request_latency", t["expr"])
    }
    assert {"0.5", "0.95", "0.99"} <= quantiles
