"""Store integration tests: the same checks on SQLite and on a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.settings import Settings
from broker.store.db import dispose_engines, upgrade


@pytest.fixture(autouse=True)
def fresh_engines() -> Iterator[None]:
    dispose_engines()
    yield
    dispose_engines()


@pytest.fixture
def settings(settings: Settings, database_url: str) -> Settings:
    """The suite's settings on each database, so ``factory`` runs on SQLite and PostgreSQL."""
    return settings.replace(database_url=database_url)


@pytest.fixture
def migrated_url(database_url: str) -> str:
    """``database_url`` migrated to the newest revision."""
    upgrade(database_url)
    return database_url
