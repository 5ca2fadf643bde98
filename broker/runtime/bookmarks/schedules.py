"""Schedule triggers (Timer, Cron, StartAt): durable rows in SQL, fired by the timer job (beat)."""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.model.convert import parse_timespan
from broker.engine.model.cron import next_occurrence
from broker.engine.model.values import as_datetime
from broker.registry.triggers import CRON, TIMER
from broker.runtime import ids
from broker.runtime.bookmarks.triggers import (
    SYSTEM_CLIENT,
    Start,
    schedule_triggers,
    start_workflow,
)
from broker.store.models import Schedule

logger = logging.getLogger(__name__)

BATCH = 200
_TRIGGERS: dict[str, list[tuple[str, str, str]]] = {}  # by version id (versions never change)


def first_due(kind: str, spec: str, now: dt.datetime) -> dt.datetime:
    """When a newly published schedule first fires."""
    if kind == TIMER:
        return now + dt.timedelta(seconds=_interval(spec))
    if kind == CRON:
        return next_occurrence(spec, now)
    return as_datetime(spec)


def next_due(kind: str, spec: str, due: dt.datetime, now: dt.datetime) -> dt.datetime | None:
    """When a schedule that was due at ``due`` fires next, after it fired at ``now``."""
    if kind == TIMER:
        interval = _interval(spec)
        ticks = math.floor((now - due).total_seconds() / interval) + 1
        return due + dt.timedelta(seconds=interval * max(1, ticks))
    if kind == CRON:
        return next_occurrence(spec, now)
    return None  # StartAt fires once


def _interval(spec: str) -> float:
    seconds = parse_timespan(spec)
    if seconds <= 0:
        raise ValueError(f"a Timer interval must be positive, not {spec!r}")
    return seconds


def _triggers_of(workflow: Any) -> list[tuple[str, str, str]]:
    found = _TRIGGERS.get(workflow.version_id)
    if found is None:
        found = schedule_triggers(workflow.document)
        _TRIGGERS[workflow.version_id] = found
    return found


def schedule_id(version_id: str, activity_id: str) -> str:
    return ids.derive("schedule", version_id, activity_id)


def sync(session: Session, registry: Any, now: dt.datetime) -> None:
    """Make the rows match the registry's current versions. Never commits."""
    wanted: dict[str, tuple[Any, str, str, str]] = {}
    for loaded in registry.definitions():
        # A draft file keeps the schedules of its last published version, as Elsa indexes
        # triggers on publishing only.
        workflow = registry.get_definition(loaded.definition_id)
        if workflow is None:
            continue
        for activity_id, kind, spec in _triggers_of(workflow):
            wanted[schedule_id(workflow.version_id, activity_id)] = (
                workflow,
                activity_id,
                kind,
                spec,
            )
    existing = {row.id: row for row in session.scalars(select(Schedule))}
    for row_id, row in existing.items():
        if row_id not in wanted:
            logger.info(
                "schedule %s of %s (%s) removed", row.activity_id, row.definition_id, row.kind
            )
            session.delete(row)
    for row_id, (workflow, activity_id, kind, spec) in wanted.items():
        if row_id in existing:
            continue
        previous = _same_trigger(existing.values(), workflow.definition_id, activity_id, kind, spec)
        try:
            due = previous.due_at if previous is not None else first_due(kind, spec, now)
        except ValueError as exc:
            logger.warning(
                "schedule %s of %s not armed: %s", activity_id, workflow.definition_id, exc
            )
            continue
        session.add(
            Schedule(
                id=row_id,
                definition_id=workflow.definition_id,
                definition_version_id=workflow.version_id,
                activity_id=activity_id,
                kind=kind,
                spec=spec,
                due_at=due,
                last_fired_at=previous.last_fired_at if previous is not None else None,
                created_at=now,
            )
        )
        logger.info(
            "schedule %s of %s v%d (%s %s) armed for %s",
            activity_id,
            workflow.definition_id,
            workflow.version,
            kind,
            spec,
            due.isoformat() if due else None,
        )
    session.flush()


def _same_trigger(
    rows: Any, definition_id: str, activity_id: str, kind: str, spec: str
) -> Schedule | None:
    for row in rows:
        key = (row.definition_id, row.activity_id, row.kind, row.spec)
        if key == (definition_id, activity_id, kind, spec):
            return row  # type: ignore[no-any-return]
    return None


def fire_due(session: Session, registry: Any, now: dt.datetime) -> list[str]:
    """Start an instance for every due schedule and re-arm it; answers new outbox row ids."""
    rows = session.scalars(
        select(Schedule)
        .where(Schedule.due_at.is_not(None), Schedule.due_at <= now)
        .order_by(Schedule.due_at)
        .limit(BATCH)
    ).all()
    written: list[str] = []
    for row in rows:
        due = row.due_at
        assert due is not None
        workflow = registry.get_version(row.definition_version_id)
        if workflow is None:
            continue  # its version is gone: the next sync removes the row
        started = start_workflow(
            session,
            Start(
                workflow=workflow,
                activity_id=row.activity_id,
                trigger_name=row.kind,
                client_id=SYSTEM_CLIENT,
                key=("schedule", row.definition_version_id, row.activity_id, _iso(due)),
                trigger=_trigger_payload(row, due),
                source="beat",
            ),
        )
        if started is not None:
            written.append(started[1])
        row.last_fired_at = now
        row.due_at = next_due(row.kind, row.spec, due, now)
    session.flush()
    return written


def _trigger_payload(row: Schedule, due: dt.datetime) -> Mapping[str, Any]:
    return {"dueAt": _iso(due), "schedule": row.spec}


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat()
