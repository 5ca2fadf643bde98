"""Remote execution: a workflow whose ``customProperties.executor`` is ``"elsa"`` runs on an Elsa
server."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.run.ports import HttpRequest
from broker.errors import BrokerError, RetryLater, WorkflowFault
from broker.outbound.http_client import OutboundHttp, transient
from broker.redaction import redact_text, redact_url
from broker.registry.versions import PublishedWorkflow
from broker.runtime.failures import dead_letters
from broker.runtime.failures.retry import RetryPolicy, policy_for
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.parts import Steps
from broker.runtime.requests import transitions as statuses
from broker.runtime.requests.transitions import finish_request, start_processing
from broker.runtime.steps import callbacks
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import Request, RequestEvent, RequestStatus
from broker.telemetry import metrics, tracing

logger = logging.getLogger(__name__)

DISPATCHED_EVENT = "RequestDispatched"
FAILED_EVENT = "RemoteDispatchFailed"
REPLAYED_EVENT = statuses.TRANSITIONS[RequestStatus.FAULTED][RequestStatus.PROCESSING]


def dispatch_remote(
    rt: Steps, request_id: str, outbox_id: str | None, published: PublishedWorkflow
) -> Outcome:
    settings = rt.settings
    log = {"request_id": request_id, "outbox_id": outbox_id}
    with transaction(rt.factory) as session:
        request = session.get(Request, request_id)
        if request is None or outbox.is_finished(session, outbox_id):
            return Outcome.SKIPPED
        history = _history(session, request_id)
        if DISPATCHED_EVENT in history.since_replay:
            outbox.mark_done(session, outbox_id)
            return Outcome.SKIPPED
        # Committed before the POST, so a callback that overtakes the commit below still finds
        # the attempt its token was minted for.
        dispatch_attempt = (request.remote_attempt or 0) + 1
        request.remote_attempt = dispatch_attempt
        body = {
            "definitionId": published.definition_id,
            "correlationId": request_id,
            "message": {
                "requestType": request.request_type,
                "keys": request.keys,
                "payload": request.payload,
            },
            # carry: the callback joins this trace even if the remote server drops the header
            "callbackUrl": tracing.carry(
                f"{settings.callback_base_url.rstrip('/')}/internal/requests/{request_id}/result"
            ),
            "callbackToken": _token(settings.callback_secrets(), request_id, dispatch_attempt),
        }
        request_type, submitted_at = request.request_type, request.submitted_at
    attempt = history.since_replay.count(FAILED_EVENT) + 1
    failure = _Failure(rt, request_id, outbox_id, published, request_type, submitted_at)
    try:
        with tracing.span("dispatch to Elsa", attributes={"broker.request_id": request_id}):
            post(settings, body)
    except RetryLater as exc:
        return failure.transient(attempt, exc.message, exc.delay, history.replays)
    except WorkflowFault as exc:
        failure.fault(attempt, exc.message, "Failed", history.replays)
        return Outcome.DONE
    with transaction(rt.factory) as session:
        start_processing(session, request_id, None, message="Dispatched to Elsa")
        statuses.note(
            session,
            request_id,
            DISPATCHED_EVENT,
            source="worker",
            message=f"Dispatched to {redact_url(settings.elsa_dispatch_url)}",
            properties={"definitionId": published.definition_id, "attempt": attempt},
        )
        outbox.mark_done(session, outbox_id)
    logger.info("request %s dispatched to the remote Elsa server", request_id, extra=log)
    return Outcome.DISPATCHED


def _token(secrets: tuple[str, ...], request_id: str, attempt: int) -> str | None:
    """The callback token of this attempt, minted with the current secret; None when callbacks
    are disabled (every callback would be refused)."""
    return callbacks.token_for(secrets[0], request_id, attempt) if secrets else None


def post(settings: Settings, body: dict[str, Any]) -> None:
    """POST ``body`` to the dispatch URL; ``RetryLater`` for a transient failure (with the
    server's Retry-After as ``delay``), ``WorkflowFault`` for any other failure.

    The call goes through the outbound guard like every other one, allowed to reach exactly the
    configured URL's origin: the URL is parsed once, redirects are not followed, and the address
    connected to is checked against that origin."""
    url = settings.elsa_dispatch_url
    if not url:
        raise WorkflowFault(
            "BROKER_ELSA_DISPATCH_URL is not set: this workflow runs on a remote Elsa server",
            category="Dispatch",
        )
    where = redact_url(url)
    request = HttpRequest(
        "POST",
        url,
        headers={"Content-Type": "application/json"},
        body=json.dumps(body).encode(),
        follow_redirects=False,
    )
    try:
        with OutboundHttp.for_configured_url(settings, url) as http:
            response = http.send(request)
    except RetryLater as exc:
        if exc.status_code is not None:
            message = f"Elsa at {where} answered HTTP {exc.status_code}"
        elif exc.reason == "timeout":
            message = f"Elsa at {where} did not answer within {settings.http_timeout:g}s"
        else:
            message = f"Elsa at {where} cannot be reached: {redact_text(exc.message)}"
        raise RetryLater(message, delay=exc.delay, status_code=exc.status_code) from exc
    except BrokerError as exc:
        raise WorkflowFault(
            f"dispatch to Elsa at {where} failed: {redact_text(exc.message)}", category="Dispatch"
        ) from exc
    status = response.status_code
    if status < 300:
        return
    message = f"Elsa at {where} answered HTTP {status}"
    retry = transient(response)  # a busy or failing server: later; any other answer: refused
    if retry is not None:
        raise RetryLater(message, delay=retry.delay, status_code=status)
    raise WorkflowFault(message, category="Dispatch")


class _History:
    """The audit events of a request that count its dispatch attempts."""

    def __init__(self, types: list[str]) -> None:
        last_replay = max((i for i, t in enumerate(types) if t == REPLAYED_EVENT), default=-1)
        self.replays = types.count(REPLAYED_EVENT)
        self.since_replay = types[last_replay + 1 :]


def _history(session: Session, request_id: str) -> _History:
    types = session.scalars(
        select(RequestEvent.event_type)
        .where(
            RequestEvent.request_id == request_id,
            RequestEvent.event_type.in_([DISPATCHED_EVENT, FAILED_EVENT, REPLAYED_EVENT]),
        )
        .order_by(RequestEvent.id)
    ).all()
    return _History(list(types))


@dataclasses.dataclass(frozen=True)
class _Failure:
    """What a failed dispatch writes: a postponed retry, or the fault and its dead letter."""

    rt: Steps
    request_id: str
    outbox_id: str | None
    published: PublishedWorkflow
    request_type: str
    submitted_at: dt.datetime

    def policy(self) -> RetryPolicy:
        return policy_for(
            self.rt.settings,
            activity_policy=None,
            workflow_properties=self.published.document.get("customProperties") or {},
        )

    def transient(self, attempt: int, error: str, hint: float | None, replays: int) -> Outcome:
        policy = self.policy()
        if self.outbox_id is None or policy.exhausted(attempt):
            self.fault(attempt, f"{error} (gave up after {attempt} attempts)", "Exhausted", replays)
            return Outcome.DONE
        delay = policy.delay(attempt + 1, hint=hint)
        with transaction(self.rt.factory) as session:
            statuses.note(
                session,
                self.request_id,
                FAILED_EVENT,
                source="worker",
                message=f"attempt {attempt} of {policy.max_attempts}: {error}; "
                f"retry in {delay:.1f}s",
                properties={"attempt": attempt, "retryIn": round(delay, 3)},
            )
            outbox.postpone(session, self.outbox_id, delay=delay, error=error)
        logger.warning(
            "remote dispatch of request %s failed (%s); attempt %d of %d, retry in %.1fs",
            self.request_id,
            redact_text(error),
            attempt,
            policy.max_attempts,
            delay,
            extra={"request_id": self.request_id},
        )
        return Outcome.BUSY

    def fault(self, attempt: int, error: str, reason: str, replays: int) -> None:
        message = f"remote dispatch failed: {error}"
        with transaction(self.rt.factory) as session:
            statuses.note(
                session,
                self.request_id,
                FAILED_EVENT,
                source="worker",
                message=f"attempt {attempt}: {error}",
                properties={"attempt": attempt},
            )
            set_to = finish_request(
                session, self.request_id, sub_status="Faulted", output=None, error=message
            )
            dead_letters.record_fault(
                session,
                key=f"remote:{self.request_id}:{replays}",
                reason=reason,
                error=error,
                request_id=self.request_id,
                instance_id=None,
                source_id=self.outbox_id,
                name=self.published.definition_id,
                attempts=attempt,
                queue=self.published.queue,
            )
            outbox.mark_done(session, self.outbox_id)
        if set_to is not None:
            metrics.record_finished(self.request_type, RequestStatus.FAULTED, self.submitted_at)
        logger.error(
            "request %s faulted: %s",
            self.request_id,
            redact_text(message),
            extra={"request_id": self.request_id},
        )
