"""Schedule triggers: one row per Timer, Cron or StartAt trigger of a loaded workflow version.

Revision 0002_fidelity, after 0002_webhooks (2026-12-01)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_fidelity"
down_revision: str | None = "0002_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(64)
NAME = sa.String(200)
TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", ID, nullable=False),
        sa.Column("definition_id", NAME, nullable=False),
        sa.Column("definition_version_id", ID, nullable=False),
        sa.Column("activity_id", NAME, nullable=False),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("spec", NAME, nullable=False),
        sa.Column("due_at", TIME, nullable=True),
        sa.Column("last_fired_at", TIME, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_schedules"),
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["due_at"],
        postgresql_where=sa.text("due_at IS NOT NULL"),
        sqlite_where=sa.text("due_at IS NOT NULL"),
    )
    op.create_index("ix_schedules_definition", "schedules", ["definition_id"])


def downgrade() -> None:
    op.drop_index("ix_schedules_definition", table_name="schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")
