"""Migrations: `broker db` on PostgreSQL, processes migrating together, a database that is down."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from broker.cli.db import db
from broker.errors import StoreUnavailable
from broker.store.db import (
    current_revision,
    head_revision,
    is_current,
    make_engine,
    make_session_factory,
    transaction,
    upgrade,
)
from tests.support.services import PROJECT_ROOT, free_port


def test_upgrade_migrates_an_empty_postgresql_database_once(postgres_url: str) -> None:
    # Given a fresh, empty PostgreSQL database
    runner = CliRunner()
    assert not is_current(postgres_url)

    # When `db upgrade` runs twice
    first = runner.invoke(db, ["upgrade", "--url", postgres_url])
    second = runner.invoke(db, ["upgrade", "--url", postgres_url])

    # Then the first migrates it to head, the second does nothing, and `db check` passes
    assert first.exit_code == 0, first.output
    assert f"from empty to revision {head_revision()}" in first.output
    assert second.exit_code == 0, second.output
    assert f"already at revision {head_revision()}" in second.output
    assert runner.invoke(db, ["check", "--url", postgres_url]).exit_code == 0


def test_plain_postgresql_urls_are_accepted(postgres_url: str) -> None:
    # Given the database's URL without the driver name, as operators usually write it
    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")

    # When it is migrated, Then psycopg 3 is used and the migration lands
    upgrade(plain)
    assert current_revision(postgres_url) == head_revision()
    assert make_engine(plain).dialect.driver == "psycopg"


def test_processes_migrating_together_do_not_collide(empty_database_url: str) -> None:
    # Given several processes starting together on an empty database
    assert not is_current(empty_database_url)
    code = "import sys; from broker.store.db import upgrade; upgrade(sys.argv[1])"
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", code, empty_database_url],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(4)
    ]

    # When each migrates it
    outputs = []
    try:
        for process in starters:
            output, _ = process.communicate(timeout=120)
            outputs.append((process.returncode, output.decode(errors="replace")))
    finally:
        for process in starters:
            if process.poll() is None:
                process.kill()
                process.wait()

    # Then none failed (they take turns: an advisory lock on PostgreSQL, BEGIN IMMEDIATE on
    # SQLite) and the database is at head
    assert [code for code, _ in outputs] == [0] * len(starters), outputs
    assert is_current(empty_database_url)


@pytest.fixture
def unreachable_url() -> str:
    """A PostgreSQL URL pointing at a loopback port nothing listens on."""
    return f"postgresql://postgres@127.0.0.1:{free_port()}/broker"


def test_a_transaction_on_an_unreachable_database_raises_store_unavailable(
    unreachable_url: str,
) -> None:
    # Given a session factory for a database that is down
    factory = make_session_factory(make_engine(unreachable_url))

    # When a transaction starts, Then it raises StoreUnavailable, chained to the driver error
    with pytest.raises(StoreUnavailable) as caught, transaction(factory) as session:
        session.execute(text("SELECT 1"))
    assert caught.value.status == 503
    assert caught.value.__cause__ is not None


def test_migrating_an_unreachable_database_raises_store_unavailable(unreachable_url: str) -> None:
    with pytest.raises(StoreUnavailable):
        upgrade(unreachable_url)
    with pytest.raises(StoreUnavailable):
        current_revision(unreachable_url)


def test_db_commands_exit_1_when_the_database_is_unreachable(unreachable_url: str) -> None:
    # When `db upgrade` and `db check` run against a database that is down
    runner = CliRunner()
    upgraded = runner.invoke(db, ["upgrade", "--url", unreachable_url])
    checked = runner.invoke(db, ["check", "--url", unreachable_url])

    # Then both fail with exit 1 and say why
    assert upgraded.exit_code == 1
    assert "unreachable" in upgraded.output
    assert checked.exit_code == 1
