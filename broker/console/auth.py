"""Who is calling the console: API keys, bearer tokens and sign-in sessions
(docs/design.md, section 1)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Literal

from flask import current_app, g, request, session
from sqlalchemy.orm import Session, sessionmaker

from broker.clients.registry import ClientRegistry
from broker.console.roles import Principal, Role
from broker.console.tokens import Holder, TokenIssuer
from broker.errors import ConfigError
from broker.registry.workflows import WorkflowRegistry
from broker.runtime.parts import Alterations
from broker.runtime.ports import Publisher
from broker.store import credentials
from broker.store import db as store

logger = logging.getLogger(__name__)

EXTENSION = "broker.console"
API_PREFIX = "/elsa/api"
SESSION_HOLDER = "holder"
SESSION_SIGNED_IN = "signed_in_at"
Via = Literal["header", "session", "none"]


@dataclasses.dataclass(frozen=True)
class ConsoleContext:
    """What the console's routes share: settings-derived parts built once per app."""

    session_factory: sessionmaker[Session]
    tokens: TokenIssuer
    session_lifetime: int
    #: the workflows (diagrams of request workflows)
    registry: WorkflowRegistry | None = None
    #: the fast path after a replay
    publisher: Publisher | None = None
    #: the merged client allowlist (request-type grants and the clients they name)
    clients: ClientRegistry | None = None
    #: what an operator's retry or alteration runs on (the console's database and registry)
    operations: Alterations | None = None

    def client_registry(self) -> ClientRegistry:
        if self.clients is None:
            raise ConfigError("this console has no client allowlist")
        return self.clients

    def operations_parts(self) -> Alterations:
        if self.operations is None:
            raise ConfigError("this console runs no operator actions")
        return self.operations


def context() -> ConsoleContext:
    found: ConsoleContext = current_app.extensions[EXTENSION]
    return found


def principal_of(found: credentials.Credential | None) -> Principal | None:
    if found is None or found.role not in ("viewer", "designer", "operator"):
        return None
    role: Role = found.role  # type: ignore[assignment]
    return Principal(name=found.name, role=role, kind="key" if found.kind == "key" else "user")


def principal_for_key(key: str) -> Principal | None:
    with store.transaction(context().session_factory, write=False) as db:
        return principal_of(credentials.find_key(db, key))


def principal_for_holder(holder: Holder) -> Principal | None:
    with store.transaction(context().session_factory, write=False) as db:
        return principal_of(credentials.find(db, holder.kind, holder.name))


def identify() -> None:
    """Set ``g.console_principal`` from the request's credentials (None when there are none)."""
    principal: Principal | None = None
    via: Via = "none"
    header = request.headers.get("Authorization", "").strip()
    if header:
        via = "header"
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() == "apikey" and value:
            principal = principal_for_key(value)
        elif scheme.lower() == "bearer" and value:
            holder = context().tokens.verify(value, "access")
            principal = principal_for_holder(holder) if holder is not None else None
        if principal is None:
            logger.info("console: %s %s with a wrong credential", request.method, request.path)
    elif not request.path.startswith(API_PREFIX) and SESSION_HOLDER in session:
        via = "session"
        principal = _session_principal()
        if principal is None:
            session.clear()
    g.console_principal = principal
    g.console_auth_via = via


def _session_principal() -> Principal | None:
    raw = session.get(SESSION_HOLDER)
    signed_in = session.get(SESSION_SIGNED_IN)
    if not isinstance(raw, dict) or not isinstance(signed_in, int | float):
        return None
    # The cookie is re-signed on every request; the sign-in time bounds the whole session.
    if time.time() - signed_in > context().session_lifetime:
        return None
    kind, name = raw.get("kind"), raw.get("name")
    if kind not in ("key", "user") or not isinstance(name, str):
        return None
    return principal_for_holder(Holder(kind, name))


def sign_in(principal: Principal) -> None:
    """Start a sign-in session for ``principal`` (a fresh session: no fixation)."""
    session.clear()
    session.permanent = True
    session[SESSION_HOLDER] = {"kind": principal.kind, "name": principal.name}
    session[SESSION_SIGNED_IN] = int(time.time())
    logger.info("console: %s %s signed in", principal.kind, principal.name)


def sign_out() -> None:
    session.clear()


def access_token_for(principal: Principal) -> str:
    """A short-lived token the page hands to Studio's elements (never the key itself)."""
    return context().tokens.issue(Holder(principal.kind, principal.name), "access")
