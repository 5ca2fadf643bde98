"""Alembic's entry point: migrates the connection ``broker.store.db.upgrade`` hands over, or, run
as ``alembic -c broker/store/migrations/alembic.ini ...``, connects to ``-x url=...`` or else to
``BROKER_DATABASE_URL``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from broker.store.models import Base

# Any fixed number: every process that migrates takes the same PostgreSQL advisory lock, so two
# processes starting together migrate one after the other and the second finds nothing to do.
MIGRATION_LOCK_KEY = 0x62726F6B6572  # "broker"


def run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        compare_type=True,
        render_as_batch=sqlite,
        # broker.store.db begins SQLite transactions itself, so DDL there is transactional too.
        transactional_ddl=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        context.run_migrations()


def main() -> None:
    if context.is_offline_mode():
        raise SystemExit("offline (--sql) migrations are not supported; migrate a live database")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    from broker.settings import get_settings
    from broker.store.db import make_engine

    url = context.get_x_argument(as_dictionary=True).get("url") or get_settings().database_url
    engine = make_engine(url)
    with engine.connect().execution_options(broker_sqlite_begin="IMMEDIATE") as conn:
        run(conn)
        conn.commit()


main()
