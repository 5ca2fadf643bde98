"""Webhook endpoints: registered through the API, configured in clients.json (kept in step with the
``webhook_endpoints`` table by ``sync_configured``) or a submission's one-off ``callbackUrl``;
their URLs, checked by the outbound guard, and their signing secrets.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
import secrets as secrets_module
import uuid
from collections.abc import Iterable
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.clients.entries import DEFAULT_WEBHOOK_EVENTS, ApiClient, parse_webhook_events
from broker.errors import BadRequest, BrokerError, Conflict, NotFound, OutboundBlocked
from broker.store.models import WebhookEndpoint, utcnow

logger = logging.getLogger(__name__)


SOURCE_API = "api"
SOURCE_CONFIG = "config"
SOURCE_CALLBACK = "callback"
#: the reason a clients.json endpoint carries while it is missing from the file
REMOVED_FROM_FILE = "removed from clients.json"
MAX_URL_LENGTH = 2000


class UrlVetter(Protocol):
    """Checks a URL against the outbound guard now (``OutboundHttp.vet_url``)."""

    def vet_url(self, url: str) -> None: ...


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets_module.token_bytes(32)).decode()


def live_secrets(endpoint: WebhookEndpoint, now: dt.datetime | None = None) -> list[str]:
    """The secrets that sign a delivery now: the current one, and the previous one while its
    rotation overlap lasts (a clients.json endpoint may list two with no end)."""
    found = list(endpoint.secrets or [])
    expires = endpoint.previous_secret_expires_at
    if len(found) > 1 and expires is not None and expires <= (now or utcnow()):
        return found[:1]
    return found


def check_url(url: Any, vetter: UrlVetter, *, field: str = "url") -> str:
    """A URL a delivery may go to, checked by the outbound guard now; ``BadRequest`` naming the
    field otherwise (a private or loopback address is refused unless allowlisted)."""
    if not isinstance(url, str) or not url.strip():
        raise BadRequest(f"{field} must be an http:// or https:// URL", field=field)
    text = url.strip()
    if len(text) > MAX_URL_LENGTH:
        raise BadRequest(f"{field} is longer than {MAX_URL_LENGTH} characters", field=field)
    try:
        vetter.vet_url(text)
    except OutboundBlocked as exc:
        raise BadRequest(f"{field} is refused: {exc.message}", field=field) from exc
    return text


def register(
    session: Session,
    *,
    client_id: str,
    url: Any,
    events: Any,
    secret: Any,
    vetter: UrlVetter,
) -> tuple[WebhookEndpoint, str]:
    """Add an API endpoint for ``client_id``; answers it and its secret (shown only now)."""
    url = check_url(url, vetter)
    try:
        wanted = parse_webhook_events(events)
    except ValueError as exc:
        raise BadRequest(f"events {exc}", field="events") from exc
    if secret is None:
        secret = new_secret()
    elif not _is_secret(secret):
        raise BadRequest(
            "secret must be of the form whsec_<base64 of 24 to 64 bytes>",
            field="secret",
        )
    now = utcnow()
    endpoint = WebhookEndpoint(
        id=f"wh_{uuid.uuid4().hex}",
        client_id=client_id,
        client_key=client_id.lower(),
        url=url,
        events=list(wanted),
        secrets=[secret],
        source=SOURCE_API,
        enabled=True,
        created_at=now,
        updated_at=now,
    )
    session.add(endpoint)
    session.flush()
    logger.info(
        "client %s registered webhook endpoint %s",
        client_id,
        endpoint.id,
        extra={"client_id": client_id, "endpoint_id": endpoint.id},
    )
    return endpoint, secret


def callback_secret_of(client: Any) -> str:
    """The secret that signs ``client``'s one-off callbacks; ``BadRequest`` when its
    clients.json entry does not allow a ``callbackUrl``."""
    secret = getattr(client, "callback_secret", None)
    if not getattr(client, "allow_callback_url", False) or not secret:
        raise BadRequest(
            f"client '{client.client_id}' may not name a callbackUrl (allowCallbackUrl is off)",
            field="callbackUrl",
        )
    return str(secret)


def add_callback(
    session: Session, *, client_id: str, request_id: str, url: str, secret: str
) -> WebhookEndpoint:
    """The one-off endpoint of a submission's ``callbackUrl`` (already checked): the terminal
    events of that request only, signed with the client's ``callbackSecret``."""
    now = utcnow()
    endpoint = WebhookEndpoint(
        id=f"wh_cb_{uuid.uuid4().hex}",
        client_id=client_id,
        client_key=client_id.lower(),
        url=url,
        events=list(DEFAULT_WEBHOOK_EVENTS),
        secrets=[secret],
        source=SOURCE_CALLBACK,
        request_id=request_id,
        enabled=True,
        created_at=now,
        updated_at=now,
    )
    session.add(endpoint)
    return endpoint


def endpoint_view(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """What a client sees of an endpoint: never a secret."""
    return {
        "id": endpoint.id,
        "url": endpoint.url,
        "events": list(endpoint.events or []),
        "source": endpoint.source,
        "enabled": endpoint.enabled,
        "disabled": (
            None
            if endpoint.enabled
            else {"reason": endpoint.disabled_reason, "at": _iso(endpoint.disabled_at)}
        ),
        "failingSince": _iso(endpoint.failing_since),
        "createdAt": _iso(endpoint.created_at),
    }


def list_endpoints(session: Session, client_id: str | None) -> list[WebhookEndpoint]:
    """The client's endpoints (every client's when None), one-off callbacks left out."""
    stmt = select(WebhookEndpoint).where(WebhookEndpoint.source != SOURCE_CALLBACK)
    if client_id is not None:
        stmt = stmt.where(WebhookEndpoint.client_key == client_id.lower())
    return list(session.scalars(stmt.order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)))


