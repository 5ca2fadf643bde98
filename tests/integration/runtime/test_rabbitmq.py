"""RabbitMQ as the transport: a request runs through a real worker over AMQP."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.settings import Settings
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.stack.roster import running_worker
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = [pytest.mark.slow, pytest.mark.rabbitmq]


def test_a_request_completes_over_rabbitmq(tmp_path: Path, amqp_url: str) -> None:
    # Given a worker on RabbitMQ, with a request type whose queue is unique to this run
    var, flows = tmp_path / "var", tmp_path / "workflows"
    var.mkdir()
    flows.mkdir()
    queue = f"broker.test-{uuid.uuid4().hex[:8]}"
    write_workflow(
        flows,
        workflow(
            "amqp-probe", [set_output("out", "result", 1)], request_type="AmqpProbe", queue=queue
        ),
    )
    env = runtime_env(
        var, database_url=f"sqlite:///{var / 'broker.db'}", workflows=flows, queue_url=amqp_url
    )
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    from broker.wiring.runtime import make_publisher

    publisher = make_publisher(settings, factory)
    with running_worker(env, tmp_path / "worker.log"):
        # When a request is submitted and published on the fast path
        request_id = submit_request(factory, registry, "AmqpProbe", publisher=publisher)
        # Then the worker runs it to completion
        wait_until(lambda: request_status(factory, request_id) == "Completed", timeout=60)
