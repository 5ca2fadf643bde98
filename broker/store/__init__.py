"""The database: SQLAlchemy models, sessions and transactions, credentials, the audit hook and
the Alembic migrations."""

__all__ = [
    "audit",
    "credentials",
    "db",
    "migrations",
    "models",
    "operator_actions",
    "rows",
    "urls",
]
