"""Webhooks: endpoints, deliveries and their attempts."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from broker.store.models.base import Base, Id, JsonColumn, utcnow
from broker.store.models.states import WebhookDeliveryState


class WebhookEndpoint(Base):
    """Where a client is told about its requests' status changes (Standard Webhooks).

    ``source``: ``api`` (registered through ``POST /webhooks``), ``config`` (clients.json, kept in
    step by the sync job) or ``callback`` (a submission's one-off ``callbackUrl``, for that
    request only). ``secrets``: the signing secrets, current first; after a rotation the previous
    one signs too until ``previous_secret_expires_at``. Never shown after creation.
    """

    __tablename__ = "webhook_endpoints"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    client_id: Mapped[str] = mapped_column(String(200))
    client_key: Mapped[str] = mapped_column(String(200))  # lower-cased
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(JsonColumn)
    secrets: Mapped[list[str]] = mapped_column(JsonColumn)
    previous_secret_expires_at: Mapped[dt.datetime | None]
    source: Mapped[str] = mapped_column(String(20))
    request_id: Mapped[str | None] = mapped_column(Id)  # one-off callbacks only
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    disabled_at: Mapped[dt.datetime | None]
    failing_since: Mapped[dt.datetime | None]  # first failure since the last success
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    __table_args__ = (Index("ix_webhook_endpoints_client_request", "client_key", "request_id"),)


class WebhookDelivery(Base):
    """One event for one endpoint: the exact body sent, its state and its retry schedule.

    ``message_id`` is the ``webhook-id`` header, the same on every attempt (the receiver's
    deduplication key). Each attempt is an outbox row due at ``next_attempt_at``.
    """

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    message_id: Mapped[str] = mapped_column(Id)
    endpoint_id: Mapped[str] = mapped_column(Id)
    request_id: Mapped[str | None] = mapped_column(Id)
    event_type: Mapped[str] = mapped_column(String(50))
    body: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(20), default=WebhookDeliveryState.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime | None]
    retry_until: Mapped[dt.datetime | None]  # set by the first attempt (created + horizon)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None]

    __table_args__ = (
        Index("ix_webhook_deliveries_endpoint_created", "endpoint_id", "created_at"),
        Index("ix_webhook_deliveries_request_id", "request_id"),
    )


class WebhookAttempt(Base):
    """The delivery log: one row per attempt, with the status code and the latency."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    )
    delivery_id: Mapped[str] = mapped_column(Id, index=True)
    endpoint_id: Mapped[str] = mapped_column(Id)
    attempt: Mapped[int] = mapped_column(Integer)
    attempted_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(20))  # delivered, retry, dead
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_webhook_attempts_endpoint_attempted", "endpoint_id", "attempted_at"),
    )
