"""The operator audit from the console: who is acting (``actor``), and ``record`` an action in the
caller's transaction; the audit's page and its ``/elsa/api`` listing are ``pages`` and
``api.audit``."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from broker.console.roles import current
from broker.store import operator_actions


def actor() -> str:
    """The audit source of a console action: ``console:<who>``."""
    principal = current()
    return f"console:{principal.name if principal is not None else 'unknown'}"


def record(
    session: Session, action: str, target: str, summary: dict[str, Any] | None = None
) -> None:
    """Add the current principal's ``action`` on ``target`` to the operator audit, in the
    caller's transaction (a refused action rolls it back with everything else)."""
    principal = current()
    operator_actions.record(
        session,
        actor=actor(),
        role=principal.role if principal is not None else None,
        action=action,
        target=target,
        summary=summary,
    )
