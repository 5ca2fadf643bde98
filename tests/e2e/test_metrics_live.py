"""/metrics on a live stack: every series is there, and it moves when requests flow.

The public listener (gunicorn, 2 workers, mutual TLS), the internal listener and a
``celery -A tasks worker --beat`` (prefork, 2 children) run as subprocesses sharing one
``PROMETHEUS_MULTIPROC_DIR``, as ``broker run`` starts them. Acceptances are counted in the
public workers, outcomes, retries and activity durations in the pool children, and the internal
listener's ``/metrics`` sums them all and reads the backlog gauges from the database.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.store import db
from tests.e2e.conftest import Server
from tests.support.ingress import Pki, make_pki, write_config
from tests.support.runtime import runtime_env
from tests.support.sink import Sink
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.process import Process
from tests.support.stack.roster import Stack
from tests.support.waits import wait_until
from tests.support.workflows import activity, literal, post_to, set_output, workflow, write_workflow

pytestmark = pytest.mark.slow

QUICK_RETRY = {"maxAttempts": 2, "initialDelay": 0.1, "maxDelay": 0.3}
TYPES = ("MetricsOk", "MetricsFault", "MetricsFlaky", "MetricsBroken")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def write_workflows(folder: Path, sink: Sink) -> None:
    """One request type per outcome: completes, faults, retries once, exhausts its retries."""
    for document in (
        workflow("metrics-ok", [set_output("out", "result", "ok")], request_type="MetricsOk"),
        workflow(
            "metrics-fault",
            [activity("boom", "Elsa.Fault", message=literal("refused by the ledger"))],
            request_type="MetricsFault",
        ),
        workflow(
            "metrics-flaky",
            [post_to("call", sink.url("/flaky")), set_output("out", "result", "ok")],
            request_type="MetricsFlaky",
            retry=QUICK_RETRY,
        ),
        workflow(
            "metrics-broken",
            [post_to("call", sink.url("/broken")), set_output("out", "result", "ok")],
            request_type="MetricsBroken",
            retry=QUICK_RETRY,
        ),
    ):
        write_workflow(folder, document)


def metrics_stack(root: Path, sink: Sink, **extra: str) -> tuple[Pki, Stack]:
    """The stack of the metrics tests under ``root``, nothing started: ClientA allowed the
    request types of ``write_workflows`` (whose calls go to ``sink``), a migrated SQLite
    database, the listeners on free ports; ``extra`` settings on top."""
    pki = make_pki(root / "certs")
    config = write_config(root / "config", pki)
    rules = [
        {"clientId": "ClientA", "requestType": kind, "requiredKeys": [],
         "allowAdditionalKeys": True}
        for kind in TYPES
    ]  # fmt: skip
    (root / "config" / "requestTypes.json").write_text(json.dumps({"requestTypes": rules}))
    ports = Ports()
    sink.drop["/flaky"] = 1
    sink.drop["/broken"] = -1
    write_workflows(root / "workflows", sink)
    broker_env = runtime_env(
        root / "var",
        database_url=f"sqlite:///{root / 'broker.db'}",
        workflows=root / "workflows",
        BROKER_CLIENTS_FILE=config["BROKER_CLIENTS_FILE"],
        BROKER_REQUEST_TYPES_FILE=str(root / "config" / "requestTypes.json"),
        BROKER_TLS_CERT=str(pki.folder / "server.pem"),
        BROKER_TLS_KEY=str(pki.folder / "server.key"),
        BROKER_TLS_CLIENT_CA=str(pki.ca),
        BROKER_PUBLIC_BIND=f"127.0.0.1:{ports.public}",
        BROKER_INTERNAL_BIND=f"127.0.0.1:{ports.internal}",
        **extra,
    )
    (root / "var").mkdir()
    db.upgrade(broker_env["BROKER_DATABASE_URL"])
    db.dispose_engines()
    return pki, Stack(root, broker_env, ports=ports)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Process]]:
    root = tmp_path_factory.mktemp("metrics")
    metrics_dir = root / "prometheus"
    metrics_dir.mkdir()
    with Sink() as sink:
        pki, stack = metrics_stack(root, sink, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
        try:
            stack.start("public", roles.listener("public", workers=2, threads=4))
            stack.start("internal", roles.listener("internal", workers=1, threads=4))
            worker = stack.start("worker", roles.worker(beat=True, concurrency=2))
            stack.wait_listening()
            yield Server(pki, stack), worker
        finally:
            stack.close()


def scrape(server: Server) -> Samples:
    response = server.internal("GET", "/metrics")
    assert response.status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.body)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def activity_count(samples: Samples) -> float:
    return sum(
        v for (name, _), v in samples.items() if name == "broker_activity_duration_seconds_count"
    )


def test_metrics_expose_every_series_and_move_when_requests_flow(
    live: tuple[Server, Process],
) -> None:
    server, worker = live
    before = scrape(server)
    # Given one request of each kind: completes, faults, retries once, runs out of retries
    submitted: dict[str, str] = {}
    for kind in TYPES:
        response = server.call("ClientA", "POST", "/requests", {"requestType": kind, "keys": {}})
        assert response.status == 202, response.body
        submitted[kind] = response.body["correlationId"]
    # And a stimulus that no workflow waits for (it stays in the bookmark queue)
    event = server.call("ClientA", "POST", "/events/NobodyWaits", {"correlationId": "nobody"})
    assert event.status == 202, event.body

    def status(kind: str) -> str:
        return str(server.call("ClientA", "GET", f"/requests/{submitted[kind]}").body["status"])

    expected = {
        "MetricsOk": "Completed",
        "MetricsFault": "Faulted",
        "MetricsFlaky": "Completed",
        "MetricsBroken": "Faulted",
    }
    try:
        wait_until(
            lambda: {kind: status(kind) for kind in TYPES} == expected,
            timeout=60,
            interval=0.3,
            what="every request to finish",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{worker.tail()}") from exc
    # When /metrics is scraped on the internal listener
    after = scrape(server)
    # Then acceptances (counted in the public workers) are summed per type
    for kind in TYPES:
        assert value(after, "broker_requests_accepted_total", request_type=kind) == 1, kind
        assert value(after, "broker_request_latency_seconds_count", request_type=kind) == 1, kind
        assert value(before, "broker_request_latency_seconds_count", request_type=kind) == 0
    # And outcomes and retries (counted in the worker's pool children) by type
    assert value(after, "broker_requests_completed_total", request_type="MetricsOk") == 1
    assert value(after, "broker_requests_completed_total", request_type="MetricsFlaky") == 1
    assert value(after, "broker_requests_faulted_total", request_type="MetricsFault") == 1
    assert value(after, "broker_requests_faulted_total", request_type="MetricsBroken") == 1
    assert value(after, "broker_retries_total", request_type="MetricsFlaky") == 1
    assert value(after, "broker_retries_total", request_type="MetricsBroken") == 1
    assert value(after, "broker_retries_total", request_type="MetricsOk") == 0
    # And activity durations by activity type
    assert value(after, "broker_activity_duration_seconds_count", activity_type="Elsa.SetOutput")
    assert activity_count(after) > activity_count(before)
    # And the backlog gauges read from the database: the faulted requests' dead letters, the
    # unmatched stimulus, and the outbox series
    assert value(after, "broker_dead_letters", kind="request") == (
        value(before, "broker_dead_letters", kind="request") + 2
    )
    for kind in ("outbox", "bookmark"):
        assert ("broker_dead_letters", (("kind", kind),)) in after
    assert value(after, "broker_bookmark_queue_depth") >= 1
    assert value(before, "broker_bookmark_queue_depth") == 0
    assert ("broker_outbox_pending", ()) in after
    assert ("broker_outbox_oldest_pending_age_seconds", ()) in after
    assert value(after, "broker_backlog_database_up") == 1
    # And every process wrote its own file into the shared folder
    assert len(os.listdir(server.env["PROMETHEUS_MULTIPROC_DIR"])) >= 3
