"""``/requests``: submit, look up, list, audit history, cancel (the client's own records only)."""

from __future__ import annotations

import functools
import logging
import threading

from flask import Blueprint, Response, jsonify, request

from broker.errors import MissingKeys, UnexpectedKeys, UnknownRequestType
from broker.ingress import metrics, rate_limits
from broker.ingress.auth import authenticate
from broker.ingress.routes.webhooks import outbound
from broker.ingress.schemas import check_keys, list_query, parse_submission
from broker.rates import SUBMISSIONS
from broker.runtime import webhooks
from broker.runtime.requests import cancellation
from broker.runtime.requests import queries as request_queries
from broker.runtime.requests import submission as runtime_submission
from broker.runtime.requests.group_commit import Committer
from broker.telemetry import tracing
from broker.web.context import Services, services, transaction
from broker.web.inputs import read_json

logger = logging.getLogger(__name__)

bp = Blueprint("requests", __name__)

COMMITTER = "committer"  # the key of the group committer in ``Services.extra``
_committer_lock = threading.Lock()


@bp.post("/requests")
def submit() -> tuple[Response, int] | tuple[Response, int, dict[str, str]]:
    svc = services()
    client = authenticate()
    rate_limits.enforce(SUBMISSIONS, client)
    submission = parse_submission(
        read_json(svc.settings),
        request.headers.get("Idempotency-Key"),
        correlation_id=request.headers.get("X-Correlation-ID"),
    )
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
    with tracing.span("commit submission", attributes={"broker.request_type": rule.request_type}):
        outcome = committer(svc).submit(
            functools.partial(
                runtime_submission.prepare,
                client_id=client.client_id,
                submission=submission,
                workflow=workflow,
                dispatch_lease=lease,
                callback_secret=secret,
                traceparent=tracing.current_traceparent(),
            ),
            idempotency=(
                None
                if submission.idempotency_key is None
                else (client.client_id, submission.idempotency_key)
            ),
        )
        tracing.set_attribute("broker.request_id", outcome.request_id)
    if not outcome.created:
        return jsonify(outcome.view), 200
    metrics.record_accepted(rule.request_type)
    body = {"correlationId": outcome.request_id, "status": outcome.view["status"]}
    return jsonify(body), 202, {"Location": f"/requests/{outcome.request_id}"}


def committer(svc: Services) -> Committer:
    """The app's group committer of submissions (one per app, so one per worker process):
    concurrent submissions share a transaction, and their fast-path messages go out together
    after its commit (``broker.runtime.requests.group_commit``)."""
    found = svc.extra.get(COMMITTER)
    if found is None:
        with _committer_lock:
            found = svc.extra.get(COMMITTER)
            if found is None:
                found = svc.extra[COMMITTER] = Committer(
                    svc.session_factory,
                    max_batch=svc.settings.submit_batch_max,
                    window=svc.settings.submit_batch_window,
                    publish=svc.publisher.publish_new,
                )
    assert isinstance(found, Committer)
    return found


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
