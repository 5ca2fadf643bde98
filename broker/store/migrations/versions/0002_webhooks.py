"""Webhooks: endpoints, deliveries and the delivery log (revision 0002_webhooks, after
0002_sec_auth, 2026-12-01); it names its own types instead of importing the models, so later
model changes cannot change what it creates."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_webhooks"
down_revision: str | None = "0002_sec_auth"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(64)
NAME = sa.String(200)
SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIME = sa.DateTime(timezone=True)
JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def column(name: str, type_: sa.types.TypeEngine, nullable: bool = False) -> sa.Column:
    return sa.Column(name, type_, nullable=nullable)


def optional(name: str, type_: sa.types.TypeEngine) -> sa.Column:
    return sa.Column(name, type_, nullable=True)


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        column("id", ID),
        column("client_id", NAME),
        column("client_key", NAME),
        column("url", sa.Text()),
        column("events", JSON),
        column("secrets", JSON),
        optional("previous_secret_expires_at", TIME),
        column("source", sa.String(20)),
        optional("request_id", ID),
        column("enabled", sa.Boolean()),
        optional("disabled_reason", sa.Text()),
        optional("disabled_at", TIME),
        optional("failing_since", TIME),
        column("created_at", TIME),
        column("updated_at", TIME),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
    )
    op.create_index(
        "ix_webhook_endpoints_client_request",
        "webhook_endpoints",
        ["client_key", "request_id"],
    )
    op.create_table(
        "webhook_deliveries",
        column("id", ID),
        column("message_id", ID),
        column("endpoint_id", ID),
        optional("request_id", ID),
        column("event_type", sa.String(50)),
        column("body", sa.Text()),
        column("state", sa.String(20)),
        column("attempts", sa.Integer()),
        optional("next_attempt_at", TIME),
        optional("retry_until", TIME),
        optional("last_status_code", sa.Integer()),
        optional("last_error", sa.Text()),
        column("created_at", TIME),
        optional("finished_at", TIME),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
    )
    op.create_index(
        "ix_webhook_deliveries_endpoint_created",
        "webhook_deliveries",
        ["endpoint_id", "created_at"],
    )
    op.create_index("ix_webhook_deliveries_request_id", "webhook_deliveries", ["request_id"])
    op.create_table(
        "webhook_attempts",
        column("id", SERIAL),
        column("delivery_id", ID),
        column("endpoint_id", ID),
        column("attempt", sa.Integer()),
        column("attempted_at", TIME),
        optional("status_code", sa.Integer()),
        column("latency_ms", sa.Integer()),
        column("outcome", sa.String(20)),
        optional("error", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_attempts"),
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id"])
    op.create_index(
        "ix_webhook_attempts_endpoint_attempted",
        "webhook_attempts",
        ["endpoint_id", "attempted_at"],
    )


def downgrade() -> None:
    for table in ("webhook_attempts", "webhook_deliveries", "webhook_endpoints"):
        op.drop_table(table)
