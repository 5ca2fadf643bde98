"""Workflow instances as the console's Elsa API reads them: filtered pages, one instance with
its state, the journal, variables, and deleting a finished instance."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, false, func, or_, select
from sqlalchemy.orm import Session

from broker.errors import Conflict, NotFound
from broker.store.models import (
    ActivityExecution,
    InstanceStatus,
    StepResult,
    WorkflowInstance,
)

ORDER_COLUMNS = {
    "created": WorkflowInstance.created_at,
    "updated": WorkflowInstance.updated_at,
    "finished": WorkflowInstance.finished_at,
    "name": WorkflowInstance.name,
}


@dataclasses.dataclass(frozen=True)
class TimestampFilter:
    """Elsa's ``TimestampFilter``: a column (created, updated, finished), an operator and a time;
    a time at midnight means that whole day, as Elsa reads it."""

    column: str
    operator: str  # Is, IsNot, LessThan, GreaterThan, LessThanOrEqual, GreaterThanOrEqual
    timestamp: dt.datetime

    def condition(self) -> ColumnElement[bool]:
        column = ORDER_COLUMNS[self.column]
        given = self.timestamp if self.timestamp.tzinfo else self.timestamp.replace(tzinfo=dt.UTC)
        at = given.astimezone(dt.UTC)  # stored times are UTC
        if given.time() != dt.time(0):
            return {
                "Is": column == at,
                "IsNot": column != at,
                "LessThan": column < at,
                "GreaterThan": column > at,
                "LessThanOrEqual": column <= at,
                "GreaterThanOrEqual": column >= at,
            }[self.operator]
        day, next_day = at, at + dt.timedelta(days=1)
        return {
            "Is": and_(column >= day, column < next_day),
            "IsNot": or_(column < day, column >= next_day),
            "LessThan": column < day,
            "GreaterThan": column > next_day,
            "LessThanOrEqual": column <= next_day,
            "GreaterThanOrEqual": column >= day,
        }[self.operator]


@dataclasses.dataclass(frozen=True)
class InstanceFilter:
    statuses: Sequence[str] = ()
    sub_statuses: Sequence[str] = ()
    definition_ids: Sequence[str] = ()
    correlation_id: str | None = None
    version: int | None = None
    search: str | None = None
    has_incidents: bool | None = None
    system_only: bool = False  # the broker runs no system workflows
    timestamps: Sequence[TimestampFilter] = ()


@dataclasses.dataclass(frozen=True)
class JournalRow:
    sequence: int
    activity_id: str
    activity_instance_id: str | None
    activity_type: str
    activity_name: str | None
    event_name: str
    outcome: str | None
    attempt: int
    payload: dict[str, Any] | None
    timestamp: dt.datetime


def summary(instance: WorkflowInstance) -> dict[str, Any]:
    """Elsa's ``WorkflowInstanceSummary``."""
    return {
        "id": instance.id,
        "definitionId": instance.definition_id,
        "definitionVersionId": instance.definition_version_id,
        "version": instance.version,
        "status": instance.status,
        "subStatus": instance.sub_status,
        "correlationId": instance.correlation_id,
        "name": instance.name,
        "incidentCount": instance.incident_count,
        "isSystem": False,
        "createdAt": _iso(instance.created_at),
        "updatedAt": _iso(instance.updated_at),
        "finishedAt": _iso(instance.finished_at),
    }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _where(f: InstanceFilter) -> list[ColumnElement[bool]]:
    table = WorkflowInstance
    where: list[ColumnElement[bool]] = []
    if f.statuses:
        where.append(func.lower(table.status).in_([s.lower() for s in f.statuses]))
    if f.sub_statuses:
        where.append(func.lower(table.sub_status).in_([s.lower() for s in f.sub_statuses]))
    if f.definition_ids:
        where.append(table.definition_id.in_(list(f.definition_ids)))
    if f.correlation_id:
        where.append(table.correlation_id == f.correlation_id)
    if f.version is not None:
        where.append(table.version == f.version)
    if f.has_incidents is not None:
        where.append(table.incident_count > 0 if f.has_incidents else table.incident_count == 0)
    if f.system_only:
        where.append(false())
    where.extend(t.condition() for t in f.timestamps)
    if f.search:
        term = f"%{f.search.lower()}%"
        where.append(
            or_(
                func.lower(table.id).like(term),
                func.lower(func.coalesce(table.name, "")).like(term),
                func.lower(func.coalesce(table.correlation_id, "")).like(term),
                func.lower(table.definition_id).like(term),
            )
        )
    return where


