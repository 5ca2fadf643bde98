"""``broker db`` on SQLite, through click's CliRunner."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from broker.cli.db import db
from broker.settings import Settings, set_settings
from broker.store.db import current_revision, head_revision


@pytest.fixture
def configured(settings: Settings) -> Iterator[Settings]:
    set_settings(settings)
    yield settings
    set_settings(None)


def test_upgrade_migrates_an_empty_database_and_prints_the_revision(sqlite_url: str) -> None:
    # Given an empty SQLite file
    runner = CliRunner()

    # When it is upgraded
    result = runner.invoke(db, ["upgrade", "--url", sqlite_url])

    # Then it is at the newest revision and the output says so
    assert result.exit_code == 0, result.output
    assert f"to revision {head_revision()}" in result.output
    assert current_revision(sqlite_url) == head_revision()


def test_second_upgrade_is_a_no_op(sqlite_url: str) -> None:
    # Given a database upgraded once
    runner = CliRunner()
    assert runner.invoke(db, ["upgrade", "--url", sqlite_url]).exit_code == 0

    # When it is upgraded again
    result = runner.invoke(db, ["upgrade", "--url", sqlite_url])

    # Then nothing happens and the output says it was already there
    assert result.exit_code == 0, result.output
    assert f"already at revision {head_revision()}" in result.output


def test_check_fails_before_upgrade_and_passes_after(sqlite_url: str) -> None:
    runner = CliRunner()

    # Given an empty database, When it is checked, Then the check fails
    before = runner.invoke(db, ["check", "--url", sqlite_url])
    assert before.exit_code == 1
    assert "database is at none" in before.output

    # Given the upgraded database, When it is checked, Then the check passes
    assert runner.invoke(db, ["upgrade", "--url", sqlite_url]).exit_code == 0
    after = runner.invoke(db, ["check", "--url", sqlite_url])
    assert after.exit_code == 0, after.output


def test_current_prints_none_then_the_revision(sqlite_url: str) -> None:
    runner = CliRunner()

    # Given an empty database, When current is asked, Then it prints none
    assert runner.invoke(db, ["current", "--url", sqlite_url]).output.strip() == "none"

    # Given the upgraded database, Then it prints the head revision
    runner.invoke(db, ["upgrade", "--url", sqlite_url])
    assert runner.invoke(db, ["current", "--url", sqlite_url]).output.strip() == head_revision()


def test_commands_default_to_the_configured_database(configured: Settings) -> None:
    # Given settings whose database is a SQLite file in the test's var folder
    runner = CliRunner()

    # When upgrade runs without --url
    result = runner.invoke(db, ["upgrade"])

    # Then the configured database was migrated
    assert result.exit_code == 0, result.output
    assert current_revision(configured.database_url) == head_revision()
