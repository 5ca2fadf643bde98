"""The tables: SQLAlchemy 2 declarative models, one class per table.

The database is the source of truth; the message transport is only a fast path. Every timestamp is
stored in UTC. JSON columns use JSONB on PostgreSQL and JSON text on SQLite. Ids are text (UUIDs or
deterministic ids derived from other ids), so one id can travel through Celery, logs and URLs.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from broker.redaction import redact, redact_optional

# Stable constraint names, so Alembic migrations are the same on every backend.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use broker.store.models.utcnow()")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


# none_as_null: a Python None is stored as SQL NULL, never as the JSON text 'null', so "IS NULL"
# means the same whether the attribute was set to None or never set.
JsonColumn = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
Id = String(64)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dt.datetime: UTCDateTime(), dict[str, Any]: JsonColumn, Any: JsonColumn}


def table_of(model: type[Base]) -> Table:
    """The Core table of a mapped class. The worker's hot statements are built once on it and
    run with bind parameters: building an ORM statement on every call costs more than the round
    trip to the database."""
    return cast(Table, model.__table__)


# States -------------------------------------------------------------------------------------------


class RequestStatus(enum.StrEnum):
    QUEUED = "Queued"
    PROCESSING = "Processing"
    COMPLETED = "Completed"
    FAULTED = "Faulted"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RequestStatus.COMPLETED, RequestStatus.FAULTED, RequestStatus.CANCELLED)


class InstanceStatus(enum.StrEnum):
    RUNNING = "Running"
    FINISHED = "Finished"


class InstanceSubStatus(enum.StrEnum):
    PENDING = "Pending"
    EXECUTING = "Executing"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"
    FAULTED = "Faulted"
    CANCELLED = "Cancelled"


class OutboxState(enum.StrEnum):
    PENDING = "pending"  # committed, not yet published (or due for a retry at available_at)
    DISPATCHED = "dispatched"  # published; the consumer has not recorded its result yet
    DONE = "done"  # the consumer finished it
    DEAD = "dead"  # gave up after max_outbox_delivery_attempts; see dead_letters


class DeadLetterKind(enum.StrEnum):
    REQUEST = "request"  # a request whose retries ran out
    OUTBOX = "outbox"  # an outbox row that could not be delivered
    BOOKMARK = "bookmark"  # a bookmark-queue item (reason Failed or Expired)
    WEBHOOK = "webhook"  # a webhook delivery that failed for its whole horizon


class WebhookDeliveryState(enum.StrEnum):
    PENDING = "pending"  # the next attempt is due at next_attempt_at
    DELIVERED = "delivered"  # the receiver answered 2xx
    DEAD = "dead"  # given up: see dead_letters (kind webhook)


# Requests and their audit trail -------------------------------------------------------------------


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


# Workflow definitions, triggers, instances --------------------------------------------------------


class WorkflowDefinition(Base):
    """One published version of a workflow file; old versions stay for running instances."""

    __tablename__ = "workflow_definitions"

    id: Mapped[str] = mapped_column(Id, primary_key=True)  # the version id
    definition_id: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(String(200))
    request_type: Mapped[str | None] = mapped_column(String(200))
    request_type_key: Mapped[str | None] = mapped_column(String(200))  # lower-cased
    queue: Mapped[str | None] = mapped_column(String(200))
    source_path: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    document: Mapped[dict[str, Any]]  # the workflow JSON as loaded
    is_latest: Mapped[bool] = mapped_column(Boolean, default=True)
    is_published: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        UniqueConstraint("definition_id", "version"),
        UniqueConstraint("definition_id", "content_hash"),
        Index("ix_workflow_definitions_request_type_key", "request_type_key"),
    )


class Trigger(Base):
    """An indexed trigger of a published definition (one row per trigger payload)."""

    __tablename__ = "triggers"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    definition_id: Mapped[str] = mapped_column(String(200))
    definition_version_id: Mapped[str] = mapped_column(Id, index=True)
    activity_id: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))  # the activity type, e.g. Elsa.HttpEndpoint
    hash: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[Any | None]

    __table_args__ = (Index("ix_triggers_name_hash", "name", "hash"),)


class WorkflowDraft(Base):
    """A definition saved from Elsa Studio and not yet published: at most one per definition.
    Publishing writes it as a file into the first workflow folder and deletes the draft."""

    __tablename__ = "workflow_drafts"

    definition_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    document: Mapped[dict[str, Any]]  # the workflow JSON as Studio saved it
    saved_by: Mapped[str | None] = mapped_column(String(200))  # the console principal
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class WorkflowInstance(Base):
    """A running or finished workflow: status, sub-status and the engine's serialized state."""

    __tablename__ = "workflow_instances"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    definition_id: Mapped[str] = mapped_column(String(200))
    definition_version_id: Mapped[str] = mapped_column(Id)
    version: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str | None] = mapped_column(Id, index=True)
    parent_id: Mapped[str | None] = mapped_column(Id, index=True)
    correlation_id: Mapped[str | None] = mapped_column(String(200), index=True)
    name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20), default=InstanceStatus.RUNNING)
    sub_status: Mapped[str] = mapped_column(String(20), default=InstanceSubStatus.PENDING)
    state: Mapped[dict[str, Any] | None]  # the engine's JSON state, with its format version
    output: Mapped[Any | None]
    fault: Mapped[dict[str, Any] | None]
    incident_count: Mapped[int] = mapped_column(Integer, default=0)
    checkpoint: Mapped[int] = mapped_column(Integer, default=0)  # bumps on every saved step
    heartbeat_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[dt.datetime | None]

    __table_args__ = (
        Index("ix_workflow_instances_status_heartbeat", "status", "sub_status", "heartbeat_at"),
        Index("ix_workflow_instances_definition", "definition_id", "status"),
    )


