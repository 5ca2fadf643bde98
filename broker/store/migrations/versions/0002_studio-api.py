"""Workflow drafts saved from Elsa Studio.

Revision 0002_studio_api, after 0001 (2026-12-01)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_studio_api"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.DateTime(timezone=True)
JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "workflow_drafts",
        sa.Column("definition_id", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("document", JSON, nullable=False),
        sa.Column("saved_by", sa.String(200), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("definition_id", name=op.f("pk_workflow_drafts")),
    )


def downgrade() -> None:
    op.drop_table("workflow_drafts")
