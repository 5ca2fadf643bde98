"""One running stack per backend for the runtime's integration tests.

``stack`` is module-scoped and parametrized: the embedded default (SQLite, the filesystem
transport, file locks) and production (PostgreSQL, Redis transport, Redis locks). Each starts one
real ``celery -A tasks worker --beat`` subprocess, a local HTTP sink and the workflows below, and
stops the worker by its process-group id at the end.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime.wiring import make_publisher
from broker.settings import Settings
from broker.store.db import dispose_engines
from tests.conftest import PG_ADMIN_URL, REDIS_URL, require_service
from tests.integration.runtime.harness import (
    Sink,
    Worker,
    activity,
    literal,
    obj,
    post_to,
    prepare,
    runtime_env,
    set_output,
    workflow,
    write_workflow,
)

FAST_RETRY = {"maxAttempts": 3, "initialDelay": 0.1, "maxDelay": 0.3}


@dataclasses.dataclass
class Stack:
    backend: str
    settings: Settings
    factory: sessionmaker[Session]
    registry: Any
    sink: Sink
    worker: Worker
    publisher: Any
    env: dict[str, str]


def write_workflows(folder: Path, sink: Sink) -> None:
    """The workflows the tests submit, pointing at ``sink``."""
    docs = [
        workflow(
            "sink-call",
            [post_to("call", sink.url("/effect")), set_output("out", "result", {"ok": True})],
            request_type="SinkCall",
        ),
        workflow(
            "flaky-call",
            [post_to("call", sink.url("/flaky")), set_output("out", "result", {"ok": True})],
            request_type="FlakyCall",
            retry=FAST_RETRY,
        ),
        workflow(
            "broken-call",
            [post_to("call", sink.url("/broken")), set_output("out", "result", {"ok": True})],
            request_type="BrokenCall",
            retry=FAST_RETRY,
        ),
        workflow(
            "approval",
            [
                activity("wait", "Elsa.Event", eventName=literal("approval")),
                set_output("out", "decision", "approved"),
            ],
            request_type="Approval",
        ),
        workflow(
            "parent",
            [
                activity(
                    "dispatch",
                    "Elsa.DispatchWorkflow",
                    workflowDefinitionId=literal("child"),
                    waitForCompletion=literal(True),
                    input=obj({"n": 1}),
                ),
                set_output("out", "parent", "done"),
            ],
            request_type="Parent",
        ),
        workflow("child", [post_to("call", sink.url("/child"))]),
        workflow(
            "bulk",
            [
                activity(
                    "fan-out",
                    "Elsa.BulkDispatchWorkflows",
                    workflowDefinitionId=literal("child"),
                    waitForCompletion=literal(True),
                    items=obj([{"n": 1}, {"n": 2}, {"n": 3}]),
                ),
                set_output("out", "bulk", "done"),
            ],
            request_type="Bulk",
        ),
        workflow(
            "self-signal",
            [
                activity("publish", "Elsa.PublishEvent", eventName=literal("ping")),
                activity("wait", "Elsa.Event", eventName=literal("ping")),
                set_output("out", "signal", "received"),
            ],
            request_type="SelfSignal",
        ),
        {
            **workflow(
                "task-call",
                [
                    activity(
                        "task",
                        "Elsa.RunTask",
                        taskName=literal("sample.double"),
                        payload=obj({"n": 21}),
                        result={"typeName": "Object", "memoryReference": {"id": "v1"}},
                    ),
                    activity(
                        "out",
                        "Elsa.SetOutput",
                        outputName=literal("result"),
                        outputValue={"expression": {"type": "Variable", "value": "TaskResult"}},
                    ),
                ],
                request_type="TaskCall",
            ),
            "variables": [{"id": "v1", "name": "TaskResult", "typeName": "Object"}],
        },
        workflow(
            "delayed",
            [
                activity("delay", "Elsa.Delay", timeSpan=literal("00:00:01")),
                set_output("out", "result", "later"),
            ],
            request_type="Delayed",
        ),
        workflow(
            "remote",
            [set_output("out", "result", "never run here")],
            request_type="Remote",
            executor="elsa",
        ),
    ]
    for doc in docs:
        write_workflow(folder, doc)


def _postgres_database() -> Iterator[str]:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    name = f"broker_rt_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
        dispose_engines()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def backend_urls(backend: str, var_dir: Path) -> Iterator[dict[str, str]]:
    if backend == "embedded":
        yield {"database_url": f"sqlite:///{var_dir / 'broker.db'}"}
        return
    require_service("Redis", "127.0.0.1", 6379)
    import redis

    db = 1 + (os.getpid() + 7) % 14
    redis_url = f"{REDIS_URL}/{db}"
    redis.Redis.from_url(redis_url).flushdb()
    for database_url in _postgres_database():
        yield {"database_url": database_url, "queue_url": redis_url, "lock_url": redis_url}


@pytest.fixture(scope="module", params=["embedded", "production"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    backend = str(request.param)
    root = tmp_path_factory.mktemp(f"stack-{backend}")
    var_dir = root / "var"
    var_dir.mkdir()
    with Sink() as sink:
        write_workflows(root / "workflows", sink)
        for urls in backend_urls(backend, var_dir):
            env = runtime_env(
                var_dir,
                workflows=root / "workflows",
                BROKER_TASK_MODULES="tasks,tests.integration.runtime.sample_tasks",
                BROKER_ELSA_DISPATCH_URL=sink.url("/elsa"),
                **urls,
            )
            settings = Settings.from_env(env)
            factory, registry = prepare(settings)
            worker = Worker(env, root / "worker.log").start()
            try:
                yield Stack(
                    backend,
                    settings,
                    factory,
                    registry,
                    sink,
                    worker,
                    make_publisher(settings, factory),
                    env,
                )
            finally:
                worker.stop()
                registry.stop()
