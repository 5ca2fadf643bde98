"""Stored workflow versions and Studio drafts, as the console's Elsa API reads and writes them."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from broker.store.models import WorkflowDefinition, WorkflowDraft, utcnow


@dataclasses.dataclass(frozen=True)
class StoredVersion:
    """One published version as stored by the registry."""

    id: str
    definition_id: str
    version: int
    name: str | None
    document: dict[str, Any] = dataclasses.field(repr=False)
    is_latest: bool
    created_at: dt.datetime
    source_path: str | None


@dataclasses.dataclass(frozen=True)
class Draft:
    definition_id: str
    name: str | None
    document: dict[str, Any] = dataclasses.field(repr=False)
    saved_by: str | None
    created_at: dt.datetime
    updated_at: dt.datetime


def _version(row: WorkflowDefinition) -> StoredVersion:
    return StoredVersion(
        id=row.id,
        definition_id=row.definition_id,
        version=row.version,
        name=row.name,
        document=row.document,
        is_latest=row.is_latest,
        created_at=row.created_at,
        source_path=row.source_path,
    )


def _draft(row: WorkflowDraft) -> Draft:
    return Draft(
        definition_id=row.definition_id,
        name=row.name,
        document=row.document,
        saved_by=row.saved_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def versions_of(session: Session, definition_ids: Iterable[str]) -> list[StoredVersion]:
    """Every stored version of these definitions, by definition then version."""
    ids = sorted(set(definition_ids))
    if not ids:
        return []
    table = WorkflowDefinition
    rows = session.scalars(
        select(table)
        .where(table.definition_id.in_(ids))
        .order_by(table.definition_id, table.version)
    )
    return [_version(r) for r in rows]


def version_by_id(session: Session, version_id: str) -> StoredVersion | None:
    row = session.get(WorkflowDefinition, version_id)
    return _version(row) if row is not None else None


def highest_version(session: Session, definition_id: str) -> int:
    """The highest stored version number of a definition, 0 when none is stored."""
    found = session.scalar(
        select(func.max(WorkflowDefinition.version)).where(
            WorkflowDefinition.definition_id == definition_id
        )
    )
    return int(found or 0)


def drafts(session: Session) -> list[Draft]:
    return [_draft(r) for r in session.scalars(select(WorkflowDraft))]


def draft(session: Session, definition_id: str) -> Draft | None:
    row = session.get(WorkflowDraft, definition_id)
    return _draft(row) if row is not None else None


def save_draft_txn(
    session: Session, definition_id: str, document: dict[str, Any], saved_by: str | None
) -> Draft:
    """Create or replace the draft of a definition."""
    now = utcnow()
    name = document.get("name")
    row = session.get(WorkflowDraft, definition_id)
    if row is None:
        row = WorkflowDraft(definition_id=definition_id, created_at=now)
        session.add(row)
    row.name = name[:200] if isinstance(name, str) else None
    row.document = document
    row.saved_by = saved_by
    row.updated_at = now
    session.flush()
    return _draft(row)


def delete_draft_txn(session: Session, definition_id: str) -> bool:
    """Delete a definition's draft; True when there was one."""
    result = session.execute(
        delete(WorkflowDraft).where(WorkflowDraft.definition_id == definition_id)
    )
    return bool(getattr(result, "rowcount", 0))
