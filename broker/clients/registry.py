"""The client registry: the merged, cached allowlist (files, overridden by database rows), and who
a client certificate belongs to."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from broker.clients.entries import (
    ApiClient,
    RequestTypeRule,
    normalize_fingerprint,
    normalize_thumbprint,
    read_clients_file,
    read_request_types_file,
)
from broker.errors import ConfigError, StoreUnavailable
from broker.settings import Settings
from broker.store import models
from broker.store.db import transaction

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClientProblem:
    """An enabled database row that could not be built, and so withdrew its client."""

    client_id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class _View:
    clients: dict[str, ApiClient]  # by lower-cased client id
    by_thumbprint: dict[str, ApiClient]
    by_fingerprint: dict[str, ApiClient]
    rules: dict[tuple[str, str], RequestTypeRule]  # by (client key, request type key)


class ClientRegistry:
    """The merged allowlist (files, overridden by database rows)."""

    _view: _View | None
    _stamp: tuple[tuple[int, int] | None, ...]

    def __init__(
        self,
        settings: Settings,
        session_factory: sessionmaker[Session] | None = None,
        *,
        db_ttl: float = 5.0,
    ) -> None:
        self._clients_file = Path(settings.clients_file)
        self._rules_file = Path(settings.request_types_file)
        self._factory = session_factory
        self._db_ttl = db_ttl
        self._lock = threading.Lock()
        self._view = None
        self._stamp = (None, None)
        self._loaded_at = 0.0
        self._problems: tuple[ClientProblem, ...] = ()

    # Loading -------------------------------------------------------------------------------------

    def load(self) -> None:
        """Read both files and the database now. Raises ``ClientFileError`` for a bad file."""
        with self._lock:
            self._reload()

    def _reload(self) -> None:
        stamp = (_mtime(self._clients_file), _mtime(self._rules_file))
        clients = read_clients_file(self._clients_file)
        rules = read_request_types_file(self._rules_file)
        problems: list[ClientProblem] = []
        if self._factory is not None:
            file_limits = {key: client.rate_limits for key, client in clients.items()}
            problems = _apply_database(self._factory, clients, rules)
            # A database row has no rate limits of its own: it keeps its file entry's.
            for key, limits in file_limits.items():
                if key in clients:
                    clients[key] = dataclasses.replace(clients[key], rate_limits=limits)
        for problem in sorted(set(problems) - set(self._problems), key=lambda p: p.client_id):
            logger.error(
                "client %s is refused: its database row cannot be used (%s); fix or disable "
                "the row",
                problem.client_id,
                problem.reason,
                extra={"client_id": problem.client_id},
            )
        self._problems = tuple(problems)
        view = _build_view(clients, rules)
        # The periodic re-read (database rows may change) is news only when something changed.
        changed = self._view is None or view != self._view
        self._view = view
        self._stamp = stamp
        self._loaded_at = time.monotonic()
        logger.log(
            logging.INFO if changed else logging.DEBUG,
            "client registry loaded: %d client(s), %d request type rule(s)",
            len(clients),
            len(rules),
        )

    def _current(self) -> _View:
        view = self._view
        if view is not None and not self._stale():
            return view
        with self._lock:
            if self._view is None or self._stale():
                self._reload()
            assert self._view is not None
            return self._view

    def _stale(self) -> bool:
        if (_mtime(self._clients_file), _mtime(self._rules_file)) != self._stamp:
            return True
        return self._factory is not None and time.monotonic() - self._loaded_at > self._db_ttl

    # Lookups -------------------------------------------------------------------------------------

    @property
    def problems(self) -> list[ClientProblem]:
        """The enabled database rows that could not be built (their clients are refused)."""
        self._current()
        return list(self._problems)

    def authenticate(self, *, sha1_thumbprint: str, sha256_fingerprint: str) -> ApiClient | None:
        """The client a verified certificate belongs to, or None when it is not allowlisted.

        A match by SHA-256 fingerprint wins. A match by SHA-1 thumbprint is refused when that
        client also lists a SHA-256 fingerprint and it differs (a SHA-1 collision would not fool
        it).
        """
        view = self._current()
        sha1 = _try(normalize_thumbprint, sha1_thumbprint)
        sha256 = _try(normalize_fingerprint, sha256_fingerprint)
        if sha256 is not None and sha256 in view.by_fingerprint:
            return view.by_fingerprint[sha256]
        client = view.by_thumbprint.get(sha1) if sha1 is not None else None
        if client is None:
            return None
        if client.fingerprint_sha256 is not None and client.fingerprint_sha256 != sha256:
            logger.warning(
                "client %s: thumbprint matches but the SHA-256 fingerprint does not",
                client.client_id,
            )
            return None
        return client

    def get(self, client_id: str) -> ApiClient | None:
        return self._current().clients.get(client_id.lower())

    def clients(self) -> list[ApiClient]:
        """Every allowlisted client, sorted by client id."""
        view = self._current()
        return [view.clients[key] for key in sorted(view.clients)]

    def rule_for(self, client_id: str, request_type: str) -> RequestTypeRule | None:
        return self._current().rules.get((client_id.lower(), request_type.lower()))

    def rules_for(self, client_id: str) -> list[RequestTypeRule]:
        """The request types this client may submit, sorted by request type."""
        key = client_id.lower()
        rules = self._current().rules
        return sorted(
            (r for (c, _), r in rules.items() if c == key), key=lambda r: r.request_type.lower()
        )

    # Registering (database rows) -----------------------------------------------------------------

    def register_client(self, client: ApiClient) -> None:
        """Create or update the client's database row (it overrides a file entry)."""
        factory = self._require_factory()
        try:
            with transaction(factory, write=True) as session:
                row = session.get(models.Client, client.key)
                if row is None:
                    row = models.Client(client_key=client.key)
                    session.add(row)
                row.client_id = client.client_id
                row.thumbprint = client.thumbprint
                row.fingerprint_sha256 = client.fingerprint_sha256
                row.description = client.description
                row.scopes = sorted(client.scopes)
                row.enabled = True
        except IntegrityError as exc:
            raise ConfigError(
                f"client {client.client_id!r}: another client already has this certificate"
            ) from exc
        except OperationalError as exc:
            raise StoreUnavailable(f"could not register client {client.client_id!r}") from exc
        logger.info("registered client %s (thumbprint %s)", client.client_id, client.thumbprint)
        self._invalidate()

    def register_rule(
        self, rule: RequestTypeRule, *, also: Callable[[Session], None] | None = None
    ) -> None:
        """Create or update the rule's database row (it overrides a file entry); ``also`` runs in
        the same transaction (the audit record of the grant)."""
        factory = self._require_factory()
        client_key, type_key = rule.key
        try:
            with transaction(factory, write=True) as session:
                row = session.get(models.RequestTypeRule, (client_key, type_key))
                if row is None:
                    row = models.RequestTypeRule(client_key=client_key, request_type_key=type_key)
                    session.add(row)
                row.client_id = rule.client_id
                row.request_type = rule.request_type
                row.required_keys = list(rule.required_keys)
                row.allow_additional_keys = rule.allow_additional_keys
                row.enabled = True
                if also is not None:
                    also(session)
        except OperationalError as exc:
            raise StoreUnavailable(f"could not register rule {rule.request_type!r}") from exc
        logger.info("registered request type %s for client %s", rule.request_type, rule.client_id)
        self._invalidate()

    def _require_factory(self) -> sessionmaker[Session]:
        if self._factory is None:
            raise ConfigError("registering clients needs a database (no session factory given)")
        return self._factory

    def _invalidate(self) -> None:
        with self._lock:
            self._view = None


