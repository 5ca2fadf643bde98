"""Requests and their audit trail."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import BigInteger, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, validates

from broker.redaction import redact, redact_optional
from broker.store.models.base import Base, Id, utcnow
from broker.store.models.states import RequestStatus


class Request(Base):
    """One client submission; its status is what clients poll."""

    __tablename__ = "requests"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    client_id: Mapped[str] = mapped_column(String(200))  # as registered (case kept)
    client_key: Mapped[str] = mapped_column(String(200))  # lower-cased, for lookups
    request_type: Mapped[str] = mapped_column(String(200))  # as the workflow names it
    request_type_key: Mapped[str] = mapped_column(String(200))  # lower-cased
    keys: Mapped[dict[str, Any]]
    payload: Mapped[Any | None]
    status: Mapped[str] = mapped_column(String(20), default=RequestStatus.QUEUED)
    result: Mapped[Any | None]
    error_detail: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    body_hash: Mapped[str | None] = mapped_column(String(64))
    definition_id: Mapped[str | None] = mapped_column(String(200))
    definition_version: Mapped[int | None] = mapped_column(Integer)
    definition_version_id: Mapped[str | None] = mapped_column(Id)
    instance_id: Mapped[str | None] = mapped_column(Id)
    # Dispatches to a remote executor so far (None: never dispatched). A callback must be signed
    # with the token of the current one (``runtime.callbacks``).
    remote_attempt: Mapped[int | None] = mapped_column(Integer)
    submitted_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    completed_at: Mapped[dt.datetime | None]

    __table_args__ = (
        UniqueConstraint("client_key", "idempotency_key"),
        Index("ix_requests_client_submitted", "client_key", "submitted_at", "id"),
        Index("ix_requests_status_updated", "status", "updated_at"),
    )


class RequestEvent(Base):
    """The audit trail: one row per thing that happened to a request."""

    __tablename__ = "request_events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    request_id: Mapped[str] = mapped_column(Id, index=True)
    timestamp: Mapped[dt.datetime] = mapped_column(default=utcnow)
    event_type: Mapped[str] = mapped_column(String(50))  # RequestSubmitted, RequestCompleted, ...
    source: Mapped[str] = mapped_column(String(50))  # ingress, worker, beat, admin, callback
    message: Mapped[str | None] = mapped_column(Text)
    properties: Mapped[dict[str, Any] | None]

    # Clients read their audit trail: whatever a caller puts here loses its credentials first.
    @validates("message")
    def _redact_message(self, _key: str, value: str | None) -> str | None:
        return redact_optional(value)

    @validates("properties")
    def _redact_properties(self, _key: str, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else cast(dict[str, Any], redact(value))
