"""Alteration plans: an operator's alterations of workflow instances and their jobs.

Revision 0003_alterations, after 0002_studio_shell (2026-12-03)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003_alterations"
down_revision: str | None = "0002_studio_shell"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "alteration_plans",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("alterations", _JSON, nullable=False),
        sa.Column("filter", _JSON, nullable=False),
        sa.Column("jobs", _JSON, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_alteration_plans"),
    )


def downgrade() -> None:
    op.drop_table("alteration_plans")
