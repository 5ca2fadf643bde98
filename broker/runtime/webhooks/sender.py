"""One attempt of a webhook delivery on the wire: the Standard Webhooks headers, signed with the
endpoint's live secrets, and one POST through the outbound guard. No database here: the attempt's
``Plan`` is read before and its ``Result`` recorded after (``broker.runtime.webhooks.delivery``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time

from standardwebhooks.webhooks import Webhook

from broker.engine.run.ports import HttpClient, HttpRequest
from broker.errors import BrokerError, OutboundBlocked, RetryLater
from broker.outbound.http_client import transient
from broker.store.models import utcnow
from broker.telemetry import tracing


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one attempt sends, read in a short transaction before the call."""

    delivery_id: str
    endpoint_id: str
    url: str
    secrets: tuple[str, ...]
    message_id: str
    body: str
    attempt: int


@dataclasses.dataclass(frozen=True)
class Result:
    """How an attempt went: the status code (None when none came back), the error, the
    latency, whether it may be retried and the receiver's ``Retry-After``."""

    status_code: int | None
    error: str | None
    seconds: float
    retryable: bool
    retry_after: float | None = None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def signature(secrets: tuple[str, ...], message_id: str, at: dt.datetime, body: str) -> str:
    """The ``webhook-signature`` header: ``v1,<base64>`` for each live secret, space-separated."""
    return " ".join(Webhook(s).sign(message_id, at, body) for s in secrets)


def headers_for(plan: Plan, at: dt.datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt made at ``at``."""
    return {
        "Content-Type": "application/json",
        "webhook-id": plan.message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature(plan.secrets, plan.message_id, at, plan.body),
    }


def send(http: HttpClient, plan: Plan, *, timeout: float) -> Result:
    """POST the delivery once through the outbound guard; never raises for the receiver's sake."""
    started = time.monotonic()
    at = utcnow()
    request = HttpRequest(
        method="POST",
        url=plan.url,
        headers=headers_for(plan, at),
        body=plan.body.encode(),
        timeout=timeout,
        # a redirected POST may turn into a GET without the body: a 3xx is a failure here
        follow_redirects=False,
    )
    try:
        with tracing.span("deliver webhook", attributes={"broker.webhook_id": plan.message_id}):
            response = http.send(request)
    except RetryLater as exc:
        return Result(exc.status_code, exc.message, _since(started), True, exc.delay)
    except OutboundBlocked as exc:
        return Result(None, exc.message, _since(started), False)
    except BrokerError as exc:  # a response over the size cap, a refused certificate, ...
        return Result(None, exc.message, _since(started), False)
    status = response.status_code
    error = None if 200 <= status < 300 else f"the receiver answered {status}"
    retry = transient(response)  # busy or failing: tried again, after its Retry-After
    if retry is not None:
        return Result(status, error, _since(started), True, retry.delay)
    return Result(status, error, _since(started), False)


def _since(started: float) -> float:
    return time.monotonic() - started