def get_owned(session: Session, endpoint_id: str, client_id: str | None) -> WebhookEndpoint:
    """The endpoint when ``client_id`` owns it (any owner when None); ``NotFound`` otherwise, so
    a client cannot learn which ids other clients have."""
    endpoint = session.get(WebhookEndpoint, endpoint_id)
    if endpoint is None or (client_id is not None and endpoint.client_key != client_id.lower()):
        raise NotFound(f"Webhook endpoint '{endpoint_id}' not found")
    return endpoint


def delete(session: Session, endpoint_id: str, client_id: str | None) -> None:
    """Remove an API endpoint; its pending deliveries end unsent (the worker finds no endpoint).
    Endpoints of clients.json are removed from the file, not here (``Conflict``)."""
    endpoint = get_owned(session, endpoint_id, client_id)
    if endpoint.source == SOURCE_CONFIG:
        raise Conflict(
            f"Webhook endpoint '{endpoint_id}' is defined in clients.json; remove it there",
            source=endpoint.source,
        )
    session.delete(endpoint)
    logger.info("webhook endpoint %s deleted", endpoint_id, extra={"endpoint_id": endpoint_id})


def rotate_secret(
    session: Session, endpoint_id: str, client_id: str | None, *, overlap: float
) -> str:
    """A new signing secret (shown only now); the previous one still signs for ``overlap``
    seconds, so receivers can switch without dropping a delivery."""
    endpoint = get_owned(session, endpoint_id, client_id)
    if endpoint.source != SOURCE_API:
        raise Conflict(
            f"Webhook endpoint '{endpoint_id}' is defined in clients.json; rotate it there",
            source=endpoint.source,
        )
    secret = new_secret()
    now = utcnow()
    endpoint.secrets = [secret, *(endpoint.secrets or [])[:1]]
    endpoint.previous_secret_expires_at = now + dt.timedelta(seconds=overlap)
    endpoint.updated_at = now
    return secret


def config_endpoint_id(client_key: str, url: str) -> str:
    """The id of a clients.json endpoint: the same for the same client and URL in every sync."""
    return "wh_cfg_" + hashlib.sha256(f"{client_key}\x1f{url}".encode()).hexdigest()[:24]


def sync_configured(session: Session, clients: Iterable[ApiClient], vetter: UrlVetter) -> int:
    """Bring the rows of clients.json's endpoints in line with the file; answers the changes.

    Safe to run twice (ids derive from client and URL). A URL the outbound guard refuses is
    logged and skipped; an endpoint gone from the file is disabled with a reason (and enabled
    again when it comes back); an endpoint the horizon disabled stays disabled.
    """
    wanted: dict[str, tuple[ApiClient, str, tuple[str, ...], tuple[str, ...]]] = {}
    for client in clients:
        for hook in client.webhooks:
            try:
                vetter.vet_url(hook.url)
            except BrokerError as exc:
                logger.error(
                    "clients.json webhook %s of client %s is refused: %s",
                    hook.url,
                    client.client_id,
                    exc,
                    extra={"client_id": client.client_id},
                )
                continue
            key = config_endpoint_id(client.key, hook.url)
            wanted[key] = (client, hook.url, hook.events, hook.secrets)
    rows = {
        e.id: e
        for e in session.scalars(
            select(WebhookEndpoint).where(WebhookEndpoint.source == SOURCE_CONFIG)
        )
    }
    now = utcnow()
    changes = 0
    for key, (client, url, events, given) in wanted.items():
        row = rows.get(key)
        if row is None:
            session.add(
                WebhookEndpoint(
                    id=key,
                    client_id=client.client_id,
                    client_key=client.key,
                    url=url,
                    events=list(events),
                    secrets=list(given) or [new_secret()],
                    source=SOURCE_CONFIG,
                    enabled=True,
                    created_at=now,
                    updated_at=now,
                )
            )
            changes += 1
            continue
        changed = False
        if list(row.events or []) != list(events):
            row.events, changed = list(events), True
        if given and list(row.secrets or []) != list(given):
            row.secrets, changed = list(given), True
        if not row.enabled and row.disabled_reason == REMOVED_FROM_FILE:
            row.enabled, row.disabled_reason, row.disabled_at, changed = (
                True,
                None,
                None,
                True,
            )
        if changed:
            row.updated_at = now
            changes += 1
    for key, row in rows.items():
        if key not in wanted and row.enabled:
            row.enabled, row.disabled_reason, row.disabled_at = (
                False,
                REMOVED_FROM_FILE,
                now,
            )
            row.updated_at = now
            changes += 1
    if changes:
        session.flush()
        logger.info("synced %d webhook endpoint change(s) from clients.json", changes)
    return changes


def _is_secret(value: Any) -> bool:
    if not isinstance(value, str) or not value.startswith("whsec_"):
        return False
    try:
        raw = base64.b64decode(value[len("whsec_") :], validate=True)
    except ValueError:
        return False
    return 24 <= len(raw) <= 64


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
