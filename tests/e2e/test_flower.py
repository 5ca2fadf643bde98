"""Flower against a real worker: it lists the worker and shows ``broker.run_request`` by ids only.

A ``celery -A tasks worker -E`` and ``celery -A tasks flower`` run as subprocesses on the embedded
default (SQLite, the filesystem transport under a temporary var folder), exactly as ``make run``
and ``make flower`` start them. The filesystem transport has fanout, so Flower's broadcast
(``/api/workers``) and the worker's task events (``/api/tasks``) both reach it, with no service
to depend on. Both processes run in their own sessions and are stopped by their group ids.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.settings import Settings
from broker.store.db import dispose_engines
from broker.wiring.runtime import make_publisher
from tests.support.runtime import prepare, runtime_env, submit_request
from tests.support.services import free_port
from tests.support.stack import roles
from tests.support.stack.roster import Stack
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = pytest.mark.slow

WORKER = "flower-w1@127.0.0.1"
SECRET = "payload-never-in-task-args"
WAIT = 60.0  # seconds: worker boot, Flower boot, one broadcast round and one task


def api(port: int, path: str) -> Any:
    """GET Flower's API; None while Flower is not up yet or answers an error."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Settings, Stack]]:
    folder = tmp_path / "workflows"
    write_workflow(
        folder,
        workflow("flower-check", [set_output("out", "result", "ok")], request_type="FlowerCheck"),
    )
    database_url = f"sqlite:///{tmp_path / 'broker.db'}"
    broker_env = runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    roles_stack = Stack(tmp_path, broker_env)
    try:
        yield Settings.from_env(broker_env), roles_stack
    finally:
        roles_stack.close(15, group=True)
        dispose_engines()


def test_flower_shows_the_worker_and_a_run_request_task_by_ids_only(
    stack: tuple[Settings, Stack],
) -> None:
    settings, processes = stack
    factory, registry = prepare(settings)
    port = free_port()
    # Given a worker that sends task events, and Flower on a free loopback port
    name, host = WORKER.split("@")
    worker_argv = roles.worker(name, concurrency=1, events=True, quiet=False, host=host)
    worker = processes.start("worker", [*worker_argv, "--without-mingle"])
    # Flower 2 refuses its API without authentication unless told so (loopback, test only).
    # Its log in the broker's default format, JSON, whatever the tests' environment says.
    flower_env = {
        **processes.env,
        "FLOWER_UNAUTHENTICATED_API": "true",
        "BROKER_LOG_FORMAT": "json",
    }
    flower = processes.start("flower", roles.flower(port), env=flower_env)
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
        raise AssertionError(f"{exc}\n{processes.tails()}") from exc
    finally:
        flower.stop(15, group=True)
        worker.stop(15, group=True)
    assert task["name"] == "broker.run_request"
    assert task["worker"] == WORKER
    # And its arguments carry ids only: the request id and its outbox row, never the payload
    assert SECRET not in f"{task['args']} {task['kwargs']}"
    assert task["uuid"] in task["kwargs"]
    # And Flower logs in the broker's JSON format, without kombu's "No hostname was supplied"
    # (the filesystem transport's URL names its host)
    flower_log = flower.log_text()
    assert "No hostname was supplied" not in flower_log
    records = [json.loads(line) for line in flower_log.splitlines() if line.startswith("{")]
    assert any(str(r["logger"]).startswith("flower") for r in records), flower.tail(40)
