"""The ingress app factories: the mTLS client and admin API, and the internal listener, built
from a ``broker.runtime.wiring.Runtime``; errors answer JSON everywhere.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, g, jsonify, request
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.exceptions import HTTPException

from broker.errors import (
    BadRequest,
    BrokerError,
    PayloadTooLarge,
    RateLimited,
    StoreUnavailable,
)
from broker.ingress import metrics
from broker.ingress.auth import PeerCertificateMiddleware, TrustStore, authenticate
from broker.ingress.bodies import BodyLimit
from broker.ingress.buckets import RateLimiter, make_rate_limiter
from broker.ingress.context import EXTENSION, ClientDirectory, Services, WorkflowDirectory
from broker.ingress.rate_limits import LIMITER
from broker.runtime.ports import NullPublisher, Publisher
from broker.runtime.wiring import Runtime
from broker.safety.bounded import unstorable_text
from broker.settings import Settings
from broker.telemetry import tracing

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = "5"
#: endpoints of the public listener that need no allowlisted client (the handshake still runs)
OPEN_ENDPOINTS = frozenset({"openapi.document_view"})


def create_public_app(
    settings: Settings,
    *,
    clients: ClientDirectory | None = None,
    registry: WorkflowDirectory | None = None,
    session_factory: sessionmaker[Session] | None = None,
    publisher: Publisher | None = None,
    rate_limiter: RateLimiter | None = None,
    runtime: Runtime | None = None,
) -> Flask:
    """The mTLS client and admin API: requests, events, request types, admin, OpenAPI.

    The shared parts come from ``runtime`` (its fast-path publisher too); without one, a runtime
    is built from ``settings`` and the publisher is a null one. Keyword parts override."""
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

    rt = _runtime(settings, runtime, session_factory)
    factory = session_factory or rt.factory
    if clients is None:
        clients = rt.clients
        _sync_webhooks(settings, factory, clients)
    # Submissions pin the version the ingress sees: the runtime's registry watches saved changes.
    registry = registry if registry is not None else rt.registry
    app = _base_app(
        "public",
        settings,
        Services(
            settings=settings,
            session_factory=factory,
            publisher=publisher or _publisher(runtime),
            clients=clients,
            registry=registry,
            extra={
                "trust_store": TrustStore(settings.tls_client_ca),
                LIMITER: rate_limiter or make_rate_limiter(settings),
            },
        ),
    )
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

    app.wsgi_app = PeerCertificateMiddleware(app.wsgi_app, settings)  # type: ignore[method-assign]
    return app


def refuse_nul_in_url() -> None:
    """Raise ``BadRequest`` naming the path or query parameter that holds a NUL character.

    No id, name or filter may hold one, and PostgreSQL cannot even compare a text with it: the
    lookup would fail as an internal error instead of finding nothing.
    """
    fields = [*(request.view_args or {}).items(), *request.args.items(multi=True)]
    for field, value in fields:
        problem = unstorable_text(str(field)) or unstorable_text(str(value))
        if problem is not None:
            raise BadRequest(f"{field} must not contain {problem}", field=str(field))


def create_internal_app(
    settings: Settings,
    *,
    session_factory: sessionmaker[Session] | None = None,
    publisher: Publisher | None = None,
    runtime: Runtime | None = None,
) -> Flask:
    """The internal listener: ``/internal/requests/{id}/result``, probes and ``/metrics``."""
    from broker.ingress.routes import internal

    factory = session_factory or _runtime(settings, runtime, session_factory).factory
    app = _base_app(
        "internal",
        settings,
        Services(
            settings=settings,
            session_factory=factory,
            publisher=publisher or NullPublisher(),  # it publishes nothing
        ),
    )
    app.register_blueprint(internal.bp)
    app.before_request(refuse_nul_in_url)
    return app


def _sync_webhooks(settings: Settings, factory: sessionmaker[Session], clients: Any) -> None:
    """Bring clients.json's webhook endpoints into the database at start (beat keeps them in
    step afterwards); a database that is down only delays it."""
    from broker.outbound.http_client import OutboundHttp
    from broker.runtime import webhooks
    from broker.store import db

    try:
        with db.transaction(factory) as session, OutboundHttp(settings) as http:
            webhooks.sync_configured(session, clients.clients(), http)
    except (sa_exc.SQLAlchemyError, StoreUnavailable) as exc:
        logger.warning("clients.json webhooks not synced at start: %s", exc)


def _runtime(
    settings: Settings, runtime: Runtime | None, factory: sessionmaker[Session] | None
) -> Runtime:
    """The given runtime, or one built from ``settings`` (around ``factory`` when given)."""
    return runtime if runtime is not None else Runtime(settings, factory=factory)


def _publisher(runtime: Runtime | None) -> Publisher:
    """A runtime's fast-path publisher; without a runtime, a null one (the relay publishes)."""
    return runtime.web_publisher if runtime is not None else NullPublisher()


def _base_app(listener: str, settings: Settings, svc: Services) -> Flask:
    from broker.runtime.outbox.locks import warn_if_local_locks

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
