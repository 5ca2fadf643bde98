"""The execution journal: one ActivityExecution row per activity event the engine reports."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.redaction import redact
from broker.runtime.persist import recorded_values
from broker.store.models import ActivityExecution, table_of, utcnow
from broker.store.rows import insert_rows

_JOURNAL = table_of(ActivityExecution)


def next_sequence(session: Session, instance_id: str) -> int:
    highest = session.scalar(
        select(func.max(ActivityExecution.sequence)).where(
            ActivityExecution.instance_id == instance_id
        )
    )
    return int(highest or 0) + 1


def append(
    session: Session,
    instance_id: str,
    entries: Iterable[Any],
    *,
    attempt: int = 1,
    extra: dict[str, Any] | None = None,
    sequence: int | None = None,
) -> int:
    """Store the engine's journal entries (``broker.engine.run.results.JournalEntry``); answers how
    many rows were written. ``sequence`` is the first row's number when the caller knows it (a
    new instance starts at 1); otherwise it continues after the stored rows."""
    if sequence is None:
        sequence = next_sequence(session, instance_id)
    now = utcnow()
    rows = [
        {
            "instance_id": instance_id,
            "sequence": sequence + index,
            "activity_id": entry.activity_id,
            "activity_instance_id": entry.activity_instance_id,
            "activity_type": entry.activity_type,
            "activity_name": entry.activity_name,
            "event_name": entry.event_name,
            "outcome": entry.outcome,
            "attempt": attempt,
            "payload": recorded_values.payload(entry, None if extra is None else redact(extra)),
            "timestamp": getattr(entry, "timestamp", None) or now,
        }
        for index, entry in enumerate(entries)
    ]
    insert_rows(session, _JOURNAL, rows)
    return len(rows)


def record(
    session: Session,
    instance_id: str,
    *,
    activity_id: str,
    activity_type: str,
    event_name: str,
    attempt: int = 1,
    activity_instance_id: str | None = None,
    payload: dict[str, Any] | None = None,
    sequence: int | None = None,
) -> None:
    """Store one runtime event about an activity (e.g. ``RetryScheduled``); ``sequence`` as for
    ``append``."""
    session.add(
        ActivityExecution(
            instance_id=instance_id,
            sequence=next_sequence(session, instance_id) if sequence is None else sequence,
            activity_id=activity_id,
            activity_instance_id=activity_instance_id,
            activity_type=activity_type,
            activity_name=None,
            event_name=event_name,
            outcome=None,
            attempt=attempt,
            payload=None if payload is None else redact(payload),
            timestamp=utcnow(),
        )
    )
    session.flush()


def attempts_of(session: Session, instance_id: str, activity_id: str) -> list[int]:
    """The attempts recorded for an activity's ``Started`` events, in order (tests, views)."""
    rows = session.scalars(
        select(ActivityExecution.attempt)
        .where(
            ActivityExecution.instance_id == instance_id,
            ActivityExecution.activity_id == activity_id,
            ActivityExecution.event_name == "Started",
        )
        .order_by(ActivityExecution.sequence)
    )
    return list(rows)
