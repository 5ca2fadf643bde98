"""Store integration tests: the same checks on SQLite and on a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.store.db import dispose_engines, make_engine, make_session_factory, upgrade


@pytest.fixture(autouse=True)
def fresh_engines() -> Iterator[None]:
    dispose_engines()
    yield
    dispose_engines()


@pytest.fixture
def migrated_url(database_url: str) -> str:
    """``database_url`` migrated to the newest revision."""
    upgrade(database_url)
    return database_url


@pytest.fixture
def factory(migrated_url: str) -> sessionmaker[Session]:
    return make_session_factory(make_engine(migrated_url))
