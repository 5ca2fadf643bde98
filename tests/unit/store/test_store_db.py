"""broker.store.db on SQLite: engine tuning, write transactions, rollback, caching, fork safety."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import QueuePool

from broker.errors import StoreUnavailable
from broker.store.db import (
    SQLITE_BUSY_TIMEOUT_MS,
    make_engine,
    make_session_factory,
    transaction,
    upgrade,
)
from broker.store.models import RuntimeFlag
from broker.store.urls import libpq_url, normalize_url


def record_statements(engine: Engine) -> list[str]:
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    return statements


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/broker", "postgresql+psycopg://u:p@db:5432/broker"),
        ("postgres://u@db/broker", "postgresql+psycopg://u@db/broker"),
        ("postgresql+psycopg://u@db/broker", "postgresql+psycopg://u@db/broker"),
        ("sqlite:///var/broker.db", "sqlite:///var/broker.db"),
    ],
)
def test_plain_postgresql_urls_are_routed_to_psycopg(given: str, expected: str) -> None:
    # When / Then
    assert normalize_url(given).render_as_string(hide_password=False) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # libpq's own form, as a PostgreSQL operator writes it
        (
            "postgresql+psycopg://u:p%40ss@h1:5432,h2:5433/broker?target_session_attrs=read-write",
            "postgresql+psycopg://u:p%40ss@/broker?host=h1%3A5432&host=h2%3A5433"
            "&target_session_attrs=read-write",
        ),
        # read-write is added when the URL names several servers and no target
        (
            "postgresql://h1:5432,h2/broker",
            "postgresql+psycopg:///broker?host=h1%3A5432&host=h2&target_session_attrs=read-write",
        ),
        # SQLAlchemy's form
        (
            "postgresql+psycopg://u@/broker?host=h1:5432&host=h2:5433",
            "postgresql+psycopg://u@/broker?host=h1%3A5432&host=h2%3A5433"
            "&target_session_attrs=read-write",
        ),
        # an operator's own choice is kept
        (
            "postgresql://u@h1,h2/broker?target_session_attrs=primary",
            "postgresql+psycopg://u@/broker?host=h1&host=h2&target_session_attrs=primary",
        ),
        # one server: as before
        ("postgresql://u@db:5432/broker", "postgresql+psycopg://u@db:5432/broker"),
    ],
)
def test_a_url_naming_several_servers_connects_to_the_one_that_takes_writes(
    given: str, expected: str
) -> None:
    # When the URL is read
    parsed = normalize_url(given)
    # Then it names every server, in order, and asks for the read-write one
    assert parsed.render_as_string(hide_password=False) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "postgresql+psycopg://u:p@/broker?host=h1:5432&host=h2:5433",
            "postgresql://u:p@h1:5432,h2:5433/broker?target_session_attrs=read-write",
        ),
        (
            "postgresql://h1:5432,h2:5433/broker",
            "postgresql://h1:5432,h2:5433/broker?target_session_attrs=read-write",
        ),
        ("postgresql+psycopg://u@db/broker", "postgresql://u@db/broker"),
    ],
)
def test_libpq_gets_the_servers_in_its_own_form(given: str, expected: str) -> None:
    # When / Then (what the PostgreSQL lock provider connects with)
    assert libpq_url(given) == expected


def test_a_multi_host_engine_hands_psycopg_every_server_and_the_target() -> None:
    # Given an engine on a URL naming two servers
    engine = make_engine("postgresql://u@127.0.0.1:5999,127.0.0.1:5998/broker")
    # When SQLAlchemy builds psycopg's connect arguments
    _, params = engine.dialect.create_connect_args(engine.url)
    # Then libpq tries both, for the one that takes writes
    assert params["host"] == "127.0.0.1,127.0.0.1"
    assert params["port"] == "5999,5998"
    assert params["target_session_attrs"] == "read-write"


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"server said {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize("sqlstate", ["25006", "57P01", "57P03", "08006"])
def test_a_server_that_cannot_take_the_work_now_is_unavailable_not_an_error(
    sqlite_url: str, sqlstate: str
) -> None:
    # Given a statement the server refuses because it is a standby, shutting down or gone
    from sqlalchemy import exc

    factory = make_session_factory(make_engine(sqlite_url))
    error = exc.OperationalError("UPDATE ...", {}, _PgError(sqlstate))
    # When it happens inside a transaction
    with pytest.raises(StoreUnavailable), transaction(factory):
        raise error
    # Then callers see StoreUnavailable: the ingress answers 503, a worker retries


def test_a_statement_error_of_the_work_itself_stays_what_it_is(sqlite_url: str) -> None:
    # Given an error of the statement, not of the server (a unique violation)
    from sqlalchemy import exc

    factory = make_session_factory(make_engine(sqlite_url))
    error = exc.IntegrityError("INSERT ...", {}, _PgError("23505"))
    # Then it is not mistaken for an unavailable database
    with pytest.raises(exc.IntegrityError), transaction(factory):
        raise error


def test_sqlite_engine_creates_the_folder_of_its_file(tmp_path: Path) -> None:
    # Given a database file in a folder that does not exist yet
    path = tmp_path / "deep" / "er" / "broker.db"

    # When the engine connects
    with make_engine(f"sqlite:///{path}").connect() as conn:
        conn.execute(text("SELECT 1"))

    # Then the folder and the file exist
    assert path.is_file()


def test_sqlite_connections_use_wal_busy_timeout_foreign_keys_and_normal_sync(
    sqlite_url: str,
) -> None:
    # Given the engine of a SQLite file
    engine = make_engine(sqlite_url)

    # When a connection is opened
    with engine.connect() as conn:
        journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        busy = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
        foreign_keys = conn.exec_driver_sql("PRAGMA foreign_keys").scalar()
        synchronous = conn.exec_driver_sql("PRAGMA synchronous").scalar()

    # Then each pragma is set (synchronous NORMAL is 1)
    assert journal == "wal"
    assert busy == SQLITE_BUSY_TIMEOUT_MS
    assert foreign_keys == 1
    assert synchronous == 1


def test_engines_are_cached_per_url(sqlite_url: str, tmp_path: Path) -> None:
    # When the same URL is asked for twice, and another URL once
    first = make_engine(sqlite_url)
    second = make_engine(sqlite_url)
    other = make_engine(f"sqlite:///{tmp_path / 'other.db'}")

    # Then the same URL gives the same engine
    assert first is second
    assert other is not first


def test_write_transactions_begin_immediate_and_reads_deferred(sqlite_url: str) -> None:
    # Given a session factory whose engine records every statement
    engine = make_engine(sqlite_url)
    statements = record_statements(engine)
    factory = make_session_factory(engine)

    # When one write and one read transaction run
    with transaction(factory) as session:
        session.execute(text("SELECT 1"))
    with transaction(factory, write=False) as session:
        session.execute(text("SELECT 2"))

    # Then the writer took the write lock at BEGIN and the reader did not
    begins = [s for s in statements if s.startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE", "BEGIN"]


def test_concurrent_read_modify_write_transactions_all_succeed(sqlite_url: str) -> None:
    # Given a migrated database with a counter row
    upgrade(sqlite_url)
    factory = make_session_factory(make_engine(sqlite_url))
    with transaction(factory) as session:
        session.add(RuntimeFlag(name="counter", value=0))
    threads, rounds = 4, 25
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def bump() -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=30)
                # Read, then write: a deferred transaction would fail to upgrade its read lock
                # ("database is locked") whenever another writer committed in between.
                with transaction(factory) as session:
                    flag = session.get(RuntimeFlag, "counter")
                    assert flag is not None
                    flag.value = (flag.value or 0) + 1
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    # When several threads bump it at the same moments
    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    # Then no transaction failed and no update was lost
    assert errors == []
    with transaction(factory, write=False) as session:
        assert session.scalar(select(RuntimeFlag.value).where(RuntimeFlag.name == "counter")) == (
            threads * rounds
        )


def test_transaction_commits_on_success(sqlite_url: str) -> None:
    # Given a migrated database
    upgrade(sqlite_url)
    factory = make_session_factory(make_engine(sqlite_url))

    # When a transaction adds a row and ends normally
    with transaction(factory) as session:
        session.add(RuntimeFlag(name="paused", value=True))

    # Then a new session sees it
    with transaction(factory, write=False) as session:
        assert session.get(RuntimeFlag, "paused") is not None


def test_transaction_rolls_back_when_the_block_raises(sqlite_url: str) -> None:
    # Given a migrated database
    upgrade(sqlite_url)
    factory = make_session_factory(make_engine(sqlite_url))

    # When a transaction adds a row, flushes it, then fails
    def add_then_fail() -> None:
        with transaction(factory) as session:
            session.add(RuntimeFlag(name="paused", value=True))
            session.flush()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        add_then_fail()

    # Then nothing was stored
    with transaction(factory, write=False) as session:
        assert session.get(RuntimeFlag, "paused") is None


def test_transaction_rolls_back_when_the_commit_fails(sqlite_url: str) -> None:
    # Given a row that exists
    upgrade(sqlite_url)
    factory = make_session_factory(make_engine(sqlite_url))
    with transaction(factory) as session:
        session.add(RuntimeFlag(name="paused", value=True))

    # When a later transaction writes another row and then a duplicate key
    def add_duplicate() -> None:
        with transaction(factory) as session:
            session.add(RuntimeFlag(name="other", value=1))
            session.add(RuntimeFlag(name="paused", value=False))

    with pytest.raises(IntegrityError):
        add_duplicate()

    # Then the whole transaction is gone, the other row too
    with transaction(factory, write=False) as session:
        assert session.get(RuntimeFlag, "other") is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connections(sqlite_url: str) -> None:
    # Given an engine whose pool holds a connection of this process
    engine = make_engine(sqlite_url)
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    assert pool.checkedin() == 1

    # When a child process is forked and uses the engine
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only, never return into pytest
        code = 1
        try:
            fresh = make_engine(sqlite_url).pool  # dispose() replaced the pool
            if isinstance(fresh, QueuePool) and fresh is not pool and fresh.checkedin() == 0:
                with make_engine(sqlite_url).connect() as conn:
                    code = 0 if conn.execute(text("SELECT 41 + 1")).scalar() == 42 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)

    # Then the child started with an empty pool and could query, and the parent still can
    assert os.waitstatus_to_exitcode(status) == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
