"""Flower against a real worker: it lists the worker and shows ``broker.run_request`` by ids only.

A ``celery -A tasks worker -E`` and ``celery -A tasks flower`` run as subprocesses on the embedded
default (SQLite, the filesystem transport under a temporary var folder), exactly as ``make run``
and ``make flower`` start them. The filesystem transport has fanout, so Flower's broadcast
(``/api/workers``) and the worker's task events (``/api/tasks``) both reach it, with no service
to depend on. Both processes run in their own sessions and are stopped by their group ids.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from broker.settings import Settings
from broker.store.db import dispose_engines
from broker.wiring.runtime import make_publisher
from tests.support.processes import process_env
from tests.support.runtime import prepare, runtime_env, submit_request
from tests.support.services import PROJECT_ROOT, free_port
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = pytest.mark.slow

WORKER = "flower-w1@127.0.0.1"
SECRET = "payload-never-in-task-args"
WAIT = 60.0  # seconds: worker boot, Flower boot, one broadcast round and one task


def start(argv: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", *argv],
            cwd=PROJECT_ROOT,
            env=dict(env),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL what is left after a bound."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def api(port: int, path: str) -> Any:
    """GET Flower's API; None while Flower is not up yet or answers an error."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Settings, dict[str, str], Path]]:
    folder = tmp_path / "workflows"
    write_workflow(
        folder,
        workflow("flower-check", [set_output("out", "result", "ok")], request_type="FlowerCheck"),
    )
    database_url = f"sqlite:///{tmp_path / 'broker.db'}"
    broker_env = runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    yield Settings.from_env(broker_env), process_env(broker_env), tmp_path
    dispose_engines()


def test_flower_shows_the_worker_and_a_run_request_task_by_ids_only(
    stack: tuple[Settings, dict[str, str], Path],
) -> None:
    settings, env, root = stack
    factory, registry = prepare(settings)
    port = free_port()
    # Given a worker that sends task events, and Flower on a free loopback port
    worker = start(
        ["worker", "-E", "--concurrency", "1", "--hostname", WORKER, "--without-mingle"],
        env,
        root / "worker.log",
    )
    # Flower 2 refuses its API without authentication unless told so (loopback, test only).
    # Its log in the broker's default format, JSON, whatever the tests' environment says.
    flower = start(
        ["flower", "--address=127.0.0.1", f"--port={port}"],
        {**env, "FLOWER_UNAUTHENTICATED_API": "true", "BROKER_LOG_FORMAT": "json"},
        root / "flower.log",
    )
    try:
        # Flower may list the worker (from its events) before the worker's answer to
        # ``inspect registered`` arrives: wait for the entry that carries it.
        def registered() -> list[str] | None:
            entry = (api(port, "/api/workers?refresh=1") or {}).get(WORKER) or {}
            names = entry.get("registered")
            return list(names) if names else None

        names = wait_until(
            registered, timeout=WAIT, interval=0.5, what=f"Flower to list the tasks of {WORKER}"
        )
        assert "broker.run_request" in names
        # Flower's event receiver has the worker's heartbeats, so no task event can be missed
        wait_until(
            lambda: (api(port, "/api/workers?status=true") or {}).get(WORKER),
            timeout=WAIT,
            interval=0.5,
            what=f"Flower to receive the events of {WORKER}",
        )
        # When a request is submitted and published on the fast path
        request_id = submit_request(
            factory,
            registry,
            "FlowerCheck",
            payload={"secret": SECRET},
            publisher=make_publisher(settings, factory),
        )

        def finished_task() -> dict[str, Any] | None:
            for task in (api(port, "/api/tasks?taskname=broker.run_request") or {}).values():
                if request_id in str(task.get("kwargs")) and task.get("state") == "SUCCESS":
                    return dict(task)
            return None

        # Then Flower shows the task that ran it, succeeded, on that worker
        task = wait_until(finished_task, timeout=WAIT, interval=0.5, what="the task in Flower")
    except AssertionError as exc:
        logs = f"--- worker\n{tail(root / 'worker.log')}\n--- flower\n{tail(root / 'flower.log')}"
        raise AssertionError(f"{exc}\n{logs}") from exc
    finally:
        stop(flower)
        stop(worker)
    assert task["name"] == "broker.run_request"
    assert task["worker"] == WORKER
    # And its arguments carry ids only: the request id and its outbox row, never the payload
    assert SECRET not in f"{task['args']} {task['kwargs']}"
    assert task["uuid"] in task["kwargs"]
    # And Flower logs in the broker's JSON format, without kombu's "No hostname was supplied"
    # (the filesystem transport's URL names its host)
    flower_log = (root / "flower.log").read_text(errors="replace")
    assert "No hostname was supplied" not in flower_log
    records = [json.loads(line) for line in flower_log.splitlines() if line.startswith("{")]
    assert any(str(r["logger"]).startswith("flower") for r in records), tail(root / "flower.log")


def tail(log: Path, lines: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""
