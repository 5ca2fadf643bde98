"""Fixtures shared by the whole suite: settings, and the real services on loopback.

A test that needs PostgreSQL, Redis or RabbitMQ asks for its fixture. When the service is not
reachable the test is skipped on a developer's machine and fails under ``CI=true``: CI must never
go green by skipping what it was meant to check. Each run uses its own PostgreSQL database and its
own Redis database number range, so concurrent runs do not collide.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ON_CI = os.environ.get("CI", "").lower() == "true"  # noqa: TID251 - the test runner's own switch

PG_ADMIN_URL = os.environ.get(  # noqa: TID251
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")  # noqa: TID251
AMQP_URL = os.environ.get("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")  # noqa: TID251
#: Elsa's conformance corpus lives outside the project and is never copied in
CORPUS = Path(
    os.environ.get("ELSA_CORPUS")  # noqa: TID251 - the test runner's own switch
    or PROJECT_ROOT.parent / "shared" / "elsa-corpus"
)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (locally) or fail (under CI=true) when a service is not listening."""
    if port_open(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if ON_CI:
        pytest.fail(f"{message} (CI=true: a missing service is a failure)")
    pytest.skip(message)


def require_corpus(found: object) -> None:
    """Skip (locally) or fail (under CI=true) when the Elsa corpus found nothing."""
    if found:
        return
    message = f"the Elsa corpus is not at {CORPUS} (set ELSA_CORPUS)"
    if ON_CI:
        pytest.fail(f"{message} (CI=true: the conformance suite must run)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin URL of the PostgreSQL service (skips or fails when it is down)."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    return PG_ADMIN_URL


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    import sqlalchemy as sa

    name = f"broker_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'broker.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test that takes this runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def redis_url() -> str:
    """A Redis database number chosen per test process, flushed before use."""
    require_service("Redis", "127.0.0.1", 6379)
    import redis

    db = 1 + (os.getpid() % 14)
    url = f"{REDIS_URL}/{db}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def amqp_url() -> str:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    return AMQP_URL
