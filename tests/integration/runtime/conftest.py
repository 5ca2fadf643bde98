"""One running stack per backend for the runtime's integration tests.

``stack`` is module-scoped and parametrized: the embedded default (SQLite, the filesystem
transport, file locks) and production (PostgreSQL, Redis transport, Redis locks). Each starts one
real ``celery -A tasks worker --beat`` subprocess, a local HTTP sink and the workflows below, and
stops the worker by its process-group id at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings
from broker.wiring.runtime import make_publisher
from tests.support.runtime import prepare, runtime_env
from tests.support.services import fresh_redis_url, postgres_database
from tests.support.sink import Sink
from tests.support.stack.process import Process
from tests.support.stack.roster import worker_process
from tests.support.workflows import (
    activity,
    approval,
    delayed,
    literal,
    obj,
    parent,
    post_to,
    set_output,
    sink_workflow,
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
    worker: Process
    publisher: Any
    env: dict[str, str]


def write_workflows(folder: Path, sink: Sink) -> None:
    """The workflows the tests submit, pointing at ``sink``."""
    docs = [
        sink_workflow("sink-call", "SinkCall", sink.url("/effect")),
        sink_workflow("flaky-call", "FlakyCall", sink.url("/flaky"), retry=FAST_RETRY),
        sink_workflow("broken-call", "BrokenCall", sink.url("/broken"), retry=FAST_RETRY),
        approval(),
        parent("child"),
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
        delayed("00:00:01"),
        workflow(
            "refuse",
            [
                activity("fail", "Elsa.Fault", message=literal("rejected by the ledger")),
                set_output("out", "never", True),
            ],
            request_type="Refuse",
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


def backend_urls(backend: str, var_dir: Path) -> Iterator[dict[str, str]]:
    if backend == "embedded":
        yield {"database_url": f"sqlite:///{var_dir / 'broker.db'}"}
        return
    redis_url = fresh_redis_url(offset=1)
    with postgres_database("broker_rt") as database_url:
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
            worker = worker_process(env, root / "worker.log").start()
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


@pytest.fixture
def sink() -> Iterator[Sink]:
    """A local HTTP receiver that records the calls the workflows make."""
    with Sink() as running:
        yield running
