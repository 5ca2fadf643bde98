"""Workflow definitions, triggers, drafts, instances, and the record of their steps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from broker.store.models.base import Base, Id, JsonColumn, utcnow
from broker.store.models.states import InstanceStatus, InstanceSubStatus


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


class AlterationPlan(Base):
    """An operator's alteration plan (Elsa's ``AlterationPlan``): the alterations, the filter that
    chose its instances, and one job per instance with its log
    (``broker.runtime.admin.alterations``)."""

    __tablename__ = "alteration_plans"

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    status: Mapped[str] = mapped_column(String(20))  # Pending, Running, Completed, Failed
    alterations: Mapped[list[Any]] = mapped_column(JsonColumn)
    filter: Mapped[dict[str, Any]]
    jobs: Mapped[list[Any]] = mapped_column(JsonColumn)  # [{id, workflowInstanceId, status, log}]
    created_by: Mapped[str | None] = mapped_column(String(200))  # the console principal
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None]
    completed_at: Mapped[dt.datetime | None]
