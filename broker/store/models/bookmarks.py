"""What a workflow waits on: bookmarks, the bookmark queue, schedules and timers."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from broker.store.models.base import Base, Id, utcnow


class Bookmark(Base):
    """A suspended activity waiting for a stimulus (event, timer, child completion, task result)."""

    __tablename__ = "bookmarks"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    instance_id: Mapped[str] = mapped_column(Id, index=True)
    activity_id: Mapped[str] = mapped_column(String(200))
    activity_instance_id: Mapped[str] = mapped_column(Id)
    name: Mapped[str] = mapped_column(String(200))  # stimulus name, e.g. Elsa.Event
    hash: Mapped[str] = mapped_column(String(64))  # SHA-256 of name + payload (+ activity instance)
    payload: Mapped[Any | None]
    correlation_id: Mapped[str | None] = mapped_column(String(200))
    client_key: Mapped[str | None] = mapped_column(String(200))  # owner of the request, if any
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_bookmarks_name_hash", "name", "hash"),)


class BookmarkQueueItem(Base):
    """A stimulus waiting to be matched to a bookmark; stays queued until matched or expired."""

    __tablename__ = "bookmark_queue"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    hash: Mapped[str | None] = mapped_column(String(64))
    correlation_id: Mapped[str | None] = mapped_column(String(200))
    client_key: Mapped[str | None] = mapped_column(String(200))
    instance_id: Mapped[str | None] = mapped_column(Id)
    activity_instance_id: Mapped[str | None] = mapped_column(Id)
    bookmark_id: Mapped[str | None] = mapped_column(Id)
    payload: Mapped[Any | None]  # the resume input
    options: Mapped[dict[str, Any] | None]
    delivery_attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index("ix_bookmark_queue_next_attempt", "next_attempt_at"),
        Index("ix_bookmark_queue_name_hash", "name", "hash"),
    )


class Schedule(Base):
    """A schedule trigger (Timer, Cron, StartAt) of a loaded workflow version; fired by beat.

    One row per (definition version, activity); each firing starts one instance, keyed by
    (definition version, activity, due time), then the row is re-armed (``due_at`` moves on; a
    StartAt's becomes NULL once it fired).
    """

    __tablename__ = "schedules"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    definition_id: Mapped[str] = mapped_column(String(200))
    definition_version_id: Mapped[str] = mapped_column(Id)
    activity_id: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(50))  # the trigger name, e.g. Elsa.Cron
    spec: Mapped[str] = mapped_column(String(200))  # the interval, cron expression or date
    due_at: Mapped[dt.datetime | None]
    last_fired_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index(
            "ix_schedules_due",
            "due_at",
            postgresql_where=text("due_at IS NOT NULL"),
            sqlite_where=text("due_at IS NOT NULL"),
        ),
        Index("ix_schedules_definition", "definition_id"),
    )


class Timer(Base):
    """A due time for a bookmark (Delay, Timer, StartAt); fired by beat, survives restarts."""

    __tablename__ = "timers"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    instance_id: Mapped[str] = mapped_column(Id, index=True)
    bookmark_id: Mapped[str] = mapped_column(Id, unique=True)
    due_at: Mapped[dt.datetime]
    fired_at: Mapped[dt.datetime | None]

    __table_args__ = (
        Index(
            "ix_timers_due",
            "due_at",
            postgresql_where=text("fired_at IS NULL"),
            sqlite_where=text("fired_at IS NULL"),
        ),
    )
