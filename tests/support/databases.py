"""PostgreSQL databases for tests: one per test, fresh, and cheap.

``CREATE DATABASE`` costs most of a second on this kind of machine, and running the migrations
another second; a test's own work is often a tenth of that. So a test that asks for a migrated
database gets one of these, cheapest first:

- a **spare**: a database a finished test handed back, emptied (every row deleted, every sequence
  restarted) after its schema was checked against the template's. A test claims it by renaming
  it to its own name, which only one claimer can do;
- a **copy of the schema template**, ``broker_schema_<digest of the migrations>``: migrated once
  by the first test process that needs it, then copied by every later one (across runs too, while
  the migrations stay the same). It is built under a name of its own and renamed into place, so a
  template of that name is always complete.

A database whose schema a test changed, or that something still holds open, is dropped instead
of kept. At most ``MAX_SPARES`` spares wait; the rest are dropped. Handing back and dropping run
on one background thread per process (``drain`` waits for it), so the next test need not wait.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import queue
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

#: spares kept per version of the schema; more would only take disk
MAX_SPARES = 8

#: the URLs of databases made from the schema template: already at the newest revision
MIGRATED_URLS: set[str] = set()

MIGRATIONS = Path(__file__).resolve().parents[2] / "broker" / "store" / "migrations"

#: what a reused database must still be: its tables, columns, keys, indexes and triggers, its
#: revision and its settings (a test that altered any of them leaves a database nobody reuses)
SCHEMA_DIGEST = sa.text(
    """
    SELECT md5(coalesce(string_agg(item, ',' ORDER BY item), '')) FROM (
        SELECT 'c ' || table_name || '.' || column_name || ' ' || data_type || ' '
               || is_nullable || ' ' || coalesce(column_default, '') AS item
          FROM information_schema.columns WHERE table_schema = 'public'
        UNION ALL SELECT 'i ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
        UNION ALL SELECT 'k ' || conname || ' ' || pg_get_constraintdef(oid)
          FROM pg_constraint WHERE connamespace = 'public'::regnamespace
        UNION ALL SELECT 't ' || tgname FROM pg_trigger WHERE NOT tgisinternal
        UNION ALL SELECT 'f ' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
        UNION ALL SELECT 'v ' || version_num FROM alembic_version
        UNION ALL SELECT 's ' || array_to_string(setconfig, ' ') FROM pg_db_role_setting
          WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    ) AS schema
    """
)


@functools.cache
def schema_fingerprint() -> str:
    """A digest of the migrations: the template and its spares serve while they stay the same."""
    digest = hashlib.sha256()
    for path in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(path.relative_to(MIGRATIONS).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def postgres_database(prefix: str, admin_url: str, *, migrated: bool = False) -> Iterator[str]:
    """A fresh PostgreSQL database named ``prefix_<random>``, empty or (``migrated``) at the
    newest revision; when the block ends, every engine of this process is disposed and the
    database is handed back (or dropped) in the background."""
    from broker.store.db import dispose_engines

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = _admin(admin_url)
    if migrated:
        _migrated_database(admin, admin_url, name)
    else:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = database_url(admin_url, name)
    if migrated:
        MIGRATED_URLS.add(url)
    try:
        yield url
    finally:
        MIGRATED_URLS.discard(url)
        dispose_engines()
        _cleaner().put((admin_url, name, migrated))


def database_url(admin_url: str, name: str) -> str:
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


@functools.cache
def _admin(admin_url: str) -> sa.Engine:
    return sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)


def _template() -> str:
    return f"broker_schema_{schema_fingerprint()}"


def _spare_prefix() -> str:
    return f"broker_spare_{schema_fingerprint()}_"


def _migrated_database(admin: sa.Engine, admin_url: str, name: str) -> None:
    """A spare renamed to ``name``, or else a copy of the template (built first if need be)."""
    with admin.connect() as conn:
        spares = conn.execute(
            sa.text("SELECT datname FROM pg_database WHERE starts_with(datname, :prefix)"),
            {"prefix": _spare_prefix()},
        ).scalars()
        for spare in list(spares):
            try:
                conn.execute(sa.text(f'ALTER DATABASE "{spare}" RENAME TO "{name}"'))
                return
            except sa.exc.DBAPIError:
                continue  # another process claimed it first
    for attempt in (1, 2):
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{_template()}"'))
            return
        except sa.exc.ProgrammingError:  # no template yet (or another run dropped it)
            if attempt == 2:
                raise
            _build_template(admin, admin_url)


def _build_template(admin: sa.Engine, admin_url: str) -> None:
    """Migrate a database of its own, note its schema digest, and rename it to the template's
    name in one step; a process that loses the race drops its copy."""
    from broker.store.db import dispose_engines, upgrade

    building = f"broker_schema_build_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{building}"'))
    url = database_url(admin_url, building)
    upgrade(url)
    dispose_engines()  # the engine ``upgrade`` made: a rename needs the database idle
    digest = _schema_digest(url)
    template = _template()
    with admin.connect() as conn:
        try:
            conn.execute(sa.text(f'ALTER DATABASE "{building}" RENAME TO "{template}"'))
        except sa.exc.ProgrammingError:  # another process renamed its copy first
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)'))
            return
        conn.execute(sa.text(f"COMMENT ON DATABASE \"{template}\" IS '{digest}'"))
        # Nobody connects to the template by mistake (a copy needs it idle).
        conn.execute(sa.text(f'ALTER DATABASE "{template}" ALLOW_CONNECTIONS false'))


def _schema_digest(url: str) -> str:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return str(conn.execute(SCHEMA_DIGEST).scalar_one())
    finally:
        engine.dispose()


def _hand_back(admin_url: str, name: str) -> bool:
    """Empty the database and make it a spare; False when it must be dropped instead (its
    schema changed, the template is gone, enough spares wait, or something holds it open)."""
    admin = _admin(admin_url)
    with admin.connect() as conn:
        expected = conn.execute(
            sa.text(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database"
                " WHERE datname = :template"
            ),
            {"template": _template()},
        ).scalar()
        waiting = conn.execute(
            sa.text("SELECT count(*) FROM pg_database WHERE starts_with(datname, :prefix)"),
            {"prefix": _spare_prefix()},
        ).scalar_one()
    if not expected or waiting >= MAX_SPARES:
        return False
    engine = sa.create_engine(database_url(admin_url, name), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            if conn.execute(SCHEMA_DIGEST).scalar_one() != expected:
                return False
            tables = conn.execute(
                sa.text(
                    "SELECT quote_ident(tablename) FROM pg_tables"
                    " WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
                )
            ).scalars()
            sequences = conn.execute(
                sa.text(
                    "SELECT quote_ident(sequence_name) FROM information_schema.sequences"
                    " WHERE sequence_schema = 'public'"
                )
            ).scalars()
            statements = [f"DELETE FROM {table}" for table in tables]  # noqa: S608 - quote_ident
            statements += [f"ALTER SEQUENCE {sequence} RESTART" for sequence in sequences]
            # Rows go in any order: the foreign keys' triggers are off for this transaction.
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
            for statement in statements:
                conn.execute(sa.text(statement))
            conn.commit()
    finally:
        engine.dispose()
    with admin.connect() as conn:
        spare = f"{_spare_prefix()}{uuid.uuid4().hex[:12]}"
        conn.execute(sa.text(f'ALTER DATABASE "{name}" RENAME TO "{spare}"'))
    return True


class _Cleaner:
    """One thread per process that hands back or drops the databases given to it, in order."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[tuple[str, str, bool]] = queue.Queue()
        threading.Thread(target=self._run, name="clean-databases", daemon=True).start()

    def put(self, item: tuple[str, str, bool]) -> None:
        self.queue.put(item)

    def _run(self) -> None:
        while True:
            admin_url, name, migrated = self.queue.get()
            try:
                kept = False
                with contextlib.suppress(sa.exc.SQLAlchemyError):
                    kept = migrated and _hand_back(admin_url, name)
                if not kept:
                    with _admin(admin_url).connect() as conn:
                        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            except sa.exc.SQLAlchemyError:
                pass  # the service went away (a chaos test): nothing is left to drop into
            finally:
                self.queue.task_done()


_CLEANER: _Cleaner | None = None
_CLEANER_LOCK = threading.Lock()


def _cleaner() -> _Cleaner:
    """This process's cleaner (a forked child starts its own; its parent cleans what it queued)."""
    global _CLEANER
    with _CLEANER_LOCK:
        if _CLEANER is None or _CLEANER.pid != os.getpid():
            _CLEANER = _Cleaner()
        return _CLEANER


def drain() -> None:
    """Wait until every database this process gave back is a spare or dropped."""
    if _CLEANER is not None and _CLEANER.pid == os.getpid():
        _CLEANER.queue.join()
