"""Rate-limit buckets kept in the database (when neither Redis nor files fit the deployment).

Revision 0002_sec_rate, after 0002_fidelity (2026-12-01)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_sec_rate"
down_revision: str | None = "0002_fidelity"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("arrival_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_rate_buckets"),
    )


def downgrade() -> None:
    op.drop_table("rate_buckets")
