"""Chaos: a worker SIGKILLed after a request's status committed but before its webhook was
delivered; the delivery still arrives, signed, under the same ``webhook-id``.

The receiver holds the first attempt's connection open, so the kill lands while that attempt is
in flight (the status change and the delivery row are committed, nothing is recorded yet). A new
worker's beat finds the attempt's outbox row when its lease runs out and publishes it again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from broker.outbound.http_client import OutboundHttp
from broker.runtime import webhooks
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import WebhookDelivery
from broker.wiring.runtime import make_publisher
from tests.support.receiver import Receiver, verify
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_worker_killed_between_the_status_commit_and_the_delivery_still_delivers(
    tmp_path: Path,
) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    write_workflow(
        tmp_path / "workflows",
        workflow("quick", [set_output("out", "answer", 42)], request_type="Quick"),
    )
    env = runtime_env(
        var_dir,
        database_url=f"sqlite:///{var_dir / 'broker.db'}",
        workflows=tmp_path / "workflows",
        BROKER_WEBHOOK_TIMEOUT="30",
        BROKER_WEBHOOK_RETRY_INITIAL_DELAY="0.3",
    )
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    first = worker_process(env, tmp_path / "w1.log", name="w1")
    second = worker_process(env, tmp_path / "w2.log", name="w2")
    try:
        with Receiver("hang", hang_seconds=8.0) as receiver:
            with OutboundHttp(settings) as guard, transaction(factory) as session:
                _, secret = webhooks.register(
                    session,
                    client_id="Chaos",
                    url=receiver.url,
                    events=None,
                    secret=None,
                    vetter=guard,
                )
            first.start()
            request_id = submit_request(
                factory,
                registry,
                "Quick",
                client_id="Chaos",
                publisher=make_publisher(settings, factory),
            )
            # Given the first attempt is in flight (the status change is committed)
            assert receiver.arrived.wait(60), first.tail()
            assert request_status(factory, request_id) == "Completed"
            # When the worker and its pool are SIGKILLed, and another worker starts
            first.kill()
            second.start()

            # Then the attempt is published again after its lease and delivered
            def delivered() -> bool:
                with transaction(factory, write=False) as session:
                    state = session.scalar(
                        select(WebhookDelivery.state).where(
                            WebhookDelivery.request_id == request_id
                        )
                    )
                return state == "delivered"

            wait_until(delivered, timeout=90, what=f"the delivery ({second.tail()})")
            deliveries = receiver.received()
        assert [d.answered for d in deliveries] == ["hang", 204]
        assert deliveries[0].headers["webhook-id"] == deliveries[1].headers["webhook-id"]
        event = verify(secret, deliveries[1].headers, deliveries[1].body)
        assert event["data"]["correlationId"] == request_id
    finally:
        second.stop()
        first.stop()
        registry.stop()
        dispose_engines()