def page(
    session: Session,
    f: InstanceFilter,
    *,
    offset: int,
    limit: int,
    order_by: str = "created",
    descending: bool = True,
) -> tuple[list[dict[str, Any]], int]:
    """One page of instance summaries and the total count of matches."""
    where = _where(f)
    total = session.scalar(select(func.count()).select_from(WorkflowInstance).where(*where)) or 0
    column = ORDER_COLUMNS[order_by]
    ordering = column.desc() if descending else column.asc()
    rows = session.scalars(
        select(WorkflowInstance)
        .where(*where)
        .order_by(ordering, WorkflowInstance.id.desc())
        .offset(offset)
        .limit(limit)
    )
    return [summary(r) for r in rows], int(total)


def _get(session: Session, instance_id: str) -> WorkflowInstance:
    instance = session.get(WorkflowInstance, instance_id)
    if instance is None:
        raise NotFound(f"Workflow instance '{instance_id}' not found")
    return instance


def get(session: Session, instance_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the summary, the engine's state or ``{}`` once purged) of one instance."""
    instance = _get(session, instance_id)
    return summary(instance), dict(instance.state or {})


def find(session: Session, instance_id: str) -> tuple[dict[str, Any], dict[str, Any], bool] | None:
    """(summary, state, whether a step was saved) of an instance, None while it has no row."""
    instance = session.get(WorkflowInstance, instance_id)
    if instance is None:
        return None
    stepped = instance.checkpoint > 0 or instance.status == InstanceStatus.FINISHED
    return summary(instance), dict(instance.state or {}), stepped


def output_and_fault(session: Session, instance_id: str) -> tuple[Any, dict[str, Any] | None]:
    instance = _get(session, instance_id)
    return instance.output, instance.fault


@dataclasses.dataclass(frozen=True)
class JournalFilter:
    """Elsa's journal filter; None filters nothing (an empty list matches nothing)."""

    activity_ids: Sequence[str] | None = None
    excluded_activity_types: Sequence[str] | None = None
    event_names: Sequence[str] | None = None


def _journal_row(r: ActivityExecution) -> JournalRow:
    return JournalRow(
        sequence=r.sequence,
        activity_id=r.activity_id,
        activity_instance_id=r.activity_instance_id,
        activity_type=r.activity_type,
        activity_name=r.activity_name,
        event_name=r.event_name,
        outcome=r.outcome,
        attempt=r.attempt,
        payload=r.payload,
        timestamp=r.timestamp,
    )


def journal(
    session: Session,
    instance_id: str,
    *,
    offset: int,
    limit: int,
    only: JournalFilter | None = None,
) -> tuple[list[JournalRow], int]:
    """One page of an instance's journal in order, and the number of rows that match."""
    _get(session, instance_id)
    table = ActivityExecution
    where = [table.instance_id == instance_id]
    if only is not None and only.activity_ids is not None:
        where.append(table.activity_id.in_(list(only.activity_ids)))
    if only is not None and only.excluded_activity_types:
        where.append(table.activity_type.not_in(list(only.excluded_activity_types)))
    if only is not None and only.event_names is not None:
        where.append(table.event_name.in_(list(only.event_names)))
    total = session.scalar(select(func.count()).select_from(table).where(*where))
    rows = session.scalars(
        select(table).where(*where).order_by(table.sequence).offset(offset).limit(limit)
    )
    return [_journal_row(r) for r in rows], int(total or 0)


def last_journal_entry(session: Session, instance_id: str, activity_id: str) -> JournalRow | None:
    """The last Started, Completed or Faulted row of an activity in an instance."""
    table = ActivityExecution
    found = session.scalars(
        select(table)
        .where(
            table.instance_id == instance_id,
            table.activity_id == activity_id,
            table.event_name.in_(("Started", "Completed", "Faulted")),
        )
        .order_by(table.sequence.desc())
        .limit(1)
    ).first()
    return _journal_row(found) if found is not None else None


def delete_finished(session: Session, instance_id: str) -> None:
    """Delete a finished instance with its journal and step results; ``Conflict`` while it runs
    (cancel it first), so nothing can resume a deleted instance."""
    instance = _get(session, instance_id)
    if instance.status != InstanceStatus.FINISHED:
        raise Conflict(
            f"Workflow instance '{instance_id}' is still running; cancel it first",
            status=instance.status,
        )
    for table, column in (
        (ActivityExecution, ActivityExecution.instance_id),
        (StepResult, StepResult.instance_id),
    ):
        session.execute(delete(table).where(column == instance_id))
    session.delete(instance)
    session.flush()


def instance_of_activity(session: Session, activity_instance_id: str) -> str | None:
    """The workflow instance an activity instance (an execution record id) belongs to."""
    return session.scalar(
        select(ActivityExecution.instance_id)
        .where(ActivityExecution.activity_instance_id == activity_instance_id)
        .limit(1)
    )