# Database overrides ------------------------------------------------------------------------------


def _apply_database(
    factory: sessionmaker[Session],
    clients: dict[str, ApiClient],
    rules: dict[tuple[str, str], RequestTypeRule],
) -> list[ClientProblem]:
    """Let database rows replace (or, when disabled, withdraw) the file entries they name;
    answers the enabled rows that could not be built (their clients are withdrawn)."""
    problems: list[ClientProblem] = []
    try:
        with factory() as session:
            client_rows = session.scalars(select(models.Client)).all()
            rule_rows = session.scalars(select(models.RequestTypeRule)).all()
    except OperationalError as exc:
        raise StoreUnavailable("could not read the client allowlist from the database") from exc
    for row in client_rows:
        key = row.client_key.lower()
        if not row.enabled:
            clients.pop(key, None)
            continue
        from_file = clients.get(key)
        try:
            clients[key] = ApiClient(
                client_id=row.client_id,
                thumbprint=normalize_thumbprint(row.thumbprint) if row.thumbprint else None,
                fingerprint_sha256=(
                    normalize_fingerprint(row.fingerprint_sha256)
                    if row.fingerprint_sha256
                    else None
                ),
                description=row.description,
                scopes=frozenset(row.scopes or ()),
                # a row overrides the certificate and scopes; the file's webhooks stay
                webhooks=from_file.webhooks if from_file else (),
                allow_callback_url=from_file.allow_callback_url if from_file else False,
                callback_secret=from_file.callback_secret if from_file else None,
            )
        except ValueError as exc:
            # Fail closed: the file entry this row replaces must not admit anyone either.
            clients.pop(key, None)
            problems.append(ClientProblem(row.client_id, str(exc)))
    for rule_row in rule_rows:
        rule_key = (rule_row.client_key.lower(), rule_row.request_type_key.lower())
        if not rule_row.enabled:
            rules.pop(rule_key, None)
            continue
        rules[rule_key] = RequestTypeRule(
            client_id=rule_row.client_id,
            request_type=rule_row.request_type,
            required_keys=tuple(rule_row.required_keys or ()),
            allow_additional_keys=rule_row.allow_additional_keys,
        )
    return problems


def _build_view(
    clients: dict[str, ApiClient], rules: dict[tuple[str, str], RequestTypeRule]
) -> _View:
    by_thumbprint: dict[str, ApiClient] = {}
    by_fingerprint: dict[str, ApiClient] = {}
    for client in clients.values():
        # A database row may reuse a certificate a file entry had: the row (listed later) wins.
        if client.thumbprint:
            by_thumbprint[client.thumbprint] = client
        if client.fingerprint_sha256:
            by_fingerprint[client.fingerprint_sha256] = client
    return _View(dict(clients), by_thumbprint, by_fingerprint, dict(rules))


def _mtime(path: Path) -> tuple[int, int] | None:
    """What tells a changed file apart: modification time (ns) and size."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _try(normalize: Callable[[str], str], text: str) -> str | None:
    try:
        return normalize(text)
    except ValueError:
        return None
