"""Submitting a request: its row (Queued), its RequestSubmitted event and its outbox row, written
together in the caller's transaction, and the idempotency key that makes a retried POST answer the
first record instead of a second one. Functions take the caller's session and never commit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.errors import BadRequest, Conflict, RuntimePaused
from broker.names import DEFAULT_QUEUE, RUN_REQUEST
from broker.runtime import webhooks
from broker.runtime.outbox.pause import is_paused_cached
from broker.runtime.ports import OutboxMessage, PinnedWorkflow
from broker.runtime.requests import transitions as statuses
from broker.runtime.requests.activation import check_activation, pending_start
from broker.runtime.requests.queries import new_request_view, request_view
from broker.store.models import OutboxRow, OutboxState, Request, StepResult, table_of, utcnow
from broker.store.rows import insert_rows
from broker.telemetry import tracing

logger = logging.getLogger(__name__)

# A batch's request and outbox rows go in with one statement per table (``insert_rows``).
_REQUESTS = table_of(Request)
_OUTBOX = table_of(OutboxRow)
_STEP_RESULTS = table_of(StepResult)


@dataclasses.dataclass(frozen=True)
class Submission:
    """A validated ``POST /requests`` body and its idempotency key."""

    request_type: str
    keys: Mapping[str, str]
    payload: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    #: a one-off webhook endpoint for this request's terminal events
    callback_url: str | None = None
    #: the client's correlation id (``X-Correlation-ID``): the instance is correlated with it, and
    #: the Correlation activation strategies compare it (else the request's id is its correlation)
    correlation_id: str | None = None

    def body_hash(self) -> str:
        """SHA-256 of the canonical JSON of the body (what an idempotent retry must repeat)."""
        body: dict[str, Any] = {
            "requestType": self.request_type,
            "keys": dict(self.keys),
            "payload": self.payload,
        }
        if self.callback_url is not None:
            body["callbackUrl"] = self.callback_url
        canonical = json.dumps(
            body,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Submitted:
    """The outcome of a submission: a new record, or the earlier one an idempotency key names."""

    request_id: str
    created: bool
    view: dict[str, Any]
    outbox_ids: tuple[str, ...] = ()
    #: the same rows, for a fast path that sends them without reading them back
    messages: tuple[OutboxMessage, ...] = ()


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A new submission's rows, checked and built but not written yet (``write`` inserts them,
    many submissions' at once)."""

    request: dict[str, Any]
    event: dict[str, Any]
    outbox: dict[str, Any]
    #: the one-off webhook endpoint of a ``callbackUrl``: (url, signing secret)
    callback: tuple[str, str] | None
    submitted: Submitted
    #: the instance's pending start, when the client gave its correlation id
    pending: dict[str, Any] | None = None


def submit(
    session: Session,
    *,
    client_id: str,
    submission: Submission,
    workflow: PinnedWorkflow,
    dispatch_lease: float | None = None,
    callback_secret: str | None = None,
    source: str = "ingress",
) -> Submitted:
    """Record a new request (Queued), its RequestSubmitted event and its outbox row (and the
    one-off webhook endpoint of its ``callbackUrl``, signed with ``callback_secret``).

    With an idempotency key already used by this client, answers the earlier record when the body
    is the same and raises ``Conflict`` when it differs. Raises ``RuntimePaused`` while paused.

    ``dispatch_lease`` (seconds): the caller publishes the row right after the commit
    (``Publisher.publish_new``), so it is inserted already dispatched with that lease instead of
    pending; this saves the fast path a read and a write transaction. If the publish is lost
    (transport down, process killed after the commit), the relay republishes the row when the
    lease runs out, as for any dispatched row whose consumer did not finish it.

    ``source`` names the door in the audit event (``console`` for a console user's start).
    ``prepare`` and ``write`` are the same in two halves, for a caller that writes many
    submissions together (``broker.runtime.requests.group_commit``).
    """
    prepared = prepare(
        session,
        client_id=client_id,
        submission=submission,
        workflow=workflow,
        dispatch_lease=dispatch_lease,
        callback_secret=callback_secret,
        source=source,
    )
    if isinstance(prepared, Submitted):
        return prepared
    write(session, [prepared])
    return prepared.submitted


