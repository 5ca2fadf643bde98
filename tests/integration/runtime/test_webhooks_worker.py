"""Webhooks end to end with a real ``celery -A tasks worker --beat`` subprocess and a real
receiver on loopback: the status change writes the delivery, beat's relay publishes each attempt
on the ``broker.webhooks`` queue, the worker sends it through the outbound guard.

Short horizons and backoffs come from the settings (``BROKER_WEBHOOK_*``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.outbound.http_client import OutboundHttp
from broker.runtime import webhooks
from broker.runtime.admin import dead_letters
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, WebhookDelivery, WebhookEndpoint
from broker.wiring.runtime import make_publisher
from tests.integration.runtime.conftest import backend_urls
from tests.support.receiver import EXAMPLE, Receiver, verify
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.services import free_port, port_open
from tests.support.stack.process import Process
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WEBHOOK_ENV = {
    "BROKER_WEBHOOK_RETRY_INITIAL_DELAY": "0.3",
    "BROKER_WEBHOOK_HORIZON": "4",
    "BROKER_WEBHOOK_TIMEOUT": "1",
}


@dataclass
class Stack:
    settings: Settings
    factory: sessionmaker[Session]
    registry: Any
    publisher: Any
    worker: Process


def quick_workflow(folder: Path) -> None:
    write_workflow(
        folder,
        workflow("quick", [set_output("out", "answer", 42)], request_type="Quick"),
    )


@pytest.fixture(scope="module", params=["embedded", "production"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """SQLite, the filesystem transport and file locks; or PostgreSQL and Redis."""
    root = tmp_path_factory.mktemp(f"webhooks-{request.param}")
    var_dir = root / "var"
    var_dir.mkdir()
    quick_workflow(root / "workflows")
    for urls in backend_urls(str(request.param), var_dir):
        env = runtime_env(var_dir, workflows=root / "workflows", **urls, **WEBHOOK_ENV)
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        worker = worker_process(env, root / "worker.log").start()
        try:
            yield Stack(settings, factory, registry, make_publisher(settings, factory), worker)
        finally:
            worker.stop()
            registry.stop()
            dispose_engines()


def register(stack: Stack, url: str, client_id: str) -> tuple[str, str]:
    with OutboundHttp(stack.settings) as guard, transaction(stack.factory) as session:
        endpoint, secret = webhooks.register(
            session, client_id=client_id, url=url, events=None, secret=None, vetter=guard
        )
        return endpoint.id, secret


def delivery_state(stack: Stack, request_id: str) -> str | None:
    with transaction(stack.factory, write=False) as session:
        return session.scalar(
            select(WebhookDelivery.state).where(WebhookDelivery.request_id == request_id)
        )


def test_a_completed_request_is_delivered_once_with_a_valid_signature(stack: Stack) -> None:
    with Receiver() as receiver:
        _, secret = register(stack, receiver.url, "Once")
        # When a request of that client completes on the worker
        request_id = submit_request(
            stack.factory, stack.registry, "Quick", client_id="Once", publisher=stack.publisher
        )
        wait_until(
            lambda: delivery_state(stack, request_id) == "delivered",
            timeout=60,
            what=f"the delivery ({stack.worker.tail()})",
        )
        # Then exactly one delivery arrived, and the documented helper verifies it
        got = receiver.received()
        seen = [(d.headers.get("webhook-id"), d.headers.get("webhook-timestamp")) for d in got]
        assert len(got) == 1, f"deliveries (id, timestamp): {seen}; {stack.worker.tail()}"
        [delivery] = got
    event = verify(secret, delivery.headers, delivery.body)
    assert event["type"] == "request.completed"
    assert event["data"]["correlationId"] == request_id
    assert event["data"]["result"] == {"answer": 42}
    assert request_status(stack.factory, request_id) == "Completed"


def test_a_receiver_answering_503_twice_gets_the_same_webhook_id_three_times(
    stack: Stack,
) -> None:
    with Receiver(503, 503) as receiver:
        _, secret = register(stack, receiver.url, "Flaky")
        request_id = submit_request(
            stack.factory, stack.registry, "Quick", client_id="Flaky", publisher=stack.publisher
        )
        wait_until(
            lambda: delivery_state(stack, request_id) == "delivered",
            timeout=60,
            what=f"the third attempt ({stack.worker.tail()})",
        )
        deliveries = receiver.received()
    assert [d.answered for d in deliveries] == [503, 503, 204]
    assert len({d.headers["webhook-id"] for d in deliveries}) == 1
    for d in deliveries:
        verify(secret, d.headers, d.body)
    # The request's own status is not touched by its webhook's trouble
    assert request_status(stack.factory, request_id) == "Completed"


def test_a_receiver_that_never_answers_ends_as_a_dead_letter_that_replays_to_success(
    stack: Stack,
) -> None:
    with Receiver(default="hang", hang_seconds=2.0) as receiver:
        endpoint_id, secret = register(stack, receiver.url, "Silent")
        request_id = submit_request(
            stack.factory, stack.registry, "Quick", client_id="Silent", publisher=stack.publisher
        )

        def letter() -> DeadLetter | None:
            with transaction(stack.factory, write=False) as session:
                found = session.scalars(
                    select(DeadLetter).where(
                        DeadLetter.kind == "webhook", DeadLetter.request_id == request_id
                    )
                ).first()
                if found is not None:
                    session.expunge(found)
                return found

        dead = wait_until(letter, timeout=60, what=f"the dead letter ({stack.worker.tail()})")
        attempts = len(receiver.received())
        assert attempts >= 2
        with transaction(stack.factory, write=False) as session:
            endpoint = session.get(WebhookEndpoint, endpoint_id)
            assert endpoint is not None
            assert not endpoint.enabled
            assert endpoint.disabled_reason
        # When the receiver is back and an operator replays the letter (the admin API's code)
        receiver.default = 204
        with transaction(stack.factory) as session:
            dead_letters.replay(session, dead.id, ("request", "outbox", "webhook"))
        wait_until(
            lambda: delivery_state(stack, request_id) == "delivered",
            timeout=60,
            what=f"the replayed delivery ({stack.worker.tail()})",
        )
        last = receiver.received()[-1]
    assert last.answered == 204
    assert verify(secret, last.headers, last.body)["data"]["correlationId"] == request_id
    assert last.headers["webhook-id"] == receiver.received()[0].headers["webhook-id"]


def test_the_example_receiver_verifies_and_acknowledges_a_real_delivery(
    stack: Stack, tmp_path: Path
) -> None:
    # Given the shipped example receiver running as its own process with the endpoint's secret
    port = free_port()
    client = "Example"
    with OutboundHttp(stack.settings) as guard, transaction(stack.factory) as session:
        _, secret = webhooks.register(
            session,
            client_id=client,
            url=f"http://127.0.0.1:{port}/",
            events=None,
            secret=None,
            vetter=guard,
        )
    out = (tmp_path / "receiver.out").open("wb")
    receiver = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", str(port), "--secret", secret],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: port_open("127.0.0.1", port), timeout=20, what="the receiver")
        # When a request of that client completes
        request_id = submit_request(
            stack.factory, stack.registry, "Quick", client_id=client, publisher=stack.publisher
        )
        wait_until(
            lambda: delivery_state(stack, request_id) == "delivered",
            timeout=60,
            what=f"the delivery ({stack.worker.tail()})",
        )
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
        out.close()
    # Then the receiver verified it (answered 2xx) and printed the event
    lines = [json.loads(line) for line in (tmp_path / "receiver.out").read_text().splitlines()
             if line.startswith("{")]  # fmt: skip
    assert [(e["type"], e["data"]["correlationId"]) for e in lines] == [
        ("request.completed", request_id)
    ]
