"""The internal listener: remote-executor callbacks (signed), health, readiness and metrics
(docs/design.md, section 1)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify, request

from broker.adapters import health
from broker.errors import PayloadTooLarge, Unauthenticated
from broker.ingress import metrics
from broker.ingress.schemas import parse_callback
from broker.runtime.steps import callbacks
from broker.settings import Settings
from broker.telemetry.metrics import record_finished
from broker.web.context import services, transaction
from broker.web.inputs import read_json

logger = logging.getLogger(__name__)

bp = Blueprint("internal", __name__)


@bp.post("/internal/requests/<request_id>/result")
def record_result(request_id: str) -> tuple[str, int]:
    svc = services()
    try:
        attempt, webhook_id = _authenticate(svc.settings, request_id)
        status, result, error = parse_callback(read_json(svc.settings))
        with transaction() as session:
            finished = callbacks.complete_from_callback(
                session,
                request_id,
                status.value,
                result,
                error,
                attempt=attempt,
                webhook_id=webhook_id,
            )
            request_type, submitted_at = finished.request_type, finished.submitted_at
            finished_at = finished.completed_at
    except Unauthenticated as refused:
        metrics.CALLBACKS.labels(outcome="unauthenticated").inc()
        logger.warning(
            "callback for request %s refused: %s",
            request_id,
            refused.message,
            extra={"request_id": request_id},
        )
        raise
    except Exception:
        metrics.CALLBACKS.labels(outcome="refused").inc()
        raise
    # Counted once committed, as the worker counts the requests it finishes itself.
    record_finished(request_type, status.value, submitted_at, finished_at)
    metrics.CALLBACKS.labels(outcome=status.value.lower()).inc()
    logger.info(
        "callback finished request %s as %s", request_id, status, extra={"request_id": request_id}
    )
    return "", 204


def _authenticate(settings: Settings, request_id: str) -> tuple[int, str]:
    """The dispatch attempt and ``webhook-id`` of a callback whose signature holds; raises
    ``Unauthenticated`` before the body is parsed or anything is written."""
    limit = settings.max_body_bytes
    raw = request.get_data(cache=True)  # bounded by MAX_CONTENT_LENGTH; read_json reuses it
    if len(raw) > limit:
        raise PayloadTooLarge(f"Request body exceeds {limit} bytes", limit=limit)
    with transaction(write=False) as session:
        attempt = callbacks.current_attempt(session, request_id)
    if attempt is None:  # unknown, or never dispatched to a remote executor: no token exists
        raise Unauthenticated("No callback is expected for this request")
    headers = {name: request.headers.get(name, "") for name in callbacks.HEADERS}
    webhook_id = callbacks.verify(settings.callback_secrets(), request_id, attempt, raw, headers)
    return attempt, webhook_id


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify(health.liveness())


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    svc = services()
    ready = health.readiness(svc.settings, svc.session_factory)
    return jsonify(ready.body()), ready.status


@bp.get("/metrics")
def prometheus_metrics() -> Response:
    payload, content_type = metrics.exposition(services().session_factory)
    return Response(payload, mimetype=None, content_type=content_type)
