"""The builders of the three web listeners (public ingress, internal listener, console): each
takes the process's runtime (or parts a test hands in), builds the listener's own long-lived
parts (trust store, rate limiters, token issuer, client allowlist) and assembles the app."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.buckets import BUCKET_BACKENDS, RateLimiter, make_rate_limiter, store_url
from broker.backends import by_url
from broker.errors import StoreUnavailable
from broker.registry.workflows import WorkflowRegistry
from broker.runtime.ports import NullPublisher, Publisher
from broker.settings import Settings
from broker.web.context import ClientDirectory, Services, WorkflowDirectory
from broker.wiring.runtime import Runtime

logger = logging.getLogger(__name__)


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
    """The public listener. The shared parts come from ``runtime`` (its fast-path publisher too);
    without one, a runtime is built from ``settings`` and the publisher is a null one. Keyword
    parts override."""
    from broker.ingress.app import public_app
    from broker.ingress.auth import TrustStore
    from broker.ingress.rate_limits import LIMITER

    rt = runtime if runtime is not None else Runtime(settings, factory=session_factory)
    factory = session_factory or rt.factory
    if clients is None:
        clients = rt.clients
        _sync_webhooks(settings, factory, clients)
    # Submissions pin the version the ingress sees: the runtime's registry watches saved changes.
    svc = Services(
        settings=settings,
        session_factory=factory,
        publisher=publisher or _publisher(runtime),
        clients=clients,
        registry=registry if registry is not None else rt.registry,
        extra={
            "trust_store": TrustStore(settings.tls_client_ca),
            LIMITER: rate_limiter or make_rate_limiter(settings),
        },
        parts=rt,
    )
    return public_app(svc)


def create_internal_app(
    settings: Settings,
    *,
    session_factory: sessionmaker[Session] | None = None,
    publisher: Publisher | None = None,
    runtime: Runtime | None = None,
) -> Flask:
    """The internal listener: it publishes nothing and needs only the database."""
    from broker.ingress.app import internal_app

    if session_factory is None:
        rt = runtime if runtime is not None else Runtime(settings)
        session_factory = rt.factory
    svc = Services(
        settings=settings, session_factory=session_factory, publisher=publisher or NullPublisher()
    )
    return internal_app(svc)


def create_console_app(
    settings: Settings,
    *,
    session_factory: sessionmaker[Session] | None = None,
    registry: WorkflowRegistry | None = None,
    publisher: Publisher | None = None,
    runtime: Runtime | None = None,
    sign_in_limiter: RateLimiter | None = None,
) -> Flask:
    """The console listener. Shared parts (and the fast-path publisher) come from ``runtime``;
    keyword parts override. A console with a placeholder or missing key never comes up."""
    from broker.clients.registry import ClientRegistry
    from broker.console.app import console_app
    from broker.console.auth import ConsoleContext
    from broker.console.tokens import TokenIssuer

    secret = settings.resolved_console_secret()
    rt = runtime if runtime is not None else Runtime(settings, factory=session_factory)
    factory = session_factory or rt.factory
    registry = registry if registry is not None else rt.registry
    if publisher is None and runtime is not None:
        publisher = runtime.web_publisher
    # Retries and alterations run on the console's own database and registry: the process's
    # runtime when nothing overrides them.
    own = runtime is not None and session_factory is None and registry is rt.registry
    context = ConsoleContext(
        session_factory=factory,
        tokens=TokenIssuer(
            secret, access_ttl=settings.console_token_ttl, refresh_ttl=settings.console_refresh_ttl
        ),
        session_lifetime=settings.console_refresh_ttl,
        registry=registry,
        publisher=publisher,
        clients=ClientRegistry(settings, factory),
        operations=rt if own else Runtime(settings, factory=factory, registry=registry),
    )
    svc = Services(
        settings=settings,
        session_factory=factory,
        publisher=publisher or NullPublisher(),
        registry=registry,
    )
    return console_app(
        context,
        svc,
        secret=secret,
        sign_in_limiter=sign_in_limiter or make_sign_in_limiter(settings),
    )


def make_sign_in_limiter(settings: Settings) -> RateLimiter:
    """The console's sign-in limiter, on the rate-limit store its settings name."""
    from broker.console.sign_in_limits import ADDRESS, USER

    buckets = by_url("BROKER_RATE_LIMIT_URL", store_url(settings), BUCKET_BACKENDS, settings)
    rate = settings.rate_limit_sign_in
    return RateLimiter(buckets, {USER: rate, ADDRESS: rate})


def _publisher(runtime: Runtime | None) -> Publisher:
    """A runtime's fast-path publisher; without a runtime, a null one (the relay publishes)."""
    return runtime.web_publisher if runtime is not None else NullPublisher()


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
