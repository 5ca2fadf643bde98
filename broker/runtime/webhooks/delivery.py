"""Sending webhook deliveries: signed attempts, retries as SQL rows, dead letters, replay."""

from __future__ import annotations

import datetime as dt
import logging
import random
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from broker.engine.run.ports import HttpClient
from broker.errors import BrokerError
from broker.names import DELIVER_WEBHOOK, WEBHOOK_QUEUE
from broker.runtime import ids
from broker.runtime.failures import dead_letters
from broker.runtime.outbox import rows as outbox
from broker.runtime.ports import LockProvider
from broker.runtime.webhooks.endpoints import REMOVED_FROM_FILE, SOURCE_CALLBACK, live_secrets
from broker.runtime.webhooks.events import enqueue_attempt
from broker.runtime.webhooks.sender import Plan, Result, send
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import (
    DeadLetter,
    OutboxRow,
    OutboxState,
    WebhookAttempt,
    WebhookDelivery,
    WebhookDeliveryState,
    WebhookEndpoint,
    utcnow,
)
from broker.telemetry import metrics

logger = logging.getLogger(__name__)

#: each retry waits this many times longer than the one before (about 8 attempts in 3 days)
BACKOFF_FACTOR = 5.0
#: the delay is multiplied by a random factor in this range, so receivers back from an outage
#: are not hit by every delivery at once
JITTER = (0.8, 1.2)
MAX_ERROR_LENGTH = 500
#: finished deliveries one purge run deletes at most
PURGE_BATCH = 1000

OUTCOME_DELIVERED = "delivered"
OUTCOME_RETRY = "retry"
OUTCOME_DEAD = "dead"


def deliver(
    settings: Settings,
    factory: sessionmaker[Session],
    http: HttpClient,
    delivery_id: str,
    outbox_id: str | None,
    *,
    rng: random.Random | None = None,
    locks: LockProvider | None = None,
) -> str:
    """Run one attempt of a delivery (the task adapter's body); answers what happened. Safe to run
    twice: a finished outbox row or a delivery no longer pending is not sent again, and with
    ``locks`` (the lock provider) two copies of one attempt running at once (a message published
    again when its lease ran out while the first copy was still sending) send once: the second
    finds the delivery's lock held and answers ``busy``, leaving the row to the relay."""
    if locks is None:
        return _deliver(settings, factory, http, delivery_id, outbox_id, rng)
    lock = locks.acquire(
        f"webhook-delivery:{delivery_id}",
        ttl=settings.webhook_timeout + settings.lock_ttl,
        timeout=0,
    )
    if lock is None:
        return "busy"
    try:
        return _deliver(settings, factory, http, delivery_id, outbox_id, rng)
    finally:
        lock.release()


def _deliver(
    settings: Settings,
    factory: sessionmaker[Session],
    http: HttpClient,
    delivery_id: str,
    outbox_id: str | None,
    rng: random.Random | None,
) -> str:
    with transaction(factory) as session:
        if outbox.is_finished(session, outbox_id):
            return "duplicate"
        plan = _plan(session, settings, delivery_id, outbox_id)
    if plan is None:
        return "skipped"
    result = send(http, plan, timeout=settings.webhook_timeout)
    with transaction(factory) as session:
        if outbox_id is not None and not outbox.mark_done(session, outbox_id):
            return "duplicate"  # a second run of the same attempt recorded it first
        outcome = record(session, settings, delivery_id, plan.attempt, result, rng=rng)
    metrics.record_webhook(outcome, result.seconds)
    return outcome


def _plan(
    session: Session, settings: Settings, delivery_id: str, outbox_id: str | None
) -> Plan | None:
    delivery = session.get(WebhookDelivery, delivery_id)
    if delivery is None or delivery.state != WebhookDeliveryState.PENDING.value:
        outbox.mark_done(session, outbox_id)
        return None
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    now = utcnow()
    if endpoint is None:
        delivery.state, delivery.finished_at = WebhookDeliveryState.DEAD.value, now
        delivery.last_error = "the endpoint was deleted"
        outbox.mark_done(session, outbox_id)
        return None
    if not endpoint.enabled:
        _bury(
            session,
            delivery,
            endpoint,
            f"endpoint disabled: {endpoint.disabled_reason}",
            now,
        )
        outbox.mark_done(session, outbox_id)
        return None
    if delivery.retry_until is None:
        delivery.retry_until = delivery.created_at + dt.timedelta(seconds=settings.webhook_horizon)
    return Plan(
        delivery_id=delivery.id,
        endpoint_id=endpoint.id,
        url=endpoint.url,
        secrets=tuple(live_secrets(endpoint, now)),
        message_id=delivery.message_id,
        body=delivery.body,
        attempt=delivery.attempts + 1,
    )


