"""Poison work: outbox rows record the open start of their delivery and their worker deaths.

Revision 0005_poison, after 0004_operator_audit (2026-12-05)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_poison"
down_revision: str | None = "0004_operator_audit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("outbox", sa.Column("start_retries", sa.Integer(), nullable=True))
    op.add_column(
        "outbox",
        sa.Column("deaths", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("deaths")
        batch.drop_column("start_retries")
        batch.drop_column("started_at")
