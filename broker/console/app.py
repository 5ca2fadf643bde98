"""The console listener's app, assembled from the parts ``broker.wiring.web`` built."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from flask import Flask, Response, g, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from broker.adapters import health
from broker.adapters.buckets import RateLimiter
from broker.console import auth, forms, identity, pages, request_types, sign_in_limits, studio
from broker.console.tokens import derive_key
from broker.errors import BrokerError, StoreUnavailable
from broker.telemetry import tracing
from broker.web.context import EXTENSION as SERVICES
from broker.web.context import Services
from broker.web.inputs import refuse_nul_in_url

logger = logging.getLogger(__name__)

SESSION_COOKIE = "broker_console_session"
#: endpoints that need no identification (files; probes)
OPEN_ENDPOINTS = frozenset(
    {
        "static",
        "studio.framework",
        "studio.content",
        "studio.studio_styles",
        "studio.app_settings",
        "studio.mermaid",
        "studio.favicon",
        "healthz",
        "readyz",
    }
)


def console_app(
    context: auth.ConsoleContext,
    svc: Services,
    *,
    secret: str,
    sign_in_limiter: RateLimiter | None,
) -> Flask:
    """The console: Studio, the console pages, identity and (when present) the Elsa API.

    Every shared part comes from ``broker.wiring.web``: the routes' ``context``, the Elsa API's
    ``svc`` (the ingress's shape), the resolved console ``secret`` and the sign-in limiter."""
    settings = svc.settings
    factory = context.session_factory
    app = Flask("broker.console", static_url_path="/console-static")
    app.config.update(
        SECRET_KEY=derive_key(secret, "console-session"),
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=bool(settings.console_tls_cert),
        PERMANENT_SESSION_LIFETIME=settings.console_refresh_ttl,
        WTF_CSRF_CHECK_DEFAULT=False,  # checked by the forms that a session can post
        WTF_CSRF_TIME_LIMIT=None,  # as long as the session
        MAX_CONTENT_LENGTH=settings.max_body_bytes,
        TRAP_HTTP_EXCEPTIONS=False,
        PROPAGATE_EXCEPTIONS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.strict_slashes = False
    # As Elsa's routing: an empty segment matches no route (``/workflow-definitions//execute`` is
    # 404), never a neighbour's after the slashes are merged.
    app.url_map.merge_slashes = False
    app.extensions[sign_in_limits.EXTENSION] = sign_in_limiter
    app.extensions[auth.EXTENSION] = context
    # The Elsa API reaches the database, registry and publisher the way the ingress routes do.
    app.extensions[SERVICES] = svc
    tracing.configure(tracing.SERVICE)
    tracing.instrument_flask(app, "console")
    forms.csrf.init_app(app)
    for blueprint in (studio.bp, identity.bp, pages.bp, request_types.bp):
        app.register_blueprint(blueprint)
    api = _api_blueprint()
    if api is not None:
        app.register_blueprint(api)
    if settings.console_cors_origins:
        from flask_cors import CORS

        CORS(
            app,
            resources={r"/elsa/api/*": {"origins": list(settings.console_cors_origins)}},
            allow_headers=["Authorization", "Content-Type"],
            expose_headers=["Content-Disposition"],
            max_age=600,
        )

    @app.get("/healthz")
    def healthz() -> Response:
        return jsonify(health.liveness())

    @app.get("/readyz")
    def readyz() -> tuple[Response, int]:
        ready = health.readiness(settings, factory)
        return jsonify(ready.body()), ready.status

    @app.before_request
    def _identify() -> None:
        if request.endpoint not in OPEN_ENDPOINTS:
            auth.identify()
        # No id, name or filter may hold a NUL: refused here, as on the ingress, for every route.
        refuse_nul_in_url()

    @app.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if response.mimetype == "text/html":
            # Pages carry access tokens and CSRF tokens: never cached, never framed.
            response.headers["Cache-Control"] = "no-store"
            response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    _register_error_handlers(app)
    return app


def _api_blueprint() -> Any:
    """``broker.console.api.blueprint`` when that package is installed, else None."""
    try:
        module = importlib.import_module("broker.console.api")
    except ModuleNotFoundError as exc:
        if exc.name != "broker.console.api":
            raise
        logger.info("the Elsa API package is not present; the console serves no /elsa/api")
        return None
    return module.blueprint


def _is_api() -> bool:
    return request.path.startswith(auth.API_PREFIX)


def _error(status: int, message: str, code: str, details: dict[str, Any] | None = None) -> Any:
    if _is_api():
        response = jsonify({"error": message, "code": code, **(details or {})})
        response.status_code = status
        if status == 401:
            response.headers["WWW-Authenticate"] = 'ApiKey, Bearer realm="elsa"'
        if status == 429 and details and details.get("retryAfter"):
            response.headers["Retry-After"] = str(details["retryAfter"])
        return response
    if status == 401:
        target = request.full_path if request.method == "GET" else "/"
        body = render_template("sign_in.html", next=target.rstrip("?"), error=None)
        return body, 401, {"WWW-Authenticate": 'ApiKey, Bearer realm="console"'}
    return render_template("error.html", status=status, message=message), status


def _register_error_handlers(app: Flask) -> None:
    @app.errorhandler(BrokerError)
    def broker_error(error: BrokerError) -> Any:
        if error.status >= 500 and error.status != 503:
            logger.error("console error: %s", error, exc_info=error)
            return _error(500, "Internal server error", "internal_error")
        return _error(error.status, error.message, error.code, error.details)

    @app.errorhandler(CSRFError)
    def csrf_error(error: CSRFError) -> Any:
        logger.info("console: %s %s refused: %s", request.method, request.path, error.description)
        return _error(400, "The form expired or did not come from this console; try again.", "csrf")

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Any:
        status = error.code or 500
        code = (error.name or "error").lower().replace(" ", "_").replace("'", "")
        message = error.description or error.name
        if status == 401:
            message = "Sign in or send an API key (Authorization: ApiKey <key>)."
        elif status == 403:
            principal = g.get("console_principal")
            role = getattr(principal, "role", "?")
            message = f"Your role ({role}) does not allow this."
        return _error(status, message, code)

    @app.errorhandler(sa_exc.OperationalError)
    @app.errorhandler(sa_exc.InterfaceError)
    def store_error(error: Exception) -> Any:
        logger.warning("database unavailable: %s", error)
        return broker_error(StoreUnavailable("The database is unavailable; try again later"))

    @app.errorhandler(Exception)
    def unexpected(error: Exception) -> Any:
        logger.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
        return _error(500, "Internal server error", "internal_error")
