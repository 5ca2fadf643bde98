"""The internal listener: remote-executor callbacks, health, readiness and metrics.

Plain HTTP on loopback by default. The callback endpoint authenticates with a shared secret
compared in constant time; an empty configured secret rejects every callback.
"""

from __future__ import annotations

import hmac
import logging

from flask import Blueprint, Response, jsonify, request
from kombu.connection import Connection
from sqlalchemy import text

from broker.errors import Unauthenticated
from broker.ingress import metrics
from broker.ingress.context import services, transaction
from broker.ingress.schemas import parse_callback, read_json
from broker.metrics import record_finished
from broker.runtime import runner
from broker.runtime.celery_config import transport_options

logger = logging.getLogger(__name__)

bp = Blueprint("internal", __name__)

READY_TIMEOUT = 2.0  # seconds each readiness probe may take


@bp.post("/internal/requests/<request_id>/result")
def record_result(request_id: str) -> tuple[str, int]:
    svc = services()
    expected = svc.settings.resolved_callback_secret()
    given = request.headers.get("X-Callback-Secret", "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        metrics.CALLBACKS.labels(outcome="unauthenticated").inc()
        logger.warning(
            "callback for request %s with a wrong or missing secret",
            request_id,
            extra={"request_id": request_id},
        )
        raise Unauthenticated("Invalid callback secret")
    status, result, error = parse_callback(read_json(svc.settings))
    try:
        with transaction() as session:
            finished = runner.complete_from_callback(
                session, request_id, status.value, result, error
            )
            request_type, submitted_at = finished.request_type, finished.submitted_at
            finished_at = finished.completed_at
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


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    svc = services()
    checks: dict[str, str] = {}
    try:
        with transaction(write=False) as session:
            session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        checks["database"] = "down"
    try:
        with Connection(  # type: ignore[no-untyped-call]
            svc.settings.queue_url,
            connect_timeout=READY_TIMEOUT,
            transport_options=transport_options(svc.settings),
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=READY_TIMEOUT)
        checks["transport"] = "ok"
    except Exception as exc:
        logger.warning("readiness: transport unreachable: %s", exc)
        checks["transport"] = "down"
    down = sorted(name for name, state in checks.items() if state != "ok")
    if down:
        body = {
            "status": "unavailable",
            "down": down,
            "checks": checks,
            "error": f"Not ready: {', '.join(down)} unreachable",
        }
        return jsonify(body), 503
    return jsonify({"status": "ok", "checks": checks}), 200


@bp.get("/metrics")
def prometheus_metrics() -> Response:
    payload, content_type = metrics.exposition(services().session_factory)
    return Response(payload, mimetype=None, content_type=content_type)