def record(
    session: Session,
    settings: Settings,
    delivery_id: str,
    attempt: int,
    result: Result,
    *,
    rng: random.Random | None = None,
    now: dt.datetime | None = None,
) -> str:
    """Log the attempt and move the delivery on: delivered, the next attempt, or dead."""
    now = now or utcnow()
    delivery = session.get(WebhookDelivery, delivery_id)
    if delivery is None:
        return OUTCOME_DEAD
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    if endpoint is None:  # deleted while the attempt was in flight: nothing left to retry for
        delivery.state, delivery.finished_at = WebhookDeliveryState.DEAD.value, now
        delivery.last_error = "the endpoint was deleted"
        return OUTCOME_DEAD
    delivery.attempts = attempt
    delivery.last_status_code = result.status_code
    delivery.last_error = _short(result.error)
    retry_until = delivery.retry_until or now
    if result.delivered:
        outcome = OUTCOME_DELIVERED
        delivery.state, delivery.finished_at, delivery.next_attempt_at = (
            WebhookDeliveryState.DELIVERED.value,
            now,
            None,
        )
        endpoint.failing_since = None
    else:
        # failing since this attempt was due (for a first attempt: since the event)
        due_at = min(delivery.next_attempt_at or now, now)
        endpoint.failing_since = endpoint.failing_since or due_at
        due = next_attempt_at(settings, attempt, now, retry_until, result.retry_after, rng)
        if result.retryable and due is not None:
            outcome = OUTCOME_RETRY
            delivery.next_attempt_at = due
            enqueue_attempt(session, delivery.id, attempt + 1, at=due)
        else:
            outcome = OUTCOME_DEAD
            _bury(session, delivery, endpoint, result.error or "failed", now)
            horizon = dt.timedelta(seconds=settings.webhook_horizon)
            if result.retryable and endpoint.enabled and now - endpoint.failing_since >= horizon:
                _disable(endpoint, delivery, now)
    session.add(
        WebhookAttempt(
            delivery_id=delivery.id,
            endpoint_id=endpoint.id,
            attempt=attempt,
            attempted_at=now,
            status_code=result.status_code,
            latency_ms=round(result.seconds * 1000),
            outcome=outcome,
            error=_short(result.error),
        )
    )
    log = logger.info if outcome != OUTCOME_DEAD else logger.warning
    log(
        "webhook delivery %s (webhook-id %s) attempt %d: %s%s",
        delivery.id,
        delivery.message_id,
        attempt,
        outcome,
        f" ({result.error})" if result.error else "",
        extra={"request_id": delivery.request_id, "endpoint_id": endpoint.id},
    )
    return outcome


def next_attempt_at(
    settings: Settings,
    attempt: int,
    now: dt.datetime,
    retry_until: dt.datetime,
    retry_after: float | None,
    rng: random.Random | None = None,
) -> dt.datetime | None:
    """When attempt ``attempt + 1`` is due: exponential backoff with jitter, at least
    ``Retry-After``, and never past the horizon (the last attempt falls on it); None once the
    horizon has passed."""
    if now >= retry_until:
        return None
    base = settings.webhook_retry_initial_delay * BACKOFF_FACTOR ** (attempt - 1)
    delay = base * (rng or random).uniform(*JITTER)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(now + dt.timedelta(seconds=delay), retry_until)


def _bury(
    session: Session,
    delivery: WebhookDelivery,
    endpoint: WebhookEndpoint,
    error: str,
    now: dt.datetime,
) -> None:
    delivery.state, delivery.finished_at, delivery.next_attempt_at = (
        WebhookDeliveryState.DEAD.value,
        now,
        None,
    )
    dead_letters.record(
        session,
        # one letter per burial: a replayed delivery that fails again gets a new one
        dead_letter_id=ids.dead_letter_id_for(
            "webhook", f"{delivery.id}:{delivery.attempts}:{now.isoformat()}"
        ),
        kind="webhook",
        reason="Undeliverable",
        source_id=delivery.id,
        request_id=delivery.request_id,
        client_key=endpoint.client_key,
        name=delivery.event_type,
        error=_short(error),
        attempts=delivery.attempts,
        data={"deliveryId": delivery.id, "endpointId": endpoint.id},
    )


