"""Engines tuned per backend, sessions, transactions (``transaction()`` is the one place that
commits), migrations and the SQL lease fence; functions taking a session never commit."""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, case, create_engine, event, exc, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from broker.errors import ConfigError, StoreUnavailable
from broker.store import audit
from broker.store.models import Lease, utcnow
from broker.store.urls import normalize_url

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 15_000
POSTGRES_CONNECT_TIMEOUT_S = 10
#: execution option read by the SQLite "begin" hook: "IMMEDIATE" for writers, absent for readers
BEGIN_OPTION = "broker_sqlite_begin"

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()
# Alembic keeps its migration context in module globals: one migration per process at a time.
_migrate_lock = threading.Lock()


# Engines ------------------------------------------------------------------------------------------


def make_engine(url: str) -> Engine:
    """The engine for ``url``, created on first use and then shared by the whole process."""
    parsed = normalize_url(url)
    key = parsed.render_as_string(hide_password=False)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _create(parsed)
            _engines[key] = engine
        return engine


def dispose_engines() -> None:
    """Close every cached engine's pool and forget the engines (tests, shutdown)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.dispose()


def _create(url: URL) -> Engine:
    """A new engine for ``url``. Every engine hides its statements' parameters from the errors
    it raises (``hide_parameters``): they hold what clients and authors sent (payloads, drafts),
    and an error's text ends up in a log line."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _create_sqlite(url)
    if backend == "postgresql":
        if importlib.util.find_spec("psycopg") is None:
            raise ConfigError(
                "BROKER_DATABASE_URL names PostgreSQL, which needs the postgres extra: "
                "pip install 'elsa-celery-broker[postgres]'",
                field="BROKER_DATABASE_URL",
            )
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
        return create_engine(
            url, pool_pre_ping=True, connect_args=connect_args, hide_parameters=True
        )
    return create_engine(url, pool_pre_ping=True, hide_parameters=True)


def _is_memory(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or "mode=memory" in database


def _create_sqlite(url: URL) -> Engine:
    if not _is_memory(url) and not (url.database or "").startswith("file:"):
        Path(url.database or "").parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, hide_parameters=True
    )

    @event.listens_for(engine, "connect")
    def configure(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # SQLAlchemy, not the sqlite3 module, decides when a transaction begins (see "begin").
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def begin(conn: Any) -> None:
        # A writer takes the write lock at BEGIN, waiting up to busy_timeout; a deferred
        # transaction that later writes fails at once with "database is locked" when another
        # writer committed since its first read, and the busy handler cannot help it.
        mode = conn.get_execution_options().get(BEGIN_OPTION)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN")

    return engine


def _dispose_after_fork() -> None:
    # Celery's prefork children inherit the parent's pooled sockets: drop them without closing,
    # so the parent's connections stay usable, and let the child open its own.
    for engine in list(_engines.values()):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_dispose_after_fork)


# Sessions and transactions ------------------------------------------------------------------------


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``; objects stay readable after commit (no expiry), and their
    committed audit events become log lines (``broker.store.audit``)."""
    return audit.install(sessionmaker(bind=engine, expire_on_commit=False))


@contextmanager
def transaction(factory: sessionmaker[Session], *, write: bool = True) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on any error.

    ``write=True`` begins with ``BEGIN IMMEDIATE`` on SQLite (a no-op difference elsewhere).
    Raises ``StoreUnavailable`` when the database cannot be reached or the connection drops.
    """
    session = factory()
    try:
        try:
            session.connection(execution_options={BEGIN_OPTION: "IMMEDIATE"} if write else None)
        except (exc.OperationalError, exc.InterfaceError) as error:
            raise _unavailable(error) from error
        try:
            yield session
            session.commit()
        except exc.DBAPIError as error:
            if error.connection_invalidated or _server_unavailable(error):
                raise StoreUnavailable(
                    "the database connection was lost", reason=_reason(error)
                ) from error
            raise
    except BaseException:
        try:
            session.rollback()
        except exc.SQLAlchemyError:
            # The error that got us here says more than a rollback on a dead connection.
            logger.warning("rollback failed", exc_info=True)
        raise
    finally:
        session.close()


def holds_across_waits(session: Session) -> bool:
    """Whether a transaction that has only read may stay open while its caller waits (runs a
    workflow step) and then write: on PostgreSQL yes (its reads take no row locks, and under
    READ COMMITTED each later statement sees what others committed meanwhile); on SQLite no (a
    read transaction cannot become a writer once another connection has written)."""
    return session.get_bind().dialect.name != "sqlite"


def before_wait(session: Session) -> None:
    """Before the caller of a ``transaction(write=False)`` that will write later waits: on SQLite,
    end the read part (commit), so others may write meanwhile; elsewhere nothing, the one
    transaction stays open (``holds_across_waits``). Objects read stay readable (no expiry)."""
    if not holds_across_waits(session) and session.in_transaction():
        session.commit()


def begin_writing(session: Session) -> None:
    """Before the first write of a ``transaction(write=False)``: on SQLite, end the read part and
    begin again with ``BEGIN IMMEDIATE`` (the write lock, taken up front); elsewhere keep the
    transaction, or begin one when it was ended meanwhile (``HeldRead``). Raises
    ``StoreUnavailable`` as ``transaction`` does when no connection can be had."""
    immediate = not holds_across_waits(session)
    if immediate and session.in_transaction():
        session.commit()
    try:
        session.connection(execution_options={BEGIN_OPTION: "IMMEDIATE"} if immediate else None)
    except (exc.OperationalError, exc.InterfaceError) as error:
        raise _unavailable(error) from error


