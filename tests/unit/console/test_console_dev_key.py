"""``broker run``'s development console key: in var/ only, reused, made again when it is gone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.cli import supervise
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


def test_the_console_line_names_the_address_and_the_key_in_the_fragment(
    settings: Settings,
) -> None:
    text = supervise.console_text(settings.replace(console_bind="0.0.0.0:5090"), "bk_x")
    assert text.splitlines()[0] == "Console (Elsa Studio): http://127.0.0.1:5090/sign-in#key=bk_x"
    tls = settings.replace(console_bind="127.0.0.1:7000", console_tls_cert="c.pem")
    assert "https://127.0.0.1:7000/sign-in#key=bk_x" in supervise.console_text(tls, "bk_x")
