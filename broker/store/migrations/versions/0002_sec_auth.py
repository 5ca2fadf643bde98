"""Remote callbacks are bound to a dispatch attempt: requests.remote_attempt.

Revision 0002_sec_auth, after 0002_studio_api (2026-12-01)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_sec_auth"
down_revision: str | None = "0002_studio_api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("requests", sa.Column("remote_attempt", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("remote_attempt")
