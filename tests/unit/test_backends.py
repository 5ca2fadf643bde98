"""One scheme table per port, one URL parser: schemes are case-insensitive for every port."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.adapters.buckets import FileBuckets, RedisBuckets, make_rate_limiter, store_url
from broker.adapters.locks import (
    FileLockProvider,
    PostgresLockProvider,
    RedisLockProvider,
    is_local,
    make_lock_provider,
)
from broker.backends import BackendUrl, by_url, parse_backend_url, scheme_family
from broker.errors import ConfigError
from broker.outbound.mail import FileMailer, make_mailer
from broker.settings import Settings


def test_a_backend_url_keeps_its_location_and_lowers_its_scheme() -> None:
    url = parse_backend_url("BROKER_LOCK_URL", "  PostgreSQL+Psycopg://u:P@Host/DB  ")
    assert url == BackendUrl("BROKER_LOCK_URL", "postgresql+psycopg", "u:P@Host/DB")
    assert url.family == "postgresql"
    assert url.url == "postgresql+psycopg://u:P@Host/DB"
    assert url.plain_url == "postgresql://u:P@Host/DB"


@pytest.mark.parametrize("text", ["", "var/locks", "://x"])
def test_text_without_a_scheme_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_backend_url("BROKER_SMTP_URL", text)
    assert refused.value.message.startswith("BROKER_SMTP_URL=")


def test_an_unknown_scheme_names_the_setting_and_every_scheme_of_the_table() -> None:
    table = {"file": lambda url, context: url.location, "redis": lambda url, context: url.url}
    with pytest.raises(ConfigError) as refused:
        by_url("BROKER_X_URL", "zk://host", table, None)
    assert (
        refused.value.message == "BROKER_X_URL scheme 'zk' is not supported (file:// or redis://)"
    )


def test_a_driver_suffix_finds_its_family_in_the_table() -> None:
    table = {"postgresql": lambda url, context: (url.scheme, context)}
    assert by_url("S", "postgresql+psycopg://h/db", table, 7) == ("postgresql+psycopg", 7)


def test_scheme_family_is_empty_for_text_that_is_no_url() -> None:
    assert scheme_family("REDIS://h") == "redis"
    assert scheme_family("postgresql+psycopg://h") == "postgresql"
    assert scheme_family("redis") == ""


def test_every_port_reads_its_scheme_case_insensitively(settings: Settings, tmp_path: Path) -> None:
    # Given URLs whose schemes are written in upper case
    locks = make_lock_provider(settings.replace(lock_url=f"FILE://{tmp_path / 'locks'}"))
    redis_locks = make_lock_provider(settings.replace(lock_url="Redis://127.0.0.1:6379/1"))
    pg_locks = make_lock_provider(settings.replace(lock_url="POSTGRESQL+psycopg://h/db"))
    mailer = make_mailer(settings.replace(smtp_url=f"File://{tmp_path / 'mail'}"))
    file_limits = make_rate_limiter(
        settings.replace(rate_limit_url=f"FILE://{tmp_path / 'buckets'}")
    )
    redis_limits = make_rate_limiter(settings.replace(rate_limit_url="REDIS://127.0.0.1:6379/1"))
    # Then each port chooses the same backend as for the lower-case scheme
    assert isinstance(locks, FileLockProvider)
    assert isinstance(redis_locks, RedisLockProvider)
    assert isinstance(pg_locks, PostgresLockProvider)
    assert pg_locks.conninfo == "postgresql://h/db"
    assert isinstance(mailer, FileMailer)
    assert isinstance(file_limits.buckets, FileBuckets)
    assert isinstance(redis_limits.buckets, RedisBuckets)
    # And the automatic choices read schemes the same way
    assert is_local(settings.replace(lock_url=f"File://{tmp_path}"))
    assert store_url(settings.replace(lock_url="REDIS://cache:6379/1")) == "REDIS://cache:6379/1"