def prepare(
    session: Session,
    *,
    client_id: str,
    submission: Submission,
    workflow: PinnedWorkflow,
    dispatch_lease: float | None = None,
    callback_secret: str | None = None,
    source: str = "ingress",
    traceparent: str | None = None,
) -> Prepared | Submitted:
    """The checks and reads of ``submit``, and the rows it would write: answers the earlier
    record (``Submitted`` with ``created=False``) for an idempotent replay, else the new rows to
    hand to ``write`` in the same transaction. Raises what ``submit`` raises; writes nothing."""
    client_key = client_id.lower()
    body_hash = submission.body_hash()
    if submission.idempotency_key is not None:
        earlier = find_by_idempotency_key(session, client_id, submission.idempotency_key)
        if earlier is not None:
            if earlier.body_hash != body_hash:
                raise Conflict(
                    "Idempotency-Key was already used with a different body",
                    idempotencyKey=submission.idempotency_key,
                    correlationId=earlier.id,
                )
            logger.info(
                "idempotent replay of request %s",
                earlier.id,
                extra={"request_id": earlier.id, "client_id": client_id},
            )
            return Submitted(earlier.id, created=False, view=request_view(session, earlier))
    if is_paused_cached(session):
        raise RuntimePaused("The workflow runtime is paused; try again later")
    callback = None
    if submission.callback_url is not None:
        if callback_secret is None:
            raise BadRequest("this client may not name a callbackUrl", field="callbackUrl")
        callback = (submission.callback_url, callback_secret)
    request_id = str(uuid.uuid4())
    check_activation(
        session,
        definition_id=workflow.definition_id,
        # The registry's PublishedWorkflow reads it from options.activationStrategyType.
        strategy=getattr(workflow, "activation_strategy", "always"),
        correlation_id=submission.correlation_id,
    )
    now = utcnow()
    outbox_id = str(uuid.uuid4())
    queue = workflow.queue or DEFAULT_QUEUE
    # The submitter's trace context (``traceparent``: prepared in another thread under group
    # commit), so the worker's step continues the ingress's trace.
    args = tracing.stamp({"request_id": request_id}, traceparent)
    values: dict[str, Any] = {
        "id": request_id,
        "client_id": client_id,
        "client_key": client_key,
        "request_type": submission.request_type,
        "request_type_key": submission.request_type.lower(),
        "keys": dict(submission.keys),
        "payload": submission.payload,
        "status": statuses.INITIAL.value,
        "idempotency_key": submission.idempotency_key,
        "body_hash": body_hash,
        "definition_id": workflow.definition_id,
        "definition_version": workflow.version,
        "definition_version_id": workflow.version_id,
        "submitted_at": now,
        "updated_at": now,
    }
    event = statuses.event_row(
        request_id,
        statuses.SUBMITTED_EVENT,
        source=source,
        message=f"Submitted by {client_id}",
        properties={
            "requestType": submission.request_type,
            "definitionId": workflow.definition_id,
            "version": workflow.version,
            "idempotencyKey": submission.idempotency_key,
        },
        now=now,
    )
    row: dict[str, Any] = {
        "id": outbox_id,
        "task_name": RUN_REQUEST,
        "queue": queue,
        "args": args,
        "state": OutboxState.PENDING.value,
        "attempts": 0,
        "request_id": request_id,
        "available_at": now,
        "created_at": now,
        "dispatched_at": None,
        "lease_expires_at": None,
    }
    if dispatch_lease is not None:
        # What mark_dispatched would record after the publish, written with the row itself.
        row["state"] = OutboxState.DISPATCHED.value
        row["attempts"] = 1
        row["dispatched_at"] = now
        row["lease_expires_at"] = now + dt.timedelta(seconds=dispatch_lease)
    message = OutboxMessage(outbox_id, RUN_REQUEST, queue, args, request_id)
    submitted = Submitted(
        request_id,
        created=True,
        view=new_request_view(values),
        outbox_ids=(outbox_id,),
        messages=(message,),
    )
    pending = None
    if submission.correlation_id is not None:
        pending = pending_start(request_id, submission.correlation_id, now)
    return Prepared(values, event, row, callback, submitted, pending)


def write(session: Session, batch: Sequence[Prepared]) -> None:
    """Insert the rows of prepared submissions: one multi-row statement per table."""
    if not batch:
        return
    insert_rows(session, _REQUESTS, [prepared.request for prepared in batch])
    statuses.add_events(session, [prepared.event for prepared in batch])
    insert_rows(session, _OUTBOX, [prepared.outbox for prepared in batch])
    pending = [prepared.pending for prepared in batch if prepared.pending is not None]
    if pending:
        insert_rows(session, _STEP_RESULTS, pending)
    for prepared in batch:
        if prepared.callback is not None:
            url, secret = prepared.callback
            webhooks.add_callback(
                session,
                client_id=prepared.request["client_id"],
                request_id=prepared.submitted.request_id,
                url=url,
                secret=secret,
            )
    if any(prepared.callback is not None for prepared in batch):
        session.flush()
    for prepared in batch:
        logger.info(
            "accepted request %s of type %s",
            prepared.submitted.request_id,
            prepared.request["request_type"],
            extra={
                "request_id": prepared.submitted.request_id,
                "client_id": prepared.request["client_id"],
                "request_type": prepared.request["request_type"],
            },
        )


def find_by_idempotency_key(session: Session, client_id: str, key: str) -> Request | None:
    return session.scalars(
        select(Request).where(
            Request.client_key == client_id.lower(), Request.idempotency_key == key
        )
    ).one_or_none()
