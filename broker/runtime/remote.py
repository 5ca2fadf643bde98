"""Remote execution: a workflow with ``customProperties.executor: "elsa"`` runs on an Elsa server.

The worker POSTs ``{definitionId, correlationId, message, callbackUrl, callbackToken}`` to
``BROKER_ELSA_DISPATCH_URL``; the request stays Processing until the Elsa server calls the internal
listener back with a body signed by that token (``callbacks``, ``runner.complete_from_callback``).
Each POST is a new dispatch attempt, counted on the request and committed before the POST, with a
token of its own: only the latest attempt's token is accepted, so a token that leaked from an
earlier dispatch cannot finish the request. A failed POST is retried with backoff through the
outbox row; when the attempts run out the request faults with a replayable dead letter. A POST is
repeated only if the worker died between it and the commit that records it, and then carries the
same correlation id with a new token, which the server keeps in place of the first.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from sqlalchemy import select

from broker.runtime import callbacks, deadletters, ids, outbox
from broker.runtime.outcome import Outcome
from broker.runtime.process import Runtime
from broker.runtime.retry import policy_for
from broker.runtime.statuses import finish_request, start_processing
from broker.store.db import transaction
from broker.store.models import OutboxRow, Request, RequestEvent

logger = logging.getLogger(__name__)

DISPATCHED_EVENT = "RequestDispatched"


def dispatch_remote(rt: Runtime, request_id: str, outbox_id: str | None, published: Any) -> Outcome:
    settings = rt.settings
    log = {"request_id": request_id, "outbox_id": outbox_id}
    with transaction(rt.factory) as session:
        request = session.get(Request, request_id)
        if request is None or outbox.is_finished(session, outbox_id):
            return Outcome.SKIPPED
        already = session.scalar(
            select(RequestEvent.id).where(
                RequestEvent.request_id == request_id, RequestEvent.event_type == DISPATCHED_EVENT
            )
        )
        if already is not None:
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
            "callbackUrl": f"{settings.callback_base_url.rstrip('/')}"
            f"/internal/requests/{request_id}/result",
            "callbackToken": _token(settings.callback_secrets(), request_id, dispatch_attempt),
        }
        attempts = 0
        if outbox_id is not None:
            stored = session.scalar(select(OutboxRow.attempts).where(OutboxRow.id == outbox_id))
            attempts = stored or 0
    try:
        if not settings.elsa_dispatch_url:
            raise RuntimeError("BROKER_ELSA_DISPATCH_URL is not set")
        response = requests.post(
            settings.elsa_dispatch_url, json=body, timeout=settings.http_timeout
        )
        if response.status_code >= 300:
            raise RuntimeError(f"Elsa answered HTTP {response.status_code}")
    except (requests.RequestException, RuntimeError) as error:
        _failed(rt, request_id, outbox_id, published, attempts, str(error))
        return Outcome.BUSY
    with transaction(rt.factory) as session:
        start_processing(session, request_id, None, message="Dispatched to Elsa")
        session.add(
            RequestEvent(
                request_id=request_id,
                event_type=DISPATCHED_EVENT,
                source="worker",
                message=f"Dispatched to {settings.elsa_dispatch_url}",
                properties={"definitionId": published.definition_id},
            )
        )
        outbox.mark_done(session, outbox_id)
    logger.info("request %s dispatched to the remote Elsa server", request_id, extra=log)
    return Outcome.DISPATCHED


def _token(secrets: tuple[str, ...], request_id: str, attempt: int) -> str | None:
    """The callback token of this attempt, minted with the current secret; None when callbacks
    are disabled (every callback would be refused)."""
    return callbacks.token_for(secrets[0], request_id, attempt) if secrets else None


def _failed(
    rt: Runtime, request_id: str, outbox_id: str | None, published: Any, attempts: int, error: str
) -> None:
    policy = policy_for(
        rt.settings,
        activity_policy=None,
        workflow_properties=published.document.get("customProperties") or {},
    )
    attempt = max(1, attempts)
    with transaction(rt.factory) as session:
        if outbox_id is None or policy.exhausted(attempt):
            finish_request(
                session,
                request_id,
                sub_status="Faulted",
                output=None,
                error=f"remote dispatch failed: {error}",
            )
            deadletters.record(
                session,
                dead_letter_id=ids.dead_letter_id_for("request", f"remote:{request_id}"),
                kind="request",
                reason="Exhausted",
                source_id=outbox_id,
                request_id=request_id,
                name=published.definition_id,
                error=error,
                attempts=attempt,
                data={"queue": published.queue},
            )
            outbox.mark_done(session, outbox_id)
            return
        delay = policy.delay(attempt + 1)
        outbox.postpone(session, outbox_id, delay=delay, error=error)
    logger.warning(
        "remote dispatch of request %s failed (%s); retry in %.1fs",
        request_id,
        error,
        delay,
        extra={"request_id": request_id},
    )
