"""Where the suite finds the checkout and the real services on loopback, and how a test asks for
one: skipped on a developer's machine when it is down, failed under ``CI=true`` (CI must never go
green by skipping what it was meant to check)."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import databases

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


@contextlib.contextmanager
def postgres_database(
    prefix: str = "broker_test", admin_url: str = PG_ADMIN_URL, *, migrated: bool = False
) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, empty or (``migrated``) at the newest revision,
    dropped or handed back for reuse when the block ends (``tests/support/databases.py``)."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    with databases.postgres_database(prefix, admin_url, migrated=migrated) as url:
        yield url


def drain_drops() -> None:
    """Wait until every database this process is done with is dropped or handed back."""
    databases.drain()


atexit.register(drain_drops)


def redis_databases() -> range:
    """The Redis databases this test process may flush: 1 to 14 (0 is the default, 15 the
    bench's), split between pytest-xdist's workers so that two workers never share one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # noqa: TID251 - set by pytest-xdist
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # noqa: TID251 - likewise
    index = int(worker[2:]) if worker.startswith("gw") else 0
    size = max(1, 14 // max(1, count))
    first = 1 + (index * size) % 14
    return range(first, min(first + size, 15))


def fresh_redis_url(offset: int = 0) -> str:
    """A Redis database number chosen per test process (``offset`` keeps two users of one process
    apart), flushed before use."""
    require_service("Redis", "127.0.0.1", 6379)
    import redis

    databases = redis_databases()
    url = f"{REDIS_URL}/{databases[(os.getpid() + offset) % len(databases)]}"
    redis.Redis.from_url(url).flushdb()
    return url
