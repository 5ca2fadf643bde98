"""The ingress apps: the mTLS client and admin API, and the internal listener, assembled from
the parts ``broker.wiring.web`` built; errors answer JSON everywhere."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, g, jsonify, request
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from broker.errors import (
    BrokerError,
    PayloadTooLarge,
    RateLimited,
    StoreUnavailable,
)
from broker.ingress import metrics
from broker.ingress.auth import PeerCertificateMiddleware, authenticate
from broker.ingress.bodies import BodyLimit
from broker.settings import Settings
from broker.telemetry import tracing
from broker.web.context import EXTENSION, Services
from broker.web.inputs import refuse_nul_in_url

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = "5"
#: endpoints of the public listener that need no allowlisted client (the handshake still runs)
OPEN_ENDPOINTS = frozenset({"openapi.document_view"})


def public_app(svc: Services) -> Flask:
    """The mTLS client and admin API: requests, events, request types, admin, OpenAPI.

    Every shared part comes in ``svc`` (built by ``broker.wiring.web``): the trust store and the
    rate limiter in its ``extra``."""
    from broker.ingress import openapi
    from broker.ingress.routes import (
        admin,
        events,
        http_triggers,
        request_types,
        requests,
        webhook_events,
        webhooks,
    )

    app = _base_app("public", svc.settings, svc)
    for blueprint in (
        requests.bp,
        events.bp,
        http_triggers.bp,
        request_types.bp,
        webhooks.bp,
        webhook_events.bp,
        admin.bp,
        openapi.bp,
    ):
        app.register_blueprint(blueprint)

    @app.before_request
    def _authenticate() -> None:
        # Every path, even an unknown one, answers 401 to a stranger before 404 or 405.
        if request.endpoint not in OPEN_ENDPOINTS:
            authenticate()
        refuse_nul_in_url()

    app.wsgi_app = PeerCertificateMiddleware(app.wsgi_app, svc.settings)  # type: ignore[method-assign]
    return app


def internal_app(svc: Services) -> Flask:
    """The internal listener: ``/internal/requests/{id}/result``, probes and ``/metrics``."""
    from broker.ingress.routes import internal

    app = _base_app("internal", svc.settings, svc)
    app.register_blueprint(internal.bp)
    app.before_request(refuse_nul_in_url)
    return app


def _base_app(listener: str, settings: Settings, svc: Services) -> Flask:
    from broker.adapters.locks import warn_if_local_locks

    warn_if_local_locks(settings)
    app = Flask(f"broker.ingress.{listener}")
    app.config.update(
        # One byte over the limit: werkzeug stops a chunked body silently at the maximum, so
        # reading limit + 1 bytes is how ``read_json`` tells "too large" from "exactly full".
        MAX_CONTENT_LENGTH=settings.max_body_bytes + 1,
        TRAP_HTTP_EXCEPTIONS=False,
        PROPAGATE_EXCEPTIONS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION] = svc
    app.url_map.strict_slashes = False
    _register_error_handlers(app, settings)
    # OTEL_* turns traces on (the otel extra); a server span per request, continuing the caller's.
    tracing.configure(tracing.SERVICE)
    tracing.instrument_flask(app, listener)
    # Every body is read whole (or refused 413) before the app runs: see ``bodies``.
    limited = BodyLimit(app.wsgi_app, settings.max_body_bytes, listener)
    app.wsgi_app = limited  # type: ignore[method-assign]

    @app.after_request
    def _count(response: Response) -> Response:
        metrics.RESPONSES.labels(listener=listener, status=f"{response.status_code // 100}xx").inc()
        return response

    return app


def _register_error_handlers(app: Flask, settings: Settings) -> None:
    @app.errorhandler(BrokerError)
    def broker_error(error: BrokerError) -> Response:
        if error.status >= 500 and error.status != 503:
            logger.error("internal error: %s", error, exc_info=error)
            return _json({"error": "Internal server error", "code": "internal_error"}, 500)
        response = _json(error.to_dict(), error.status)
        if error.status == 503:
            response.headers["Retry-After"] = RETRY_AFTER_SECONDS
        if isinstance(error, RateLimited):
            response.headers["Retry-After"] = str(error.retry_after)
        _log_client_error(error.status, error.message)
        return response

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        if status == 413:
            limit = settings.max_body_bytes
            return _json(
                PayloadTooLarge(f"Request body exceeds {limit} bytes", limit=limit).to_dict(), 413
            )
        code = (error.name or "error").lower().replace(" ", "_").replace("'", "")
        response = _json({"error": error.description or error.name, "code": code}, status)
        headers = dict(error.get_headers())
        for header in ("Allow", "Retry-After"):
            value = headers.get(header)
            if value:
                response.headers[header] = value
        return response

    @app.errorhandler(sa_exc.OperationalError)
    @app.errorhandler(sa_exc.InterfaceError)
    @app.errorhandler(sa_exc.TimeoutError)
    def store_error(error: Exception) -> Response:
        logger.warning("database unavailable: %s", error)
        return broker_error(StoreUnavailable("The database is unavailable; try again later"))

    @app.errorhandler(Exception)
    def unexpected(error: Exception) -> Response:
        logger.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
        return _json({"error": "Internal server error", "code": "internal_error"}, 500)


def _json(body: dict[str, Any], status: int) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response


def _log_client_error(status: int, message: str) -> None:
    client = g.get("client")
    logger.info(
        "%s %s answered %d: %s",
        request.method,
        request.path,
        status,
        message,
        extra={"client_id": getattr(client, "client_id", None)},
    )
