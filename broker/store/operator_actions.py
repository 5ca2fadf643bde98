"""The operator audit: ``record`` one operator action (who, what, on what, a bounded summary that
never holds the values), ``list_page`` them newest first. Functions take the caller's session and
never commit; each record is logged too (``broker.audit.operators``)."""

from __future__ import annotations

import getpass
import logging
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.redaction import redact
from broker.store.models import OperatorAction, utcnow

logger = logging.getLogger("broker.audit.operators")

#: the bounds of a summary: text per string, items per list, levels, ids in a target
MAX_TEXT = 200
MAX_ITEMS = 20
MAX_LEVELS = 3
MAX_TARGET = 500


def cli_actor(command: str) -> str:
    """The actor of a command-line action: ``cli:<os user>`` (the command in the summary)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}"


def targets(ids: list[str]) -> str:
    """A target naming several ids: all of them when they fit, else the first few and a count."""
    text = ", ".join(ids)
    if len(text) <= MAX_TARGET:
        return text
    shown: list[str] = []
    for item in ids:
        if len(", ".join([*shown, item])) > MAX_TARGET - 40:
            break
        shown.append(item)
    return f"{', '.join(shown)} and {len(ids) - len(shown)} more"


def bounded(value: Any, level: int = 0) -> Any:
    """A summary cut to size: strings to ``MAX_TEXT``, lists to ``MAX_ITEMS``, ``MAX_LEVELS`` deep,
    credentials masked. What goes in is names, types and counts; the bound is the guard."""
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "..."
    if isinstance(value, bool | int | float) or value is None:
        return value
    if level >= MAX_LEVELS:
        return "..."
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ITEMS]
        return {str(k)[:MAX_TEXT]: bounded(v, level + 1) for k, v in items}
    if isinstance(value, list | tuple):
        cut = [bounded(v, level + 1) for v in list(value)[:MAX_ITEMS]]
        return cut if len(value) <= MAX_ITEMS else [*cut, f"... {len(value) - MAX_ITEMS} more"]
    return str(value)[:MAX_TEXT]


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    target: str,
    summary: dict[str, Any] | None = None,
    role: str | None = None,
) -> None:
    """Add one operator action to the audit, in the caller's transaction (never commits)."""
    row = OperatorAction(
        at=utcnow(),
        actor=actor[:250],
        role=role,
        action=action[:100],
        target=target[:MAX_TARGET],
        summary=redact(bounded(summary)) if summary is not None else None,
    )
    session.add(row)
    logger.info(
        "operator action %s on %s by %s",
        row.action,
        row.target,
        row.actor,
        extra={"source": row.actor, "event_type": row.action},
    )


def view(row: OperatorAction) -> dict[str, Any]:
    return {
        "id": row.id,
        "at": row.at.isoformat(),
        "actor": row.actor,
        "role": row.role,
        "action": row.action,
        "target": row.target,
        "summary": row.summary or {},
    }


def list_page(
    session: Session, *, page: int, page_size: int, action: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """One page of the audit, newest first, and the total; ``action``: only that action, or
    those starting with it and a dot (``grant`` finds ``grant.create``)."""
    query = select(OperatorAction)
    count = select(func.count()).select_from(OperatorAction)
    if action:
        condition = (OperatorAction.action == action) | OperatorAction.action.startswith(
            f"{action}.", autoescape=True
        )
        query, count = query.where(condition), count.where(condition)
    rows = session.scalars(
        query.order_by(OperatorAction.at.desc(), OperatorAction.id.desc())
        .offset(page * page_size)
        .limit(page_size)
    ).all()
    return [view(r) for r in rows], int(session.scalar(count) or 0)
