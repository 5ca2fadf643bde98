"""``broker console keys|users``: keys printed once and stored hashed, listed and revoked."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from broker.cli.console import console
from broker.settings import Settings, set_settings
from broker.store import credentials, db
from broker.store.models import ConsoleCredential


@pytest.fixture
def runner(settings: Settings) -> Iterator[CliRunner]:
    set_settings(settings)
    yield CliRunner()
    set_settings(None)
    db.dispose_engines()


def test_keys_create_prints_the_key_once_and_stores_its_hash(
    runner: CliRunner, settings: Settings
) -> None:
    result = runner.invoke(console, ["keys", "create", "ci", "--role", "designer", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["name"] == "ci"
    assert body["role"] == "designer"
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    with factory() as session:
        row = session.scalar(select(ConsoleCredential))
        assert row is not None
        assert row.secret_hash == credentials.key_hash(body["key"])
        assert body["key"] not in row.secret_hash
        assert credentials.find_key(session, body["key"]) is not None
    listed = runner.invoke(console, ["keys", "list", "--json"])
    assert [k["name"] for k in json.loads(listed.stdout)["items"]] == ["ci"]
    assert body["key"] not in listed.stdout


def test_a_taken_name_or_bad_role_fails_and_changes_nothing(runner: CliRunner) -> None:
    assert runner.invoke(console, ["keys", "create", "ci", "--role", "viewer"]).exit_code == 0
    taken = runner.invoke(console, ["keys", "create", "ci", "--role", "operator"])
    assert taken.exit_code == 1
    assert "already exists" in taken.output
    assert runner.invoke(console, ["keys", "create", "x", "--role", "root"]).exit_code == 2
    bad_name = runner.invoke(console, ["keys", "create", "no spaces", "--role", "viewer"])
    assert bad_name.exit_code == 1
    listed = json.loads(runner.invoke(console, ["keys", "list", "--json"]).stdout)["items"]
    assert listed[0]["name"] == "ci"
    assert listed[0]["role"] == "viewer"
    assert len(listed) == 1


def test_keys_revoke_by_name_and_404_when_missing(runner: CliRunner) -> None:
    runner.invoke(console, ["keys", "create", "ci", "--role", "viewer"])
    assert runner.invoke(console, ["keys", "revoke", "ci"]).exit_code == 0
    assert runner.invoke(console, ["keys", "revoke", "ci"]).exit_code == 3
    assert json.loads(runner.invoke(console, ["keys", "list", "--json"]).stdout)["items"] == []


def test_users_add_hashes_the_password_and_checks_its_length(
    runner: CliRunner, settings: Settings
) -> None:
    short = runner.invoke(
        console, ["users", "add", "bob", "--role", "viewer"], input="short\nshort\n"
    )
    assert short.exit_code == 1
    password = "a long enough password"
    added = runner.invoke(
        console, ["users", "add", "bob", "--role", "operator"], input=f"{password}\n{password}\n"
    )
    assert added.exit_code == 0, added.output
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    with factory() as session:
        row = session.get(ConsoleCredential, ("user", "bob"))
        assert row is not None
        assert row.secret_hash.startswith("scrypt$")
        assert password not in row.secret_hash
        assert credentials.verify_user(session, "bob", password) is not None
        assert credentials.verify_user(session, "bob", password + "!") is None
    assert runner.invoke(console, ["users", "remove", "bob"]).exit_code == 0
    assert json.loads(runner.invoke(console, ["users", "list", "--json"]).stdout)["items"] == []
