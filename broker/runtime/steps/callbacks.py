"""Callback tokens and signatures of remote execution (the Standard Webhooks scheme)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from broker.errors import BadRequest, Conflict, NotFound, Unauthenticated
from broker.runtime.failures import dead_letters
from broker.runtime.requests import transitions as statuses
from broker.runtime.requests.transitions import finish_request
from broker.store.models import Request, RequestEvent, RequestStatus, utcnow

#: how far a callback's timestamp may be from the broker's clock (fixed by the webhooks package)
TOLERANCE = dt.timedelta(minutes=5)
TOKEN_PREFIX = "whsec_"  # noqa: S105 (the format's prefix, not a secret)
HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
#: the audit event of an accepted remote callback
CALLBACK_RECEIVED = "CallbackReceived"


def current_attempt(session: Session, request_id: str) -> int | None:
    """The dispatch attempt a callback for the request must be signed for; None when the request
    is unknown or was never dispatched to a remote executor (no token exists)."""
    attempt: int | None = session.scalar(
        select(Request.remote_attempt).where(Request.id == request_id)
    )
    return attempt


def token_for(secret: str, request_id: str, attempt: int) -> str:
    """The callback token of one dispatch attempt of one request, minted under ``secret``."""
    if not secret:
        raise ValueError("the callback secret is empty")
    digest = hmac.new(secret.encode(), f"{request_id}:{attempt}".encode(), hashlib.sha256).digest()
    return TOKEN_PREFIX + base64.b64encode(digest).decode("ascii")


def sign(
    token: str,
    body: bytes,
    *,
    msg_id: str | None = None,
    timestamp: dt.datetime | None = None,
) -> dict[str, str]:
    """The three Standard Webhooks headers of a callback ``body`` signed with ``token`` (what a
    remote executor sends; the broker's tests use it as one)."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    timestamp = timestamp or dt.datetime.now(dt.UTC)
    signature = Webhook(token).sign(msg_id, timestamp, body.decode("utf-8"))
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signature,
    }


def verify(
    secrets: Sequence[str],
    request_id: str,
    attempt: int,
    body: bytes,
    headers: Mapping[str, str],
) -> str:
    """The ``webhook-id`` of a callback whose signature holds under the token of ``request_id``'s
    current dispatch ``attempt`` minted with any of ``secrets``; ``Unauthenticated`` otherwise
    (no secret, a missing header, a timestamp out of the tolerance, a signature that matches no
    live token). The message names the reason, never a secret."""
    live = [s for s in secrets if s]
    if not live:
        raise Unauthenticated("Callbacks are disabled (no callback secret is configured)")
    given = {name: headers.get(name, "") for name in HEADERS}
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise Unauthenticated(f"Missing callback signature headers: {', '.join(missing)}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unauthenticated("Callback body is not UTF-8") from exc
    for secret in live:
        try:
            Webhook(token_for(secret, request_id, attempt)).verify(text, given, json_parse=False)
        except WebhookVerificationError as exc:
            if "timestamp" in str(exc).lower():
                # The same for every token: the clock check comes before the signature.
                raise Unauthenticated(f"Callback refused: {exc}") from exc
        except ValueError as exc:  # a malformed signature list (binascii.Error included)
            raise Unauthenticated("Malformed webhook-signature header") from exc
        else:
            return given["webhook-id"]
    raise Unauthenticated("Invalid callback signature")


# Results ----------------------------------------------------------------------------------------


def complete_from_callback(
    session: Session,
    request_id: str,
    status: str,
    result: Any,
    error: str | None,
    *,
    attempt: int | None = None,
    webhook_id: str | None = None,
) -> Request:
    """Finish a remotely executed request from the executor's callback, in the caller's
    transaction. ``NotFound`` for an unknown request, ``Conflict`` (409) when it is already
    terminal (a late or duplicate callback changes nothing), ``BadRequest`` for a bad status.

    The internal listener passes the dispatch ``attempt`` the callback's signature was verified
    for and its ``webhook_id``: ``Unauthenticated`` when the request has been dispatched again
    since, or when a callback with that id was already accepted (a replay). The id is kept in the
    CallbackReceived audit event."""
    if status not in (RequestStatus.COMPLETED.value, RequestStatus.FAULTED.value):
        raise BadRequest("status must be Completed or Faulted", field="status")
    request = session.get(Request, request_id)
    if request is None:
        raise NotFound(f"Request '{request_id}' not found")
    if attempt is not None and request.remote_attempt != attempt:
        raise Unauthenticated("Callback of an earlier dispatch attempt")
    if webhook_id is not None and webhook_id in accepted_webhook_ids(session, request_id):
        raise Unauthenticated("Callback already received (replayed webhook-id)")
    now = utcnow()
    sub_status = "Finished" if status == RequestStatus.COMPLETED.value else "Faulted"
    set_to = finish_request(
        session,
        request_id,
        sub_status=sub_status,
        output=result,
        error=error,
        now=now,
        source="callback",
    )
    if set_to is None:
        session.refresh(request)
        raise Conflict(f"Request '{request_id}' is already {request.status}", status=request.status)
    if set_to == RequestStatus.FAULTED.value:
        # Replayable: the replay dispatches the request to the remote executor again.
        dead_letters.record_fault(
            session,
            key=f"remote:{request_id}:callback:{request.remote_attempt or 0}",
            reason=dead_letters.FAULTED,
            error=error,
            request_id=request_id,
            instance_id=None,
            client_key=request.client_key,
        )
    statuses.note(
        session,
        request_id,
        CALLBACK_RECEIVED,
        source="callback",
        message=f"Remote executor reported {status}",
        properties={"status": status, "attempt": attempt, "webhookId": webhook_id},
        now=now,
    )
    session.flush()
    session.refresh(request)
    return request


def accepted_webhook_ids(session: Session, request_id: str) -> set[str]:
    """The ``webhook-id`` of every callback accepted for ``request_id`` (at most one per dispatch
    attempt, as an accepted callback finishes the request)."""
    found = session.scalars(
        select(RequestEvent.properties).where(
            RequestEvent.request_id == request_id,
            RequestEvent.event_type == CALLBACK_RECEIVED,
        )
    )
    return {str(p["webhookId"]) for p in found if p and p.get("webhookId")}
