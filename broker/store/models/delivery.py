"""Delivery: dead letters, the transactional outbox, leases and the runtime's pause flag."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from broker.store.models.base import Base, Id, utcnow
from broker.store.models.states import OutboxState


class DeadLetter(Base):
    """Work that could not be done: a request out of retries, an undeliverable outbox row, a
    bookmark-queue item that failed or expired. Replay creates new work and marks it replayed."""

    __tablename__ = "dead_letters"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(String(50))  # Failed, Expired, Exhausted, Undeliverable
    request_id: Mapped[str | None] = mapped_column(Id, index=True)
    instance_id: Mapped[str | None] = mapped_column(Id, index=True)
    activity_id: Mapped[str | None] = mapped_column(String(200))
    source_id: Mapped[str | None] = mapped_column(Id)  # the outbox row or queue item it came from
    client_key: Mapped[str | None] = mapped_column(String(200))
    name: Mapped[str | None] = mapped_column(String(200))  # stimulus or task name
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    data: Mapped[dict[str, Any] | None]  # internal: what replay needs; never shown in views
    replayable: Mapped[bool] = mapped_column(Boolean, default=True)
    replayed_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_dead_letters_kind_created", "kind", "created_at"),)


class OutboxRow(Base):
    """A Celery task to publish, committed with the state change that asked for it."""

    __tablename__ = "outbox"

    id: Mapped[str] = mapped_column(Id, primary_key=True)  # also the Celery task id
    task_name: Mapped[str] = mapped_column(String(200))
    queue: Mapped[str] = mapped_column(String(200))
    args: Mapped[dict[str, Any]]  # ids only, never payloads
    state: Mapped[str] = mapped_column(String(20), default=OutboxState.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    request_id: Mapped[str | None] = mapped_column(Id)
    instance_id: Mapped[str | None] = mapped_column(Id)
    available_at: Mapped[dt.datetime] = mapped_column(default=utcnow)  # scheduled retries
    dispatched_at: Mapped[dt.datetime | None]
    lease_expires_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    #: the open start of the delivery running the row (None: none runs it), the Celery retry
    #: that started it, and how many deliveries ended with their worker process dead
    #: (``broker.runtime.outbox.deliveries``). Deferred, and the count defaulted by the server:
    #: rows are read and written without them, so the code also runs on the schema before
    #: migration 0005 (a rolling upgrade), where only poison work's count is missing.
    started_at: Mapped[dt.datetime | None] = mapped_column(
        deferred=True, server_default=text("NULL")
    )
    start_retries: Mapped[int | None] = mapped_column(
        Integer, deferred=True, server_default=text("NULL")
    )
    deaths: Mapped[int] = mapped_column(Integer, deferred=True, server_default=text("0"))
    # (their server defaults are not read back after an INSERT: nothing reads them then)
    __mapper_args__ = {"eager_defaults": False}

    __table_args__ = (
        Index(
            "ix_outbox_pending",
            "available_at",
            postgresql_where=text("state = 'pending'"),
            sqlite_where=text("state = 'pending'"),
        ),
        Index(
            "ix_outbox_dispatched",
            "lease_expires_at",
            postgresql_where=text("state = 'dispatched'"),
            sqlite_where=text("state = 'dispatched'"),
        ),
        Index("ix_outbox_instance", "instance_id"),
    )


class Lease(Base):
    """A named lease with a fencing epoch: work commits only while its epoch is current."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(200))
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    expires_at: Mapped[dt.datetime | None]


class RuntimeFlag(Base):
    """Operator switches shared by every process (e.g. the runtime pause)."""

    __tablename__ = "runtime_flags"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[Any | None]
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
