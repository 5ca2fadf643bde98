"""``/requests``: submit, look up, list, audit history, cancel (the client's own records only)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify, request
from sqlalchemy.exc import IntegrityError

from broker.errors import MissingKeys, UnexpectedKeys, UnknownRequestType
from broker.ingress import metrics, rate_limits
from broker.ingress.auth import authenticate
from broker.ingress.context import services, transaction
from broker.ingress.schemas import check_keys, list_query, parse_submission, read_json
from broker.ingress.webhooks import outbound
from broker.rate_limits import SUBMISSIONS
from broker.runtime import cancellation, request_queries, webhooks
from broker.runtime import submission as runtime_submission
from broker.runtime.ports import PinnedWorkflow
from broker.runtime.submission import Submission, Submitted

logger = logging.getLogger(__name__)

bp = Blueprint("requests", __name__)


@bp.post("/requests")
def submit() -> tuple[Response, int] | tuple[Response, int, dict[str, str]]:
    svc = services()
    client = authenticate()
    rate_limits.enforce(SUBMISSIONS, client)
    submission = parse_submission(read_json(svc.settings), request.headers.get("Idempotency-Key"))
    clients, registry = svc.client_directory(), svc.workflow_directory()
    rule = clients.rule_for(client.client_id, submission.request_type)
    if rule is None:
        metrics.REJECTED.labels(reason="unknown_request_type").inc()
        raise UnknownRequestType(submission.request_type, client.client_id)
    missing, unexpected = check_keys(
        submission.keys, tuple(rule.required_keys), rule.allow_additional_keys
    )
    if missing:
        metrics.REJECTED.labels(reason="missing_keys").inc()
        raise MissingKeys(missing)
    if unexpected:
        metrics.REJECTED.labels(reason="unexpected_keys").inc()
        raise UnexpectedKeys(unexpected)
    workflow = registry.for_request_type(rule.request_type)
    if workflow is None:
        logger.warning(
            "request type %s is allowed for %s but no workflow implements it",
            rule.request_type,
            client.client_id,
            extra={"client_id": client.client_id, "request_type": rule.request_type},
        )
        raise UnknownRequestType(submission.request_type, client.client_id)
    secret = None
    if submission.callback_url is not None:
        secret = webhooks.callback_secret_of(client)
        webhooks.check_url(submission.callback_url, outbound(), field="callbackUrl")
    lease = svc.publisher.dispatch_lease
    outcome = _submit(client.client_id, submission, workflow, lease, secret)
    if not outcome.created:
        return jsonify(outcome.view), 200
    metrics.record_accepted(rule.request_type)
    try:
        svc.publisher.publish_new(outcome.messages)
    except Exception:
        # Committed is accepted: the relay publishes what the fast path could not.
        logger.exception(
            "fast-path publish failed for request %s; the relay will retry",
            outcome.request_id,
            extra={"request_id": outcome.request_id},
        )
    body = {"correlationId": outcome.request_id, "status": outcome.view["status"]}
    return jsonify(body), 202, {"Location": f"/requests/{outcome.request_id}"}


def _submit(
    client_id: str,
    submission: Submission,
    workflow: PinnedWorkflow,
    lease: float | None,
    callback_secret: str | None = None,
) -> Submitted:
    """Record the submission; with a ``lease``, its row is inserted already dispatched because
    the caller publishes it right after the commit (see ``runtime.submission.submit``)."""
    try:
        with transaction() as session:
            return runtime_submission.submit(
                session,
                client_id=client_id,
                submission=submission,
                workflow=workflow,
                dispatch_lease=lease,
                callback_secret=callback_secret,
            )
    except IntegrityError:
        if submission.idempotency_key is None:
            raise
        # Another submission with this key committed between our lookup and our insert: the
        # unique constraint stopped ours; the second pass finds theirs (200 or 409).
        logger.info(
            "idempotency key raced for client %s; answering the winner",
            client_id,
            extra={"client_id": client_id},
        )
    with transaction() as session:
        return runtime_submission.submit(
            session,
            client_id=client_id,
            submission=submission,
            workflow=workflow,
            dispatch_lease=lease,
            callback_secret=callback_secret,
        )


@bp.get("/requests")
def list_requests() -> Response:
    client = authenticate()
    query = list_query()
    with transaction(write=False) as session:
        items, cursor = request_queries.list_requests(session, client.client_id, query)
    return jsonify({"items": items, "next": cursor})


@bp.get("/requests/<request_id>")
def get_request(request_id: str) -> Response:
    client = authenticate()
    with transaction(write=False) as session:
        view = request_queries.request_view(
            session, request_queries.get_owned(session, request_id, client.client_id)
        )
    return jsonify(view)


@bp.get("/requests/<request_id>/events")
def list_events(request_id: str) -> Response:
    client = authenticate()
    with transaction(write=False) as session:
        events = request_queries.list_events(session, request_id, client.client_id)
    return jsonify(events)


@bp.post("/requests/<request_id>/cancel")
def cancel(request_id: str) -> tuple[Response, int]:
    client = authenticate()
    with transaction() as session:
        record = cancellation.cancel(
            session, request_id, client_id=client.client_id, source="ingress"
        )
        body = {"correlationId": record.id, "status": record.status}
    return jsonify(body), 202