def _disable(endpoint: WebhookEndpoint, delivery: WebhookDelivery, now: dt.datetime) -> None:
    since = endpoint.failing_since.isoformat() if endpoint.failing_since else "?"
    endpoint.enabled = False
    endpoint.disabled_at = now
    endpoint.disabled_reason = _short(
        f"every delivery failed since {since}; last: {delivery.last_error or 'no answer'}"
    )
    logger.error(
        "webhook endpoint %s disabled: %s",
        endpoint.id,
        endpoint.disabled_reason,
        extra={"endpoint_id": endpoint.id, "client_id": endpoint.client_id},
    )


def reopen(session: Session, letter: DeadLetter, outbox_id: str, *, now: dt.datetime) -> None:
    """Replay a ``webhook`` dead letter: the same delivery (same ``webhook-id``) gets a fresh
    horizon and an attempt now, and its endpoint is enabled again (the operator says the
    receiver is back)."""
    data = letter.data or {}
    delivery = session.get(WebhookDelivery, str(data.get("deliveryId") or letter.source_id))
    if delivery is None:
        raise BrokerError(f"the delivery of dead letter '{letter.id}' no longer exists")
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    if endpoint is None:
        raise BrokerError(f"the endpoint of dead letter '{letter.id}' was deleted")
    if not endpoint.enabled and endpoint.disabled_reason != REMOVED_FROM_FILE:
        endpoint.enabled, endpoint.disabled_reason, endpoint.disabled_at = (
            True,
            None,
            None,
        )
        endpoint.failing_since = None
    delivery.state = WebhookDeliveryState.PENDING.value
    delivery.finished_at = None
    delivery.next_attempt_at = now
    delivery.retry_until = None  # the first attempt after the replay starts a new horizon
    delivery.created_at = now
    # the replay's outbox row, under the id dead_letter_admin.replay answers
    session.add(
        OutboxRow(
            id=outbox_id,
            task_name=DELIVER_WEBHOOK,
            queue=WEBHOOK_QUEUE,
            args={"delivery_id": delivery.id},
            state=OutboxState.PENDING.value,
            attempts=0,
            available_at=now,
            created_at=now,
        )
    )


def purge_finished(session: Session, *, retention: float, now: dt.datetime | None = None) -> int:
    """Delete deliveries finished (delivered or dead) more than ``retention`` seconds ago, their
    attempts, and the one-off callback endpoints left without deliveries; answers how many
    deliveries went. The purge job passes the dead-letter TTL: a dead delivery stays while its
    dead letter can be replayed."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=retention)
    old = list(
        session.scalars(
            select(WebhookDelivery.id)
            .where(
                WebhookDelivery.state != WebhookDeliveryState.PENDING.value,
                WebhookDelivery.finished_at < cutoff,
            )
            .limit(PURGE_BATCH)
        )
    )
    if old:
        session.execute(delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(old)))
        session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(old)))
    session.execute(
        delete(WebhookEndpoint)
        .where(
            WebhookEndpoint.source == SOURCE_CALLBACK,
            WebhookEndpoint.created_at < cutoff,
            ~select(WebhookDelivery.id)
            .where(WebhookDelivery.endpoint_id == WebhookEndpoint.id)
            .exists(),
        )
        .execution_options(synchronize_session=False)
    )
    return len(old)


# The delivery log ---------------------------------------------------------------------------------


def attempts_view(session: Session, endpoint_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """The endpoint's last attempts, newest first: event, webhook-id, status code, latency."""
    rows = session.execute(
        select(WebhookAttempt, WebhookDelivery)
        .join(WebhookDelivery, WebhookDelivery.id == WebhookAttempt.delivery_id)
        .where(WebhookAttempt.endpoint_id == endpoint_id)
        .order_by(WebhookAttempt.attempted_at.desc(), WebhookAttempt.id.desc())
        .limit(limit)
    ).all()
    return [
        {
            "deliveryId": delivery.id,
            "webhookId": delivery.message_id,
            "eventType": delivery.event_type,
            "correlationId": delivery.request_id,
            "attempt": attempt.attempt,
            "attemptedAt": attempt.attempted_at.isoformat(),
            "statusCode": attempt.status_code,
            "latencyMs": attempt.latency_ms,
            "outcome": attempt.outcome,
            "error": attempt.error,
            "deliveryState": delivery.state,
            "nextAttemptAt": (
                delivery.next_attempt_at.isoformat() if delivery.next_attempt_at else None
            ),
        }
        for attempt, delivery in rows
    ]


def _short(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_LENGTH:
        return text
    return text[: MAX_ERROR_LENGTH - 1] + "…"
