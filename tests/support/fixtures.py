"""The fixtures every tier shares (a pytest plugin, registered by ``tests/conftest.py``):
settings, the databases, the services on loopback, and a migrated session factory.

Each run uses its own PostgreSQL database and its own Redis database number range, so concurrent
runs do not collide. A module that needs other settings overrides ``settings`` (it may ask for
the suite's own ``settings`` and ``replace`` fields); ``factory`` then follows it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime.outbox.pause import forget_paused
from broker.settings import Settings
from broker.store.db import dispose_engines, make_engine, make_session_factory, upgrade
from tests.support.cache import built_once
from tests.support.databases import MIGRATED_URLS, schema_fingerprint
from tests.support.services import (
    AMQP_URL,
    PG_ADMIN_URL,
    PROJECT_ROOT,
    drain_drops,
    fresh_redis_url,
    postgres_database,
    require_service,
)


def migrate(url: str) -> None:
    """Bring the database at ``url`` to the newest revision. A database made from the schema
    template is there already; a SQLite file not yet created is a copy of the SQLite template
    (running the migrations costs a few hundred milliseconds per test, a second or more on
    PostgreSQL; the migrations themselves are tested on their own)."""
    if url in MIGRATED_URLS:
        return
    prefix = "sqlite:///"
    path = Path(url[len(prefix) :]) if url.startswith(prefix) else None
    if path is None or path.exists() or url.endswith(":memory:"):
        upgrade(url)
        return
    source = contextlib.closing(sqlite3.connect(sqlite_template()))
    with source as template_db, contextlib.closing(sqlite3.connect(path)) as target:
        template_db.backup(target)


def sqlite_template() -> Path:
    """A migrated SQLite database, made once per version of the migrations and shared by every
    test process."""

    def build(path: Path) -> None:
        upgrade(f"sqlite:///{path}")
        dispose_engines()

    name = f"broker-schema-{os.getuid()}-{schema_fingerprint()}.db"
    return built_once(Path(tempfile.gettempdir()) / name, build)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The databases of the last tests are dropped before the session ends."""
    drain_drops()


@pytest.fixture
def var_dir(tmp_path: Path) -> Path:
    path = tmp_path / "var"
    path.mkdir()
    return path


@pytest.fixture
def settings(var_dir: Path) -> Settings:
    """Embedded-default settings rooted in a temporary var folder."""
    return Settings.from_env(
        {
            "BROKER_VAR_DIR": str(var_dir),
            "BROKER_DATABASE_URL": f"sqlite:///{var_dir / 'broker.db'}",
            "BROKER_QUEUE_URL": "filesystem://",
            "BROKER_LOCK_URL": f"file://{var_dir / 'locks'}",
            "BROKER_WORKFLOW_PATHS": str(PROJECT_ROOT / "workflows"),
            "BROKER_CLIENTS_FILE": str(PROJECT_ROOT / "config" / "clients.json"),
            "BROKER_REQUEST_TYPES_FILE": str(PROJECT_ROOT / "config" / "requestTypes.json"),
            "BROKER_TLS_CERT": str(var_dir / "certs" / "server.pem"),
            "BROKER_TLS_KEY": str(var_dir / "certs" / "server.key"),
            "BROKER_TLS_CLIENT_CA": str(var_dir / "certs" / "ca.pem"),
            "BROKER_SMTP_URL": f"file://{var_dir / 'mail'}",
            "BROKER_WATCH_WORKFLOWS": "false",
        }
    )


@pytest.fixture
def factory(settings: Settings) -> Iterator[sessionmaker[Session]]:
    """A session factory on ``settings``' database, migrated to the newest revision; the
    process-wide engines and pause cache are fresh before and after."""
    dispose_engines()
    forget_paused()
    migrate(settings.database_url)
    yield make_session_factory(make_engine(settings.database_url))
    forget_paused()
    dispose_engines()


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin URL of the PostgreSQL service (skips or fails when it is down)."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    return PG_ADMIN_URL


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with postgres_database("broker_test", postgres_server) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'broker.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test that takes this runs once on SQLite and once on PostgreSQL (a PostgreSQL
    database already migrated; a SQLite file not yet created, which ``factory`` copies from the
    template)."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("migrated_postgres_url"))


@pytest.fixture
def migrated_postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh PostgreSQL database at the newest revision (a spare or a copy of the schema
    template), handed back or dropped afterwards."""
    with postgres_database("broker_test", postgres_server, migrated=True) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest) -> str:
    """A database never migrated, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def redis_url() -> str:
    """A Redis database number chosen per test process, flushed before use."""
    return fresh_redis_url()


@pytest.fixture
def amqp_url() -> str:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    return AMQP_URL
