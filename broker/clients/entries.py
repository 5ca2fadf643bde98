"""What the client allowlist holds, read from clients.json and requestTypes.json in elsa-broker's
formats (docs/design.md, section 1)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.errors import ClientFileError
from broker.rates import DEFAULT_LIMITS, ClientLimits, parse_client_limits

logger = logging.getLogger(__name__)

_SHA1_HEX = re.compile(r"^[0-9A-F]{40}$")
_SHA256_HEX = re.compile(r"^[0-9A-F]{64}$")


#: the webhook events a client may subscribe to (``request.processing`` only when asked for)
WEBHOOK_EVENTS = (
    "request.completed",
    "request.faulted",
    "request.cancelled",
    "request.processing",
)
#: what an endpoint that names no events receives
DEFAULT_WEBHOOK_EVENTS = ("request.completed", "request.faulted", "request.cancelled")
_WEBHOOK_SECRET = re.compile(r"^whsec_[A-Za-z0-9+/]{16,}={0,2}$")


@dataclasses.dataclass(frozen=True)
class WebhookConfig:
    """A webhook endpoint of clients.json: ``{"url", "events"?, "secret"?}``; ``secrets`` holds
    one secret, or two during a rotation (the new one first), or none (one is generated)."""

    url: str
    events: tuple[str, ...]
    secrets: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ApiClient:
    """A client allowed in by its certificate."""

    client_id: str
    thumbprint: str | None  # SHA-1, upper-case hex, no colons
    fingerprint_sha256: str | None  # SHA-256, upper-case hex, no colons
    description: str | None
    scopes: frozenset[str]
    webhooks: tuple[WebhookConfig, ...] = ()
    #: whether a submission may name a one-off ``callbackUrl`` (signed with ``callback_secret``)
    allow_callback_url: bool = False
    callback_secret: str | None = None
    #: the client's own rates from clients.json (None for a kind: the settings' default)
    rate_limits: ClientLimits = DEFAULT_LIMITS

    @property
    def key(self) -> str:
        return self.client_id.lower()


@dataclasses.dataclass(frozen=True)
class RequestTypeRule:
    """Which request type a client may submit, and which keys the submission must carry."""

    client_id: str
    request_type: str
    required_keys: tuple[str, ...]
    allow_additional_keys: bool

    @property
    def key(self) -> tuple[str, str]:
        return self.client_id.lower(), self.request_type.lower()


def normalize_thumbprint(text: str) -> str:
    """A SHA-1 thumbprint as upper-case hex without colons; ``ValueError`` if it is not one."""
    return _normalize_hex(text, _SHA1_HEX, "a SHA-1 thumbprint (40 hex digits)")


def normalize_fingerprint(text: str) -> str:
    """A SHA-256 fingerprint as upper-case hex without colons; ``ValueError`` if it is not one."""
    return _normalize_hex(text, _SHA256_HEX, "a SHA-256 fingerprint (64 hex digits)")


def _normalize_hex(text: str, pattern: re.Pattern[str], what: str) -> str:
    value = re.sub(r"[\s:]", "", text).upper()
    if not pattern.match(value):
        raise ValueError(f"{text!r} is not {what}")
    return value


# Files -------------------------------------------------------------------------------------------


def read_clients_file(path: Path) -> dict[str, ApiClient]:
    """The clients of a clients.json file by lower-cased id; a missing file holds none."""
    entries = _entries(path, "clients")
    clients: dict[str, ApiClient] = {}
    seen_certs: dict[str, str] = {}
    for index, entry in entries:
        where = _Where(path, index, entry.get("clientid"))
        client = _with_rate_limits(_client_from_entry(entry, where), entry, where)
        if client.key in clients:
            raise where.error("the clientId appears twice")
        for cert in (client.thumbprint, client.fingerprint_sha256):
            if cert is not None and cert in seen_certs:
                raise where.error(f"certificate {cert} is already listed for {seen_certs[cert]!r}")
            if cert is not None:
                seen_certs[cert] = client.client_id
        clients[client.key] = client
    return clients


def read_request_types_file(path: Path) -> dict[tuple[str, str], RequestTypeRule]:
    """The rules of a requestTypes.json file by (client key, request type key)."""
    rules: dict[tuple[str, str], RequestTypeRule] = {}
    for index, entry in _entries(path, "requesttypes"):
        where = _Where(path, index, entry.get("clientid"))
        client_id = where.text(entry, "clientId")
        request_type = where.text(entry, "requestType")
        required = entry.get("requiredkeys") or []
        if not isinstance(required, list) or not all(
            isinstance(k, str) and k.strip() for k in required
        ):
            raise where.error("requiredKeys must be a list of non-empty strings")
        allow = entry.get("allowadditionalkeys", False)
        if not isinstance(allow, bool):
            raise where.error("allowAdditionalKeys must be true or false")
        rule = RequestTypeRule(client_id, request_type, tuple(k.strip() for k in required), allow)
        if rule.key in rules:
            raise where.error(f"request type {request_type!r} appears twice for this client")
        rules[rule.key] = rule
    return rules


@dataclasses.dataclass(frozen=True)
class _Where:
    """An entry of a file, for error messages: file, index and clientId."""

    path: Path
    index: int
    client_id: Any

    def error(self, reason: str) -> ClientFileError:
        who = f" (clientId {self.client_id!r})" if isinstance(self.client_id, str) else ""
        return ClientFileError(
            f"{self.path}: entry {self.index}{who}: {reason}",
            file=str(self.path),
            entry=self.index,
            reason=reason,
        )

    def text(self, entry: Mapping[str, Any], name: str, *, required: bool = True) -> str:
        value = entry.get(name.lower())
        if value is None and not required:
            return ""
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"{name} must be a non-empty string")
        return value.strip()


def _client_from_entry(entry: Mapping[str, Any], where: _Where) -> ApiClient:
    client_id = where.text(entry, "clientId")
    thumbprint = where.text(entry, "thumbprint", required=False) or None
    fingerprint = where.text(entry, "fingerprintSha256", required=False) or None
    try:
        thumbprint = normalize_thumbprint(thumbprint) if thumbprint else None
        fingerprint = normalize_fingerprint(fingerprint) if fingerprint else None
    except ValueError as exc:
        raise where.error(str(exc)) from exc
    if thumbprint is None and fingerprint is None:
        raise where.error("a thumbprint or a fingerprintSha256 is required")
    description = entry.get("description")
    if description is not None and not isinstance(description, str):
        raise where.error("description must be a string")
    scopes = entry.get("scopes") or []
    if not isinstance(scopes, list) or not all(isinstance(s, str) and s.strip() for s in scopes):
        raise where.error("scopes must be a list of non-empty strings")
    client = ApiClient(
        client_id, thumbprint, fingerprint, description, frozenset(s.strip() for s in scopes)
    )
    return _with_webhooks(client, entry, where)


def _with_webhooks(client: ApiClient, entry: Mapping[str, Any], where: _Where) -> ApiClient:
    """The client with its ``webhooks``, ``allowCallbackUrl`` and ``callbackSecret`` fields."""
    items = entry.get("webhooks") or []
    if not isinstance(items, list):
        raise where.error("webhooks must be a list of {url, events, secret} objects")
    webhooks = tuple(
        _webhook_from_item(item, f"webhooks[{n}]", where) for n, item in enumerate(items)
    )
    allow = entry.get("allowcallbackurl", False)
    if not isinstance(allow, bool):
        raise where.error("allowCallbackUrl must be true or false")
    secret = entry.get("callbacksecret")
    if secret is not None and not _is_webhook_secret(secret):
        raise where.error("callbackSecret must be a secret of the form whsec_<base64>")
    if allow and secret is None:
        raise where.error("allowCallbackUrl needs a callbackSecret (whsec_<base64>) to sign with")
    return dataclasses.replace(
        client, webhooks=webhooks, allow_callback_url=allow, callback_secret=secret
    )


def _webhook_from_item(item: Any, name: str, where: _Where) -> WebhookConfig:
    if not isinstance(item, dict):
        raise where.error(f"{name} must be an object with url, events and secret")
    fields = {str(k).lower(): v for k, v in item.items()}
    unknown = sorted(set(fields) - {"url", "events", "secret"})
    if unknown:
        raise where.error(f"{name}: unknown field(s) {', '.join(unknown)}")
    url = fields.get("url")
    if not isinstance(url, str) or not url.strip().lower().startswith(("http://", "https://")):
        raise where.error(f"{name}.url must be an http:// or https:// URL")
    try:
        events = parse_webhook_events(fields.get("events"))
    except ValueError as exc:
        raise where.error(f"{name}.events: {exc}") from exc
    secret = fields.get("secret")
    secrets: tuple[str, ...]
    if secret is None:
        secrets = ()
    elif isinstance(secret, str):
        secrets = (secret,)
    elif isinstance(secret, list) and 1 <= len(secret) <= 2:
        secrets = tuple(secret)
    else:
        raise where.error(f"{name}.secret must be a secret or a list of two (new, old)")
    if not all(_is_webhook_secret(s) for s in secrets):
        raise where.error(f"{name}.secret must be of the form whsec_<base64>")
    return WebhookConfig(url.strip(), events, secrets)


def parse_webhook_events(value: Any) -> tuple[str, ...]:
    """A webhook's event list, checked; None means the three terminal events.
    ``ValueError`` names what is wrong."""
    if value is None:
        return DEFAULT_WEBHOOK_EVENTS
    if not isinstance(value, list) or not value or not all(isinstance(e, str) for e in value):
        raise ValueError(f"must be a non-empty list of event names ({', '.join(WEBHOOK_EVENTS)})")
    unknown = sorted(set(value) - set(WEBHOOK_EVENTS))
    if unknown:
        raise ValueError(
            f"unknown event(s) {', '.join(unknown)}; known: {', '.join(WEBHOOK_EVENTS)}"
        )
    return tuple(e for e in WEBHOOK_EVENTS if e in value)


def _is_webhook_secret(value: Any) -> bool:
    return isinstance(value, str) and bool(_WEBHOOK_SECRET.match(value))


def _with_rate_limits(client: ApiClient, entry: Mapping[str, Any], where: _Where) -> ApiClient:
    """The client with the ``rateLimits`` of its entry (absent: the settings' defaults)."""
    try:
        limits = parse_client_limits(entry.get("ratelimits"))
    except ValueError as exc:
        raise where.error(str(exc)) from exc
    return dataclasses.replace(client, rate_limits=limits)


def _entries(path: Path, list_key: str) -> list[tuple[int, dict[str, Any]]]:
    """The entries of the file's list, with keys lower-cased; [] when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        logger.warning("%s does not exist; it contributes no entries", path)
        return []
    except OSError as exc:
        raise ClientFileError(f"{path}: cannot be read: {exc}", file=str(path)) from exc
    try:
        document = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ClientFileError(
            f"{path}: malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            file=str(path),
        ) from exc
    if not isinstance(document, dict):
        raise ClientFileError(f"{path}: must hold a JSON object", file=str(path))
    lowered = {str(k).lower(): v for k, v in document.items()}
    items = lowered.get(list_key, [])
    if not isinstance(items, list):
        raise ClientFileError(f"{path}: {list_key} must be a list", file=str(path))
    entries: list[tuple[int, dict[str, Any]]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _Where(path, index, None).error("an entry must be a JSON object")
        entries.append((index, {str(k).lower(): v for k, v in item.items()}))
    return entries
