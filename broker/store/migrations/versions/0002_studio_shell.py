"""Console credentials: the console's API keys and users (hashes only).

Revision 0002_studio_shell, after 0002_sec_rate (2026-12-01)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_studio_shell"
down_revision: str | None = "0002_sec_rate"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_credentials",
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("secret_hash", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", name="pk_console_credentials"),
        sa.UniqueConstraint("secret_hash", name="uq_console_credentials_secret_hash"),
    )


def downgrade() -> None:
    op.drop_table("console_credentials")
