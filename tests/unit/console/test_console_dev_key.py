"""``broker run``'s development console key: in var/ only, reused, made again when it is gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli import supervise
from broker.errors import ConfigError
from broker.settings import Settings
from broker.store import credentials, db


@pytest.fixture
def migrated(settings: Settings) -> Iterator[Settings]:
    db.upgrade(settings.database_url)
    yield settings
    db.dispose_engines()


def test_the_dev_key_is_kept_in_var_and_reused(migrated: Settings) -> None:
    key = supervise.ensure_dev_console_key(migrated)
    path = migrated.var_path / supervise.DEV_CONSOLE_KEY_FILE
    assert path.read_text().strip() == key
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert supervise.ensure_dev_console_key(migrated) == key
    factory = db.make_session_factory(db.make_engine(migrated.database_url))
    with factory() as session:
        found = credentials.find_key(session, key)
    assert found is not None
    assert found.role == "operator"


def test_a_revoked_dev_key_is_replaced(migrated: Settings) -> None:
    first = supervise.ensure_dev_console_key(migrated)
    factory = db.make_session_factory(db.make_engine(migrated.database_url))
    with db.transaction(factory) as session:
        credentials.remove(session, credentials.KEY, supervise.DEV_CONSOLE_KEY)
    second = supervise.ensure_dev_console_key(migrated)
    assert second != first
    with factory() as session:
        assert credentials.find_key(session, first) is None
        assert credentials.find_key(session, second) is not None


def test_the_console_line_names_the_address_and_where_the_key_is_never_the_key(
    migrated: Settings,
) -> None:
    # Given the development key of a run
    key = supervise.ensure_dev_console_key(migrated)
    # When the banner is printed
    text = supervise.console_text(migrated.replace(console_bind="0.0.0.0:5090"))
    # Then it names the console's address and the key's file, and never the key (issue 34)
    assert text.splitlines()[0] == "Console (Elsa Studio): http://127.0.0.1:5090/sign-in"
    assert str(migrated.var_path / supervise.DEV_CONSOLE_KEY_FILE) in text
    assert key not in text
    tls = migrated.replace(console_bind="127.0.0.1:7000", console_tls_cert="c.pem")
    assert "https://127.0.0.1:7000/sign-in" in supervise.console_text(tls)


def test_the_dev_key_is_never_written_through_a_link(migrated: Settings, tmp_path: Path) -> None:
    # Given links, where the key and its scratch copy go, to a file of someone else's choosing
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("theirs\n")
    path = migrated.var_path / supervise.DEV_CONSOLE_KEY_FILE
    path.with_suffix(".tmp").symlink_to(elsewhere)
    # When the run makes its key
    key = supervise.ensure_dev_console_key(migrated)
    # Then the key is a private file of its own, and nothing was written through the link
    assert not path.is_symlink()
    assert path.read_text().strip() == key
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert elsewhere.read_text() == "theirs\n"


def test_a_dev_key_file_that_is_a_link_is_refused(migrated: Settings, tmp_path: Path) -> None:
    # Given a link in place of the key file (its target holds what someone wants used)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("bk_theirs\n")
    path = migrated.var_path / supervise.DEV_CONSOLE_KEY_FILE
    path.symlink_to(elsewhere)
    # When the run reads its key, then the link is refused, neither followed nor trusted
    with pytest.raises(ConfigError, match="symbolic link"):
        supervise.ensure_dev_console_key(migrated)
    assert elsewhere.read_text() == "bk_theirs\n"


def test_a_stale_dev_key_file_of_mode_0644_is_replaced_at_0600(migrated: Settings) -> None:
    # Given a key file and its scratch copy left readable by everyone (a key that is gone)
    path = migrated.var_path / supervise.DEV_CONSOLE_KEY_FILE
    for stale in (path, path.with_suffix(".tmp")):
        stale.write_text("bk_gone\n")
        stale.chmod(0o644)
    # When the run makes its key
    key = supervise.ensure_dev_console_key(migrated)
    # Then the file holds the new key, readable by its owner only
    assert path.read_text().strip() == key
    assert oct(path.stat().st_mode & 0o777) == "0o600"
