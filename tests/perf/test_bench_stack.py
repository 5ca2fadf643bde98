"""The benchmark on production's backends: a tiny run on PostgreSQL + Redis, both sides.

The full benchmark is ``make bench``; this only proves the harness starts the stack on a fresh
database and its own Redis database, measures every figure and cleans up after itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from broker.errors import ConfigError
from tests.perf.bench.commands import Options, run_bench
from tests.perf.bench.harness import CLAIM_KEY
from tests.perf.bench.report import last_line
from tests.support.services import PG_ADMIN_URL, REDIS_URL, require_service

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def bench_databases() -> set[str]:
    admin = sa.create_engine(PG_ADMIN_URL)
    try:
        with admin.connect() as conn:
            rows = conn.execute(sa.text("SELECT datname FROM pg_database"))
            return {name for (name,) in rows if name.startswith("broker_bench_")}
    finally:
        admin.dispose()


def tiny(tmp_path: Path, **sizes: Any) -> Options:
    """A run on this machine's PostgreSQL and Redis with the given sizes and limits."""
    return Options(
        **sizes,
        engine_seconds=0.05,
        output=tmp_path / "latest.json",
        pg_admin_url=PG_ADMIN_URL,
        redis_url=REDIS_URL,
    )


def test_tiny_run_on_postgres_and_redis_measures_both_sides_and_cleans_up(tmp_path: Path) -> None:
    # Given PostgreSQL and Redis on loopback
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    before = bench_databases()
    options = tiny(
        tmp_path,
        requests=20,
        light=3,
        memory_requests=25,
        ingress_seconds=0.5,
        ingress_limit=20,
        threads=2,
        timeout=240,
    )
    # When a tiny benchmark runs
    result = run_bench(options)
    # Then every figure was measured on both sides
    assert result.broker.e2e is not None
    assert result.broker.e2e.completed == 20
    assert result.raw.e2e is not None
    assert result.raw.e2e.completed == 20
    assert result.memory is not None
    assert result.memory.high_requests >= 25
    assert "nan" not in last_line(result)
    # And its database is gone again
    assert bench_databases() == before


def test_a_run_refuses_a_redis_database_another_run_holds_and_leaves_it_alone(
    tmp_path: Path, redis_url: str
) -> None:
    # Given a Redis database that another bench run holds, with that run's queue in it
    require_service("PostgreSQL", "127.0.0.1", 5432)
    database = int(redis_url.rsplit("/", 1)[1])
    other = redis.Redis.from_url(redis_url)
    other.set(CLAIM_KEY, "4242:othertoken", ex=60)
    other.rpush("broker.default", "a task of the other run")
    before = bench_databases()
    options = tiny(tmp_path, requests=1, light=0, memory_requests=0, timeout=60, redis_db=database)
    try:
        # When a second run starts on it
        with pytest.raises(
            ConfigError, match=rf"Redis database {database} is in use .*process 4242"
        ):
            run_bench(options)
        # Then the other run's claim and queue are untouched and no database was left behind
        assert other.get(CLAIM_KEY) == b"4242:othertoken"
        assert other.lrange("broker.default", 0, -1) == [b"a task of the other run"]
        assert bench_databases() == before
    finally:
        other.flushdb()
