"""Metrics as the deploy files lay them out: each role scraped on its own port sees its counters.

The roles, their commands and their metrics settings are read from deploy/docker-compose.yml
(merge keys resolved): each container has its own ``PROMETHEUS_MULTIPROC_DIR`` (here: a folder per
role), the ingress's gunicorn master and each worker serve ``/metrics`` on the bind the file gives
(here: the same setting on a free loopback port), and the internal listener serves the backlog
gauges. One request of each outcome runs through them; then every counter has moved, on the
port of the role that counts it, and no role reports another's counters (no double counting).
"""

from __future__ import annotations

import json
import socket
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Server
from tests.e2e.test_metrics_live import TYPES, metrics_stack
from tests.support.services import PROJECT_ROOT, free_port
from tests.support.sink import Sink
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow

ROLES = ("ingress", "internal", "worker", "beat")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def compose_roles() -> dict[str, dict[str, Any]]:
    with (PROJECT_ROOT / "deploy" / "docker-compose.yml").open(encoding="utf-8") as fh:
        services = yaml.safe_load(fh)["services"]
    return {role: services[role] for role in ROLES}


def local_argv(command: list[str], var_dir: Path) -> list[str]:
    """The service's command, run by this interpreter, with the image's var folder mapped."""
    words = [w.replace("/var/lib/broker", str(var_dir)) for w in command]
    return [sys.executable, "-m", words[0], *words[1:]]


def local_env(role: str, service: dict[str, Any], root: Path) -> dict[str, str]:
    """What the compose file sets for the role's metrics, with paths and ports made local."""
    env: dict[str, str] = {}
    for name, value in service["environment"].items():
        if name == "PROMETHEUS_MULTIPROC_DIR":
            folder = root / role / "prometheus"  # one per container
            folder.mkdir(parents=True)
            env[name] = str(folder)
        elif name.endswith("_METRICS_BIND"):
            assert str(value).rsplit(":", 1)[1] == "9808", (role, value)
            env[name] = f"127.0.0.1:{free_port()}"
        elif name == "REMAP_SIGTERM":
            env[name] = str(value)
    return env


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    root = tmp_path_factory.mktemp("layout")
    var_dir = root / "var"
    with Sink() as sink:
        pki, processes = metrics_stack(root, sink, BROKER_DRAIN_TIMEOUT="5")
        ports = processes.ports
        base = {k: v for k, v in processes.env.items() if not k.startswith("REMAP_")}
        urls: dict[str, str] = {"internal": f"http://127.0.0.1:{ports.internal}/metrics"}
        try:
            for role, service in compose_roles().items():
                env = {**base, **local_env(role, service, root)}
                for name, bind in env.items():
                    if name.endswith("_METRICS_BIND") and name not in base:
                        urls[role] = f"http://{bind}/metrics"
                argv = local_argv(service["command"], var_dir)
                if role == "worker":
                    argv += ["--concurrency", "2"]
                processes.start(role, argv, env=env)
            assert set(urls) == {"ingress", "internal", "worker"}, urls
            for port in (ports.public, ports.internal):
                wait_until(lambda port=port: listening(port), timeout=60, what=f"port {port}")
            for role in ("ingress", "worker"):
                port = int(urls[role].rsplit(":", 1)[1].split("/")[0])
                wait_until(lambda port=port: listening(port), timeout=60, what=f"{role} metrics")
            yield Server(pki, processes), urls
        finally:
            processes.close(20)


def test_each_role_scraped_where_the_deploy_files_put_it_sees_its_counters_move(
    stack: tuple[Server, dict[str, str]],
) -> None:
    server, urls = stack
    before = {role: scrape(url) for role, url in urls.items()}
    # Given one request of each outcome and a stimulus nobody waits for
    submitted: dict[str, str] = {}
    for kind in TYPES:
        response = server.call("ClientA", "POST", "/requests", {"requestType": kind, "keys": {}})
        assert response.status == 202, response.body
        submitted[kind] = response.body["correlationId"]
    assert server.call("ClientA", "POST", "/events/Nobody", {"correlationId": "x"}).status == 202
    expected = {
        "MetricsOk": "Completed",
        "MetricsFault": "Faulted",
        "MetricsFlaky": "Completed",
        "MetricsBroken": "Faulted",
    }

    def statuses() -> dict[str, str]:
        return {
            kind: str(server.call("ClientA", "GET", f"/requests/{rid}").body["status"])
            for kind, rid in submitted.items()
        }

    wait_until(lambda: statuses() == expected, timeout=90, interval=0.3, what="every outcome")
    # When each role is scraped on its own port (a worker's pool reports after its task ends)
    wait_until(
        lambda: total(scrape(urls["worker"]), "broker_request_latency_seconds_count") >= 4,
        timeout=20,
        what="the worker's counters",
    )
    after = {role: scrape(url) for role, url in urls.items()}
    ingress, worker, internal = after["ingress"], after["worker"], after["internal"]
    # Then the ingress counted each acceptance
    for kind in TYPES:
        assert value(ingress, "broker_requests_accepted_total", request_type=kind) == 1, kind
        assert value(before["ingress"], "broker_requests_accepted_total", request_type=kind) == 0
    # And the worker counted outcomes, retries, latencies and activity durations
    assert value(worker, "broker_requests_completed_total", request_type="MetricsOk") == 1
    assert value(worker, "broker_requests_completed_total", request_type="MetricsFlaky") == 1
    assert value(worker, "broker_requests_faulted_total", request_type="MetricsFault") == 1
    assert value(worker, "broker_requests_faulted_total", request_type="MetricsBroken") == 1
    assert value(worker, "broker_retries_total", request_type="MetricsFlaky") == 1
    assert value(worker, "broker_retries_total", request_type="MetricsBroken") == 1
    for kind in TYPES:
        assert value(worker, "broker_request_latency_seconds_count", request_type=kind) == 1
    assert total(worker, "broker_activity_duration_seconds_count") > total(
        before["worker"], "broker_activity_duration_seconds_count"
    )
    # And the internal listener read the backlog from the database
    assert value(internal, "broker_backlog_database_up") == 1
    # (every faulted request has its dead letter: the Fault activity's and the exhausted retries')
    assert value(internal, "broker_dead_letters", kind="request") == 2
    assert value(internal, "broker_bookmark_queue_depth") >= 1
    assert ("broker_outbox_oldest_pending_age_seconds", ()) in internal
    # And no role reports another's counters: summing the scrapes counts each event once
    assert total(worker, "broker_requests_accepted_total") == 0
    assert total(ingress, "broker_requests_completed_total") == 0
    assert total(internal, "broker_requests_accepted_total") == 0
    assert total(internal, "broker_requests_completed_total") == 0


def test_each_role_answers_the_probes_where_the_deploy_files_probe_it(
    stack: tuple[Server, dict[str, str]],
) -> None:
    _server, urls = stack
    # Given each role's metrics URL (the ingress's and the worker's are their probe ports too)
    for role, url in urls.items():
        base = url.rsplit("/metrics", 1)[0]
        # Then liveness and readiness answer over plain HTTP, readiness naming both checks
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            assert response.status == 200, role
        with urllib.request.urlopen(f"{base}/readyz", timeout=10) as response:
            body = json.loads(response.read())
        assert body == {"status": "ok", "checks": {"database": "ok", "transport": "ok"}}, role
    # And the worker's beat and its last beat job are exported for the alert rules
    worker = scrape(urls["worker"])
    assert value(worker, "broker_worker_heartbeat_timestamp_seconds") > 0
    assert value(worker, "broker_maintenance_last_run_timestamp_seconds", job="relay_outbox") > 0
