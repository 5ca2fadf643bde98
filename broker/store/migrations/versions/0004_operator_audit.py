"""The operator audit: one row per operator action, with who, what and when.

Revision 0004_operator_audit, after 0003_alterations."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_operator_audit"
down_revision: str | None = "0003_alterations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "operator_actions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(250), nullable=False),
        sa.Column("role", sa.String(20), nullable=True),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("target", sa.String(500), nullable=False),
        sa.Column("summary", _JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_operator_actions"),
    )
    op.create_index("ix_operator_actions_at", "operator_actions", ["at"])


def downgrade() -> None:
    op.drop_index("ix_operator_actions_at", table_name="operator_actions")
    op.drop_table("operator_actions")