class ActivityExecution(Base):
    """The execution journal: one row per activity event (Started, Completed, Faulted, ...)."""

    __tablename__ = "activity_executions"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    instance_id: Mapped[str] = mapped_column(Id)
    sequence: Mapped[int] = mapped_column(Integer)  # order within the instance
    activity_id: Mapped[str] = mapped_column(String(200))
    activity_instance_id: Mapped[str | None] = mapped_column(Id)
    activity_type: Mapped[str] = mapped_column(String(200))
    activity_name: Mapped[str | None] = mapped_column(String(200))
    event_name: Mapped[str] = mapped_column(String(50))
    outcome: Mapped[str | None] = mapped_column(String(200))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    payload: Mapped[dict[str, Any] | None]
    timestamp: Mapped[dt.datetime] = mapped_column(default=utcnow)

    __table_args__ = (UniqueConstraint("instance_id", "sequence"),)


class StepResult(Base):
    """A completed side effect's stored output; a step with a stored result is not run again."""

    __tablename__ = "step_results"

    instance_id: Mapped[str] = mapped_column(Id, primary_key=True)
    step_key: Mapped[str] = mapped_column(String(200), primary_key=True)  # activity instance id
    output: Mapped[Any | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# Bookmarks, the bookmark queue, timers ------------------------------------------------------------


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


# Delivery: outbox and leases ----------------------------------------------------------------------


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


# Clients and request types (database rows override the JSON files) --------------------------------


class Client(Base):
    """An API client allowed in by its certificate."""

    __tablename__ = "clients"

    client_key: Mapped[str] = mapped_column(String(200), primary_key=True)  # lower-cased
    client_id: Mapped[str] = mapped_column(String(200))
    thumbprint: Mapped[str | None] = mapped_column(String(40), unique=True)  # SHA-1, upper hex
    fingerprint_sha256: Mapped[str | None] = mapped_column(String(64), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    scopes: Mapped[list[str] | None] = mapped_column(JsonColumn)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class RequestTypeRule(Base):
    """Which client may submit which request type, with its required keys."""

    __tablename__ = "request_type_rules"

    client_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_type_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(200))
    request_type: Mapped[str] = mapped_column(String(200))
    required_keys: Mapped[list[str] | None] = mapped_column(JsonColumn)
    allow_additional_keys: Mapped[bool] = mapped_column(Boolean, default=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


# Webhooks: endpoints, deliveries and their attempts -----------------------------------------------


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


# Rate limits --------------------------------------------------------------------------------------


class RateBucket(Base):
    """A client's rate-limit bucket kept in the database (``broker.rate_limits.DatabaseBuckets``):
    when its next token is due (GCRA's theoretical arrival time), in microseconds since 1970."""

    __tablename__ = "rate_buckets"

    key: Mapped[str] = mapped_column(String(250), primary_key=True)  # "<kind>:<client key>"
    arrival_us: Mapped[int] = mapped_column(BigInteger)


# Console credentials ------------------------------------------------------------------------------


class ConsoleCredential(Base):
    """An API key or a console user of the console listener, with its role.

    Only hashes are stored: a key's SHA-256 (keys are long random strings, so a fast hash is
    safe and lets a request find its key by index), a user's salted scrypt password hash.
    """

    __tablename__ = "console_credentials"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  # "key" or "user"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))  # viewer, designer, operator
    secret_hash: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