class HeldRead:
    """The read part of a transaction its owner keeps open while it waits (``before_wait``), which
    another thread ends (``end``) once the wait runs long, so no transaction stays idle for long
    (PostgreSQL's ``idle_in_transaction_session_timeout`` would end the session). The owner calls
    ``take_back`` when its wait is over, before it touches the session again: that waits for an
    ``end`` in flight, and a later ``end`` does nothing. After an ``end`` the session begins a new
    transaction at its next statement; the objects it read stay readable (no expiry)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._done = False

    def end(self) -> None:
        """From another thread, while the owner waits: commit the read part (it wrote nothing)."""
        with self._lock:
            if self._done:
                return
            self._done = True
            if not self._session.in_transaction():
                return
            try:
                self._session.commit()
            except exc.SQLAlchemyError:
                logger.warning("ending a held read transaction failed", exc_info=True)
                self._session.close()

    def take_back(self) -> None:
        """The owner's wait is over: the session is the owner's alone again."""
        with self._lock:
            self._done = True


#: SQLSTATEs of a server that cannot take the work now, whatever the statement: a lost
#: connection (class 08), a server shutting down or starting (57P01-57P03), a read-only standby
#: (25006: a connection made before a failover to a server that is no primary any more)
_UNAVAILABLE_STATES = ("57P01", "57P02", "57P03", "25006")


def _server_unavailable(error: exc.DBAPIError) -> bool:
    state = str(getattr(error.orig, "sqlstate", "") or "")
    return state.startswith("08") or state in _UNAVAILABLE_STATES


def _reason(error: exc.DBAPIError) -> str:
    return str(error.orig).strip().splitlines()[0] if error.orig else type(error).__name__


def _unavailable(error: exc.DBAPIError) -> StoreUnavailable:
    reason = _reason(error)
    if "database is locked" in reason:
        # SQLite's write lock stayed taken for the whole busy timeout: overloaded, try again.
        return StoreUnavailable("the database is busy", reason=reason)
    return StoreUnavailable("the database is unreachable", reason=reason)


# Migrations ---------------------------------------------------------------------------------------


def alembic_config() -> Config:
    """Alembic's configuration pointing at the migrations inside this package."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    return config


def head_revision() -> str:
    """The newest revision the code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS}")
    return head


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision``; safe to run twice and concurrently."""
    engine = make_engine(url)
    config = alembic_config()
    try:
        with _migrate_lock, engine.connect() as conn:
            conn = conn.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            conn.commit()
    except (exc.OperationalError, exc.InterfaceError) as error:
        raise _unavailable(error) from error
    logger.info("database at revision %s", current_revision(url))


def current_revision(url: str) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except (exc.OperationalError, exc.InterfaceError) as error:
        raise _unavailable(error) from error


def is_current(url: str) -> bool:
    """Whether the database is at the newest revision."""
    return current_revision(url) == head_revision()


# The lease fence ----------------------------------------------------------------------------------


def acquire_lease(session: Session, name: str, owner: str, ttl: float) -> int | None:
    """Take or renew the lease ``name`` for ``ttl`` seconds in one atomic statement.

    Returns the lease's epoch when ``owner`` holds it afterwards, None when another owner's lease
    is still live. A renewal of a live lease keeps its epoch; every takeover (of a missing,
    released or expired lease, even by the same owner) bumps it, so work stamped with an older
    epoch fails ``fence``. Clocks matter only for expiry, never for the fence itself.
    """
    now = utcnow()
    expires = now + dt.timedelta(seconds=ttl)
    dialect = session.get_bind().dialect.name
    insert: postgresql.Insert | sqlite.Insert
    if dialect == "postgresql":
        insert = postgresql.insert(Lease)
    elif dialect == "sqlite":
        insert = sqlite.insert(Lease)
    else:
        raise NotImplementedError(f"leases are not implemented on {dialect}")
    live_and_mine = (Lease.owner == owner) & (Lease.expires_at > now)
    stmt = (
        insert.values(name=name, owner=owner, epoch=1, expires_at=expires)
        .on_conflict_do_update(
            index_elements=[Lease.name],
            set_={
                Lease.owner: owner,
                Lease.expires_at: expires,
                Lease.epoch: case((live_and_mine, Lease.epoch), else_=Lease.epoch + 1),
            },
            where=(Lease.owner == owner) | Lease.expires_at.is_(None) | (Lease.expires_at <= now),
        )
        .returning(Lease.epoch)
    )
    epoch = session.execute(stmt).scalar_one_or_none()
    if epoch is None:
        logger.debug("lease %s is held by another owner; %s did not get it", name, owner)
        return None
    return int(epoch)


def release_lease(session: Session, name: str, owner: str) -> bool:
    """Let the lease go early (the next taker bumps the epoch); False if ``owner`` had it not."""
    stmt = (
        update(Lease)
        .where(Lease.name == name, Lease.owner == owner)
        .values(expires_at=None)
        .returning(Lease.epoch)
    )
    return session.execute(stmt).first() is not None


def fence(session: Session, name: str, owner: str, epoch: int, ttl: float) -> bool:
    """The fence UPDATE: renew lease ``name`` only if ``owner`` still holds it at ``epoch``.

    Run it first in the transaction whose commit must be fenced: on PostgreSQL the updated row
    stays locked until that commit, so a takeover (which updates the same row) waits for it; SQLite
    serializes write transactions (``BEGIN IMMEDIATE``), which gives the same guarantee. A holder
    that lost the lease, or retook it after it expired (a new epoch), matches no row: False.
    """
    result = session.execute(
        update(Lease)
        .where(Lease.name == name, Lease.owner == owner, Lease.epoch == epoch)
        .values(expires_at=utcnow() + dt.timedelta(seconds=ttl))
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
