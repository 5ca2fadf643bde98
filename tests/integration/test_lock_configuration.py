"""Which lock provider a ``BROKER_LOCK_URL`` gives, and what two releases must agree on.

Every URL form the README lists reaches its provider; a URL the broker cannot use is refused with
a message that says what would work. Lock file names and advisory keys are derived from the lock
name alone and never change between releases: during a rolling upgrade an old and a new process
must contend for the same file or key.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import psycopg
import pytest

from broker.adapters.locks import (
    FileLockProvider,
    PostgresLock,
    PostgresLockProvider,
    RedisLockProvider,
    advisory_key,
    make_lock_provider,
)
from broker.errors import ConfigError, LockLost, LockNotAcquired
from broker.settings import Settings

# Choosing a provider ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "rediss://redis.example:6380/0",
        "unix:///run/redis/redis.sock?db=0",
        "REDIS://127.0.0.1:6379/0",
    ],
)
def test_every_redis_url_form_gives_redis_locks(settings: Settings, url: str) -> None:
    locks = make_lock_provider(settings.replace(lock_url=url))
    assert isinstance(locks, RedisLockProvider)
    locks.close()


@pytest.mark.parametrize(
    ("url", "conninfo"),
    [
        ("postgresql://broker@db:5432/broker", "postgresql://broker@db:5432/broker"),
        ("postgres://broker@db/broker", "postgres://broker@db/broker"),
        ("PostgreSQL://broker@db/broker", "postgresql://broker@db/broker"),
        ("postgresql+psycopg://broker@db/broker", "postgresql://broker@db/broker"),
        # only the scheme loses its driver name: a '+' or '://' later in the URL stays
        (
            "postgresql+psycopg://broker:pa+ss@db/broker?application_name=relay://one",
            "postgresql://broker:pa+ss@db/broker?application_name=relay://one",
        ),
        # several servers (a primary and its standby): locks go to the one that takes writes
        (
            "postgresql+psycopg://broker@db1:5432,db2:5432/broker",
            "postgresql://broker@db1:5432,db2:5432/broker?target_session_attrs=read-write",
        ),
    ],
)
def test_every_postgresql_url_form_gives_advisory_locks_on_that_database(
    settings: Settings, url: str, conninfo: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=url))
    assert isinstance(locks, PostgresLockProvider)
    assert locks.conninfo == conninfo


@pytest.mark.postgres
def test_a_postgresql_url_without_a_driver_name_takes_real_advisory_locks(
    settings: Settings, postgres_url: str
) -> None:
    for scheme in ("postgresql", "postgres"):
        url = postgres_url.replace("postgresql+psycopg://", f"{scheme}://")
        locks = make_lock_provider(settings.replace(lock_url=url))
        lock = locks.acquire("plain-url", ttl=30)
        assert lock is not None
        assert lock.owned()
        lock.release()


def test_a_file_url_with_spaces_around_it_gives_file_locks_in_that_folder(
    settings: Settings, tmp_path: Path
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=f"  file://{tmp_path / 'held'}  "))
    assert isinstance(locks, FileLockProvider)
    assert locks.directory == tmp_path / "held"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file://", "BROKER_LOCK_URL file:// needs a folder, e.g. file://var/locks"),
        (
            "zookeeper://zk:2181",
            "BROKER_LOCK_URL scheme 'zookeeper' is not supported "
            "(file://, redis://, rediss://, unix://, postgresql:// or postgres://)",
        ),
        (
            "sqlite:///var/locks.db?uri=file://x",
            "BROKER_LOCK_URL scheme 'sqlite' is not supported "
            "(file://, redis://, rediss://, unix://, postgresql:// or postgres://)",
        ),
    ],
)
def test_an_unusable_lock_url_is_refused_saying_what_would_work(
    settings: Settings, url: str, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        make_lock_provider(settings.replace(lock_url=url))
    assert refused.value.message == message


def test_postgresql_locks_without_the_postgres_extra_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an installation without psycopg (a None entry makes the import system report it
    # as absent)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigError) as refused:
        PostgresLockProvider("postgresql://broker@db/broker")
    assert refused.value.message == (
        "BROKER_LOCK_URL names PostgreSQL, which needs the postgres extra: "
        "pip install 'elsa-celery-broker[postgres]'"
    )
    assert refused.value.details == {"field": "BROKER_LOCK_URL"}


# What two releases must agree on -----------------------------------------------------------------


def test_lock_file_names_read_as_the_lock_name_and_never_change(tmp_path: Path) -> None:
    locks = FileLockProvider(tmp_path)
    # the name as written (letters of both cases, digits, '.', '_', '-'), then a digest of it
    assert locks.path_for("outbox-relay") == tmp_path / "outbox-relay-a7c08337eb52.lock"
    assert locks.path_for("Relay.X").name == "Relay.X-5089a35b42c4.lock"
    # leading and trailing dots and underscores go, so no name hides the file or climbs out
    assert locks.path_for("._Xray_.").name.startswith("Xray-")
    # a name with nothing printable left still gets a readable stem
    assert locks.path_for("///").name == "lock-732c4e971163.lock"
    # a long name is cut to 80 characters; its digest keeps it distinct
    long_name = "a" * 100
    digest = hashlib.sha256(long_name.encode()).hexdigest()[:12]
    assert locks.path_for(long_name).name == f"{'a' * 80}-{digest}.lock"


def test_advisory_keys_never_change_and_use_the_whole_signed_range() -> None:
    assert advisory_key("outbox-relay") == -6358938397652667606
    assert advisory_key("bookmark-queue") == 1023172554211390123
    assert advisory_key("timers") == -2197909817371139970


def test_a_file_lock_folder_that_cannot_be_created_is_named_in_the_error(tmp_path: Path) -> None:
    # Given a lock folder path that is taken by a file
    blocked = tmp_path / "locks"
    blocked.write_text("not a folder")
    with pytest.raises(LockNotAcquired) as refused:
        FileLockProvider(blocked).acquire("relay")
    assert refused.value.message.startswith(f"cannot take file lock 'relay' in {blocked}: ")
    assert refused.value.details == {"name": "relay"}


def test_a_released_file_lock_cannot_be_extended_and_says_which(tmp_path: Path) -> None:
    lock = FileLockProvider(tmp_path).acquire("relay")
    assert lock is not None
    lock.extend(30)  # held: nothing to push back, nothing to complain about
    lock.release()
    with pytest.raises(LockLost) as lost:
        lock.extend(30)
    assert lost.value.message == "file lock 'relay' is no longer held"
    assert lost.value.details == {"name": "relay"}


# The connections behind the locks -----------------------------------------------------------------


def test_a_redis_lock_provider_bounds_its_connect_and_its_replies() -> None:
    # A Redis that stops answering must fail the lock call (LockNotAcquired), not hang the
    # beat job that asked: connecting gives up after 5 s, a reply after 10 s.
    locks = RedisLockProvider("redis://127.0.0.1:6379/0", default_ttl=30)
    options = locks.client.connection_pool.connection_kwargs
    assert (options["socket_connect_timeout"], options["socket_timeout"]) == (5, 10)
    locks.close()


@pytest.mark.postgres
def test_an_advisory_lock_session_is_idle_outside_any_transaction(
    settings: Settings, postgres_url: str
) -> None:
    # An advisory lock lives for hours in its session. Inside an open transaction that session
    # would hold back VACUUM and be cut by idle_in_transaction_session_timeout, which ends the
    # lock with it; connecting gives up after 10 s instead of hanging the job that asked.
    locks = make_lock_provider(settings.replace(lock_url=postgres_url))
    lock = locks.acquire("long-lived", ttl=30)
    assert isinstance(lock, PostgresLock)
    conninfo = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        state = admin.execute(
            "SELECT state FROM pg_stat_activity WHERE pid = %s",
            (lock._conn.info.backend_pid,),
        ).fetchone()
    assert state == ("idle",)
    assert lock._conn.info.get_parameters().get("connect_timeout") == "10"
    lock.release()
