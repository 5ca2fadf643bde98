"""Client rules for a request type: who may submit it, and granting it (console and CLI)."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from broker.clients.entries import RequestTypeRule
from broker.clients.registry import ClientRegistry
from broker.errors import BadRequest, NotFound
from broker.store import operator_actions

#: letters, digits, ``.``, ``_`` and ``-``, starting with a letter (as the shipped types are named)
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,99}$")
KEY = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def check_name(value: str, field: str = "requestType") -> str:
    """``value`` stripped, or BadRequest naming ``field`` when it is no request type name."""
    name = value.strip()
    if not NAME.match(name):
        raise BadRequest(
            f"'{field}' must start with a letter and hold only letters, digits, '.', '_' or '-' "
            f"(at most 100), not {value!r}",
            field=field,
        )
    return name


def check_key(key: str, field: str = "requiredKeys") -> str:
    """``key`` when it is a key name, else BadRequest naming ``field``."""
    if not KEY.match(key):
        raise BadRequest(
            f"'{field}': {key!r} is not a key name (letters, digits, '.', '_', '-')", field=field
        )
    return key


def parse_keys(raw: str, field: str = "requiredKeys") -> tuple[str, ...]:
    """Comma- or space-separated key names, each checked, duplicates once."""
    keys = [k for k in re.split(r"[,\s]+", raw.strip()) if k]
    return tuple(dict.fromkeys(check_key(k, field) for k in keys))


def rules_for(clients: ClientRegistry, request_type: str) -> tuple[RequestTypeRule, ...]:
    """The rules (one per client) that allow ``request_type``, by client id."""
    found = [clients.rule_for(c.client_id, request_type) for c in clients.clients()]
    return tuple(sorted((r for r in found if r is not None), key=lambda r: r.client_id.lower()))


def grant(
    clients: ClientRegistry,
    client_id: str,
    request_type: str,
    required_keys: tuple[str, ...],
    allow_additional_keys: bool,
    *,
    actor: str,
    role: str | None = None,
) -> RequestTypeRule:
    """Allow a known client to submit ``request_type``: a database rule (it overrides the file's
    rule for the same client and type), which every ingress process reloads within seconds; the
    operator audit records it in the same transaction (``actor``, ``role``: who granted it)."""
    client = clients.get(client_id.strip())
    if client is None:
        raise NotFound(f"Unknown client {client_id!r}", field="clientId")
    rule = RequestTypeRule(
        client_id=client.client_id,
        request_type=check_name(request_type),
        required_keys=required_keys,
        allow_additional_keys=allow_additional_keys,
    )

    def audit(session: Session) -> None:
        operator_actions.record(
            session,
            actor=actor,
            role=role,
            action="grant.create",
            target=f"{rule.client_id}: {rule.request_type}",
            summary={
                "clientId": rule.client_id,
                "requestType": rule.request_type,
                "requiredKeys": list(rule.required_keys),
                "allowAdditionalKeys": rule.allow_additional_keys,
            },
        )

    clients.register_rule(rule, also=audit)
    return rule
