"""Webhooks in process: deliveries written with status changes, signed attempts to a real
receiver on loopback, retries, dead letters, replay, endpoint sync (SQLite, no worker: the test
runs each due attempt as the worker's task adapter would)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.clients.entries import ApiClient, WebhookConfig
from broker.errors import BadRequest
from broker.names import DELIVER_WEBHOOK, WEBHOOK_QUEUE
from broker.outbound.http_client import OutboundHttp
from broker.runtime import webhooks
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.failures import dead_letters
from broker.runtime.requests.cancellation import cancel
from broker.runtime.requests.submission import Submission, submit
from broker.runtime.requests.transitions import finish_request, start_processing
from broker.runtime.webhooks import delivery as webhook_delivery
from broker.runtime.webhooks import sender as webhook_sender
from broker.settings import Settings
from broker.store import db
from broker.store.models import (
    DeadLetter,
    OutboxRow,
    OutboxState,
    Request,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    utcnow,
)
from tests.support.receiver import InvalidSignature, Receiver, verify
from tests.support.services import PROJECT_ROOT


@dataclasses.dataclass(frozen=True)
class Pinned:
    definition_id: str = "wf"
    version: int = 1
    version_id: str = "wf-v1"
    queue: str | None = None


@pytest.fixture
def wh_settings(settings: Settings) -> Settings:
    return settings.replace(
        http_allowlist=("127.0.0.1:*",),
        webhook_retry_initial_delay=0.05,
        webhook_horizon=30.0,
        webhook_timeout=1.0,
    )


@pytest.fixture
def http(wh_settings: Settings) -> Iterator[OutboundHttp]:
    with OutboundHttp(wh_settings) as client:
        yield client


def new_request(factory: sessionmaker[Session], client_id: str = "ClientA") -> str:
    with db.transaction(factory) as session:
        done = submit(
            session,
            client_id=client_id,
            submission=Submission("Invoice", {"InvoiceNumber": "INV-1"}, {"amount": 5}),
            workflow=Pinned(),
        )
    return done.request_id


def add_endpoint(
    factory: sessionmaker[Session],
    http: OutboundHttp,
    url: str,
    events: list[str] | None = None,
    client_id: str = "ClientA",
) -> tuple[str, str]:
    with db.transaction(factory) as session:
        endpoint, secret = webhooks.register(
            session, client_id=client_id, url=url, events=events, secret=None, vetter=http
        )
        return endpoint.id, secret


def complete(factory: sessionmaker[Session], request_id: str) -> None:
    with db.transaction(factory) as session:
        finish_request(session, request_id, sub_status="Finished", output={"total": 42}, error=None)


def run_due(
    settings: Settings,
    factory: sessionmaker[Session],
    http: OutboundHttp,
    *,
    until_idle: float = 10.0,
) -> list[str]:
    """Run every due webhook attempt as the task adapter would, until none is pending."""
    outcomes: list[str] = []
    deadline = time.monotonic() + until_idle
    while time.monotonic() < deadline:
        with db.transaction(factory, write=False) as session:
            rows = session.scalars(
                select(OutboxRow).where(
                    OutboxRow.task_name == DELIVER_WEBHOOK,
                    OutboxRow.state == OutboxState.PENDING.value,
                )
            ).all()
            due = [(r.id, r.args["delivery_id"]) for r in rows if r.available_at <= utcnow()]
            waiting = len(rows)
        if not waiting:
            return outcomes
        for outbox_id, delivery_id in due:
            outcomes.append(
                webhook_delivery.deliver(
                    settings, factory, http, delivery_id, outbox_id, rng=random.Random(1)
                )
            )
        if not due:
            time.sleep(0.02)
    raise AssertionError("webhook attempts still pending")


def test_a_completed_request_is_delivered_once_with_a_signature_the_helper_verifies(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver() as receiver:
        # Given an endpoint and a request of its client
        endpoint_id, secret = add_endpoint(factory, http, receiver.url)
        request_id = new_request(factory)
        # When the request completes and the due attempts run
        complete(factory, request_id)
        outcomes = run_due(wh_settings, factory, http)
        # Then the receiver got exactly one delivery, which the documented helper verifies
        assert outcomes == ["delivered"]
        [delivery] = receiver.received()
        event = verify(secret, delivery.headers, delivery.body)
    assert event["type"] == "request.completed"
    assert event["data"] == {
        "correlationId": request_id,
        "requestType": "Invoice",
        "status": "Completed",
        "result": {"total": 42},
        "errorDetail": None,
        "keys": {"InvoiceNumber": "INV-1"},
    }
    assert delivery.headers["webhook-id"].startswith("msg_")
    assert delivery.headers["Content-Type"] == "application/json"
    # And the delivery log shows the attempt
    with db.transaction(factory, write=False) as session:
        [logged] = webhook_delivery.attempts_view(session, endpoint_id)
    assert logged["statusCode"] == 204
    assert logged["outcome"] == "delivered"
    assert logged["webhookId"] == delivery.headers["webhook-id"]
    assert logged["latencyMs"] >= 0


def test_a_status_change_that_rolls_back_writes_no_delivery(
    factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    add_endpoint(factory, http, "http://127.0.0.1:9/hook")
    request_id = new_request(factory)

    # When the transaction of the status change fails after it
    def failing_step() -> None:
        with db.transaction(factory) as session:
            finish_request(session, request_id, sub_status="Finished", output=None, error=None)
            raise RuntimeError("the step's commit failed")

    with pytest.raises(RuntimeError):
        failing_step()
    # Then neither the delivery nor its outbox row exists
    with db.transaction(factory, write=False) as session:
        assert session.scalars(select(WebhookDelivery)).all() == []
        assert (
            session.scalars(select(OutboxRow).where(OutboxRow.queue == WEBHOOK_QUEUE)).all() == []
        )


def test_a_503_twice_is_retried_under_the_same_webhook_id_and_leaves_the_status_alone(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver(503, 503) as receiver:
        _, secret = add_endpoint(factory, http, receiver.url)
        request_id = new_request(factory)
        complete(factory, request_id)
        outcomes = run_due(wh_settings, factory, http)
        deliveries = receiver.received()
    assert outcomes == ["retry", "retry", "delivered"]
    assert [d.answered for d in deliveries] == [503, 503, 204]
    assert len({d.headers["webhook-id"] for d in deliveries}) == 1
    assert len({d.body for d in deliveries}) == 1
    for d in deliveries:
        verify(secret, d.headers, d.body)
    with db.transaction(factory, write=False) as session:
        assert session.get(Request, request_id).status == "Completed"  # type: ignore[union-attr]


def test_retry_after_is_honoured_and_the_last_attempt_falls_on_the_horizon(
    wh_settings: Settings,
) -> None:
    now = utcnow()
    until = now + dt.timedelta(seconds=100)
    rng = random.Random(3)
    # Retry-After larger than the backoff wins
    due = webhook_delivery.next_attempt_at(wh_settings, 1, now, until, 20.0, rng)
    assert due == now + dt.timedelta(seconds=20)
    # A backoff past the horizon is cut to the horizon; past it there is no next attempt
    assert webhook_delivery.next_attempt_at(wh_settings, 1, now, until, 500.0, rng) == until
    assert webhook_delivery.next_attempt_at(wh_settings, 1, until, until, None, rng) is None


def test_the_default_schedule_makes_about_eight_attempts_in_three_days(
    settings: Settings,
) -> None:
    start = utcnow()
    until = start + dt.timedelta(seconds=settings.webhook_horizon)
    at, attempts, rng = start, 1, random.Random(7)
    while due := webhook_delivery.next_attempt_at(settings, attempts, at, until, None, rng):
        at, attempts = due, attempts + 1
        if at >= until:
            break
    assert settings.webhook_horizon == 3 * 86400
    assert 7 <= attempts <= 9


def test_a_receiver_that_never_answers_ends_as_a_webhook_dead_letter_that_replays(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    settings = wh_settings.replace(webhook_horizon=1.0, webhook_timeout=0.3)
    with Receiver(default="hang", hang_seconds=1.0) as receiver:
        endpoint_id, secret = add_endpoint(factory, http, receiver.url)
        request_id = new_request(factory)
        complete(factory, request_id)
        outcomes = run_due(settings, factory, http)
        # Then the attempts timed out until the horizon, and the delivery is a dead letter
        assert outcomes[-1] == "dead"
        assert set(outcomes[:-1]) == {"retry"}
        with db.transaction(factory, write=False) as session:
            [letter] = session.scalars(select(DeadLetter)).all()
            endpoint = session.get(WebhookEndpoint, endpoint_id)
            assert letter.kind == "webhook"
            assert letter.request_id == request_id
            assert "ran out of time" in (letter.error or "") or "timed out" in (letter.error or "")
            # And the endpoint, failing for its whole horizon, is disabled with the reason
            assert endpoint is not None
            assert not endpoint.enabled
            view = webhooks.endpoint_view(endpoint)
        assert view["disabled"]["reason"].startswith("every delivery failed since")
        first_id = receiver.received()[0].headers["webhook-id"]
        # When the receiver is back and the operator replays the dead letter
        receiver.default = 204
        with db.transaction(factory) as session:
            dead_letter_admin.replay(session, letter.id)
        assert run_due(settings, factory, http) == ["delivered"]
        last = receiver.received()[-1]
    # Then the same event arrives, verified, under the same webhook-id; the endpoint is enabled
    assert verify(secret, last.headers, last.body)["data"]["correlationId"] == request_id
    assert last.headers["webhook-id"] == first_id
    with db.transaction(factory, write=False) as session:
        assert session.get(WebhookEndpoint, endpoint_id).enabled  # type: ignore[union-attr]
        assert session.get(DeadLetter, letter.id).replayable is False  # type: ignore[union-attr]


def test_a_4xx_answer_is_not_retried(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver(404) as receiver:
        endpoint_id, _ = add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        assert run_due(wh_settings, factory, http) == ["dead"]
        assert len(receiver.received()) == 1
    with db.transaction(factory, write=False) as session:
        # a single failure is not a whole horizon: the endpoint stays enabled
        assert session.get(WebhookEndpoint, endpoint_id).enabled  # type: ignore[union-attr]
        assert session.scalars(select(DeadLetter.kind)).all() == ["webhook"]


def test_a_redirect_is_not_followed_and_ends_the_delivery(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver(302) as receiver:
        add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        assert run_due(wh_settings, factory, http) == ["dead"]
        assert [d.answered for d in receiver.received()] == [302]  # /moved was never called


def test_processing_is_sent_only_to_endpoints_that_ask_for_it(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver() as wants, Receiver() as terminal_only, Receiver() as other_client:
        add_endpoint(factory, http, wants.url, ["request.processing", "request.cancelled"])
        add_endpoint(factory, http, terminal_only.url)
        add_endpoint(factory, http, other_client.url, client_id="ClientB")
        request_id = new_request(factory)
        with db.transaction(factory) as session:
            assert start_processing(session, request_id, None)
        with db.transaction(factory) as session:
            cancel(session, request_id, client_id="ClientA", source="api")
        run_due(wh_settings, factory, http)
        types = [json.loads(d.body)["type"] for d in wants.received()]
        assert sorted(types) == ["request.cancelled", "request.processing"]
        assert [json.loads(d.body)["type"] for d in terminal_only.received()] == [
            "request.cancelled"
        ]
        assert other_client.received() == []


def test_each_event_carries_the_time_of_its_status_change(
    factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    # Given an endpoint for every event, and a request whose step started and ended earlier
    with Receiver() as sink:
        add_endpoint(factory, http, sink.url, sorted(webhooks.EVENT_OF_STATUS.values()))
    request_id = new_request(factory)
    started = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ended = started + dt.timedelta(seconds=7)
    with db.transaction(factory) as session:
        assert start_processing(session, request_id, None, now=started)
        finish_request(
            session, request_id, sub_status="Finished", output=None, error=None, now=ended
        )
    # Then each delivery is stamped with the time of its change, not of its writing
    with db.transaction(factory, write=False) as session:
        deliveries = {d.event_type: d for d in session.scalars(select(WebhookDelivery))}
    assert json.loads(deliveries["request.processing"].body)["timestamp"] == "2026-01-02T03:04:05Z"
    assert json.loads(deliveries["request.completed"].body)["timestamp"] == "2026-01-02T03:04:12Z"
    assert deliveries["request.completed"].created_at == ended


def test_a_replayed_request_tells_of_processing_again(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    add_endpoint(factory, http, "http://127.0.0.1:9/hook", ["request.processing"])
    request_id = new_request(factory)
    with db.transaction(factory) as session:
        finish_request(session, request_id, sub_status="Faulted", output=None, error="boom")
        dead_letters.record(
            session,
            dead_letter_id="dl-1",
            kind="request",
            reason="Exhausted",
            request_id=request_id,
        )
    with db.transaction(factory) as session:
        dead_letter_admin.replay(session, "dl-1")
    with db.transaction(factory, write=False) as session:
        events = session.scalars(select(WebhookDelivery.event_type)).all()
    assert events == ["request.processing"]


def test_two_secrets_sign_during_a_rotation_and_the_old_one_stops_after_the_overlap(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver() as receiver:
        endpoint_id, old = add_endpoint(factory, http, receiver.url)
        with db.transaction(factory) as session:
            new = webhooks.rotate_secret(session, endpoint_id, "ClientA", overlap=60)
        complete(factory, new_request(factory))
        run_due(wh_settings, factory, http)
        first = receiver.received()[-1]
        assert len(first.headers["webhook-signature"].split()) == 2
        verify(old, first.headers, first.body)
        verify(new, first.headers, first.body)
        # When the overlap is over, only the new secret signs
        with db.transaction(factory) as session:
            endpoint = session.get(WebhookEndpoint, endpoint_id)
            assert endpoint is not None
            endpoint.previous_secret_expires_at = utcnow() - dt.timedelta(seconds=1)
        complete(factory, new_request(factory))
        run_due(wh_settings, factory, http)
        second = receiver.received()[-1]
    verify(new, second.headers, second.body)
    with pytest.raises(InvalidSignature):
        verify(old, second.headers, second.body)


def test_a_tampered_body_or_an_old_timestamp_fails_the_documented_verification(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver() as receiver:
        _, secret = add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        run_due(wh_settings, factory, http)
        [delivery] = receiver.received()
    headers, body = delivery.headers, delivery.body
    assert verify(secret, headers, body)
    with pytest.raises(InvalidSignature):
        verify(secret, headers, body.replace(b'"total":42', b'"total":43'))
    stamp = int(headers["webhook-timestamp"])
    with pytest.raises(InvalidSignature):
        verify(secret, headers, body, now=stamp + 301)  # replayed six minutes later
    with pytest.raises(InvalidSignature):
        verify(webhooks.new_secret(), headers, body)  # another endpoint's secret
    with pytest.raises(InvalidSignature):
        verify(secret, {**headers, "webhook-id": "msg_other"}, body)


def test_a_private_url_is_refused_at_registration_unless_allowlisted(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    with OutboundHttp(settings) as guard, db.transaction(factory) as session:
        for url in ("http://127.0.0.1:8080/hook", "http://10.0.0.7/hook", "http://localhost/h"):
            with pytest.raises(BadRequest) as refused:
                webhooks.register(
                    session, client_id="ClientA", url=url, events=None, secret=None, vetter=guard
                )
            assert refused.value.details["field"] == "url"
        with pytest.raises(BadRequest):
            webhooks.register(
                session, client_id="ClientA", url="ftp://x/", events=None, secret=None, vetter=guard
            )
    allowed = settings.replace(http_allowlist=("127.0.0.1:8080",))
    with OutboundHttp(allowed) as guard, db.transaction(factory) as session:
        endpoint, secret = webhooks.register(
            session,
            client_id="ClientA",
            url="http://127.0.0.1:8080/hook",
            events=None,
            secret=None,
            vetter=guard,
        )
    assert secret.startswith("whsec_")
    assert endpoint.events == ["request.completed", "request.faulted", "request.cancelled"]
    with db.transaction(factory, write=False) as session:
        assert [e.url for e in session.scalars(select(WebhookEndpoint))] == [
            "http://127.0.0.1:8080/hook"
        ]


def test_bad_events_or_secret_are_refused_naming_the_field(
    factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    cases: list[tuple[Any, Any, str]] = [
        (["request.done"], None, "events"),
        ([], None, "events"),
        ("request.completed", None, "events"),
        (None, "not-a-secret", "secret"),
        (None, "whsec_c2hvcnQ=", "secret"),
    ]
    for events, secret, field in cases:
        with pytest.raises(BadRequest) as refused, db.transaction(factory) as session:
            webhooks.register(
                session,
                client_id="ClientA",
                url="http://127.0.0.1:9/h",
                events=events,
                secret=secret,
                vetter=http,
            )
        assert refused.value.details["field"] == field
    with db.transaction(factory, write=False) as session:
        assert session.scalars(select(WebhookEndpoint)).all() == []


def test_clients_json_endpoints_are_synced_idempotently(
    factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    secret = webhooks.new_secret()
    hooks = (
        WebhookConfig("http://127.0.0.1:9/a", ("request.completed",), (secret,)),
        WebhookConfig("http://127.0.0.1:9/b", ("request.faulted",), ()),
    )
    client = ApiClient("ClientA", "A" * 40, None, None, frozenset(), webhooks=hooks)
    with db.transaction(factory) as session:
        assert webhooks.sync_configured(session, [client], http) == 2
    with db.transaction(factory) as session:
        assert webhooks.sync_configured(session, [client], http) == 0
        rows = {e.url: e for e in session.scalars(select(WebhookEndpoint))}
        assert rows["http://127.0.0.1:9/a"].secrets == [secret]
        assert rows["http://127.0.0.1:9/b"].secrets[0].startswith("whsec_")  # generated
    # When one leaves the file it is disabled with the reason; back in the file, enabled again
    fewer = dataclasses.replace(client, webhooks=hooks[:1])
    with db.transaction(factory) as session:
        assert webhooks.sync_configured(session, [fewer], http) == 1
        gone = session.get(WebhookEndpoint, webhooks.config_endpoint_id("clienta", hooks[1].url))
        assert gone is not None
        assert not gone.enabled
        assert gone.disabled_reason == webhooks.REMOVED_FROM_FILE
    with db.transaction(factory) as session:
        assert webhooks.sync_configured(session, [client], http) == 1
        back = session.get(WebhookEndpoint, webhooks.config_endpoint_id("clienta", hooks[1].url))
        assert back is not None
        assert back.enabled


def test_a_duplicate_run_of_one_attempt_sends_once(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver() as receiver:
        add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        with db.transaction(factory, write=False) as session:
            row = session.scalars(select(OutboxRow).where(OutboxRow.queue == WEBHOOK_QUEUE)).one()
            outbox_id, delivery_id = row.id, row.args["delivery_id"]
        first = webhook_delivery.deliver(wh_settings, factory, http, delivery_id, outbox_id)
        again = webhook_delivery.deliver(wh_settings, factory, http, delivery_id, outbox_id)
        assert (first, again) == ("delivered", "duplicate")
        assert len(receiver.received()) == 1
    with db.transaction(factory, write=False) as session:
        assert len(session.scalars(select(WebhookAttempt)).all()) == 1


def test_two_copies_of_one_attempt_running_at_once_send_once(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp, tmp_path: Path
) -> None:
    # Given a delivery whose attempt is being sent by one worker (it holds the delivery's lock)
    locks = FileLockProvider(tmp_path / "locks")
    with Receiver() as receiver:
        add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        with db.transaction(factory, write=False) as session:
            row = session.scalars(select(OutboxRow).where(OutboxRow.queue == WEBHOOK_QUEUE)).one()
            outbox_id, delivery_id = row.id, row.args["delivery_id"]
        held = locks.acquire(f"webhook-delivery:{delivery_id}", ttl=30, timeout=0)
        assert held is not None
        # When a second copy of the same message runs meanwhile (its lease ran out)
        busy = webhook_delivery.deliver(
            wh_settings, factory, http, delivery_id, outbox_id, locks=locks
        )
        # Then it sends nothing and leaves the row to the relay
        assert busy == "busy"
        assert receiver.received() == []
        held.release()
        # And once the first copy is done, the attempt is sent exactly once
        sent = webhook_delivery.deliver(
            wh_settings, factory, http, delivery_id, outbox_id, locks=locks
        )
        assert sent == "delivered"
        assert len(receiver.received()) == 1


def readme_verify() -> Any:
    """The verification helper exactly as the README documents it."""
    text = (PROJECT_ROOT / "README.md").read_text()
    start = text.index("```python", text.index("Verifying a delivery takes")) + len("```python")
    namespace: dict[str, Any] = {}
    exec(compile(text[start : text.index("```", start)], "README.md", "exec"), namespace)  # noqa: S102 - our own README's snippet
    return namespace["verify"]


def test_the_readme_helper_verifies_a_delivery_and_refuses_a_tampered_or_old_one(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    check = readme_verify()
    with Receiver() as receiver:
        endpoint_id, secret = add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        run_due(wh_settings, factory, http)
        [delivery] = receiver.received()
    assert check(secret, delivery.headers, delivery.body) is True
    assert check(secret, delivery.headers, delivery.body + b" ") is False
    # A delivery signed correctly but ten minutes ago (a replay of an old one) is refused too
    plan = webhook_sender.Plan(
        delivery_id="d",
        endpoint_id=endpoint_id,
        url=receiver.url,
        secrets=(secret,),
        message_id=delivery.headers["webhook-id"],
        body=delivery.body.decode(),
        attempt=1,
    )
    old = webhook_sender.headers_for(plan, utcnow() - dt.timedelta(minutes=10))
    assert check(secret, old, delivery.body) is False
    with pytest.raises(InvalidSignature, match="timestamp"):
        verify(secret, old, delivery.body)
    fresh = webhook_sender.headers_for(plan, utcnow())
    assert check(secret, fresh, delivery.body) is True
    assert verify(secret, fresh, delivery.body)["type"] == "request.completed"


def test_delivery_outcomes_are_counted_for_metrics(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    def sample(outcome: str) -> float:
        value = REGISTRY.get_sample_value("broker_webhook_deliveries_total", {"outcome": outcome})
        return value or 0.0

    def observed() -> float:
        return REGISTRY.get_sample_value("broker_webhook_delivery_seconds_count") or 0.0

    before = {o: sample(o) for o in ("delivered", "retry")}
    count = observed()
    with Receiver(503) as receiver:
        add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))
        assert run_due(wh_settings, factory, http) == ["retry", "delivered"]
    assert sample("retry") == before["retry"] + 1
    assert sample("delivered") == before["delivered"] + 1
    assert observed() == count + 2


def test_the_purge_removes_finished_deliveries_after_the_retention_but_keeps_pending_ones(
    wh_settings: Settings, factory: sessionmaker[Session], http: OutboundHttp
) -> None:
    with Receiver(204, 404) as receiver:
        add_endpoint(factory, http, receiver.url)
        complete(factory, new_request(factory))  # delivered
        complete(factory, new_request(factory))  # dead (404)
        run_due(wh_settings, factory, http)
    add_endpoint(factory, http, "http://127.0.0.1:9/never")
    complete(factory, new_request(factory))  # pending for the second endpoint too
    with db.transaction(factory) as session:
        cb = webhooks.add_callback(
            session, client_id="ClientA", request_id="r-x", url="http://x/", secret="whsec_x"
        )
        cb.created_at = utcnow() - dt.timedelta(days=30)
    later = utcnow() + dt.timedelta(seconds=wh_settings.dead_letter_ttl + 1)
    with db.transaction(factory) as session:
        assert webhook_delivery.purge_finished(session, retention=60, now=utcnow()) == 0
        purged = webhook_delivery.purge_finished(
            session, retention=wh_settings.dead_letter_ttl, now=later
        )
    assert purged == 2
    with db.transaction(factory, write=False) as session:
        left = session.scalars(select(WebhookDelivery.state)).all()
        assert left
        assert set(left) == {"pending"}
        assert session.scalars(select(WebhookAttempt)).all() == []
        assert session.get(WebhookEndpoint, cb.id) is None


def test_the_beat_job_syncs_clients_json_into_the_database(
    wh_settings: Settings, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    from broker.wiring.runtime import Runtime, set_runtime
    from tasks.webhooks import sync_webhooks

    clients = tmp_path / "clients.json"
    clients.write_text(
        json.dumps(
            {
                "clients": [
                    {
                        "clientId": "ClientA",
                        "thumbprint": "A" * 40,
                        "webhooks": [{"url": "http://127.0.0.1:9/hook"}],
                    }
                ]
            }
        )
    )
    set_runtime(Runtime(wh_settings.replace(clients_file=str(clients)), factory=factory))
    try:
        assert sync_webhooks() == 1
        assert sync_webhooks() == 0
    finally:
        set_runtime(None)
    with db.transaction(factory, write=False) as session:
        [endpoint] = session.scalars(select(WebhookEndpoint)).all()
    assert (endpoint.source, endpoint.client_key, endpoint.url) == (
        "config",
        "clienta",
        "http://127.0.0.1:9/hook",
    )
