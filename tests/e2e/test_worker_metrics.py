"""A worker on its own host serves its own /metrics when BROKER_WORKER_METRICS_BIND is set."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from broker.settings import Settings
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.services import free_port
from tests.support.stack.roster import running_worker
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = pytest.mark.slow


def _scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def test_a_worker_serves_the_counters_its_pool_recorded(tmp_path: Path) -> None:
    # Given a worker with its own metrics listener and a multiprocess metrics folder
    var, flows, metrics_dir = tmp_path / "var", tmp_path / "workflows", tmp_path / "metrics"
    for folder in (var, flows, metrics_dir):
        folder.mkdir()
    write_workflow(
        flows,
        workflow("metrics-probe", [set_output("out", "result", 1)], request_type="MetricsProbe"),
    )
    bind = f"127.0.0.1:{free_port()}"
    env = runtime_env(
        var,
        database_url=f"sqlite:///{var / 'broker.db'}",
        workflows=flows,
        BROKER_WORKER_METRICS_BIND=bind,
    )
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    factory, registry = prepare(Settings.from_env(env))
    with running_worker(env, tmp_path / "worker.log"):
        # When a request runs on it
        request_id = submit_request(factory, registry, "MetricsProbe")
        wait_until(lambda: request_status(factory, request_id) == "Completed", timeout=60)
        # Then the worker's own listener shows the completion its pool process counted
        deadline, text = time.monotonic() + 20, ""
        while "broker_requests_completed_total" not in text and time.monotonic() < deadline:
            text = _scrape(f"http://{bind}/metrics")
            time.sleep(0.2)
    assert 'broker_requests_completed_total{request_type="MetricsProbe"} 1.0' in text
