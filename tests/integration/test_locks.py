"""Lock providers against real backends: a folder, Redis and PostgreSQL.

Every provider must exclude a second holder (threads, and for file locks another process), give
up after its timeout, let the next holder in on release, and never let a former holder remove its
successor's lock.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from broker.adapters.locks import (
    REDIS_PREFIX,
    FileLockProvider,
    PostgresLock,
    PostgresLockProvider,
    RedisLock,
    RedisLockProvider,
    advisory_key,
    hold,
    make_lock_provider,
    warn_if_local_locks,
)
from broker.errors import ConfigError, LockLost, LockNotAcquired
from broker.runtime.ports import Lock, LockProvider
from broker.settings import Settings
from tests.support.services import PROJECT_ROOT, free_port

WAIT = 10.0  # upper bound for waits that are expected to succeed much sooner


@pytest.fixture(
    params=[
        "file",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgresql", marks=pytest.mark.postgres),
    ]
)
def lock_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'locks'}"
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def provider(settings: Settings, lock_url: str) -> Iterator[LockProvider]:
    locks = make_lock_provider(settings.replace(lock_url=lock_url))
    yield locks
    locks.close()


# Every provider -----------------------------------------------------------------------------------


def test_second_holder_is_refused_while_the_first_holds(provider: LockProvider) -> None:
    # Given a held lock
    first = provider.acquire("outbox", ttl=30)
    assert first is not None
    # When another holder tries without waiting, then it gets nothing
    assert provider.acquire("outbox", ttl=30) is None
    # And a lock of another name is independent
    other = provider.acquire("timers", ttl=30)
    assert other is not None
    other.release()
    first.release()


def test_waiting_past_the_timeout_returns_none(provider: LockProvider) -> None:
    with hold(provider, "instance-1", ttl=30):
        assert provider.acquire("instance-1", ttl=30, timeout=0.2) is None


def test_release_lets_a_waiting_holder_in(provider: LockProvider) -> None:
    # Given a held lock and a thread waiting for it
    first = provider.acquire("relay", ttl=30)
    assert first is not None
    waiting = threading.Event()
    got: list[Lock | None] = []

    def wait_for_it() -> None:
        waiting.set()
        got.append(provider.acquire("relay", ttl=30, timeout=WAIT))

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    waiting.wait(WAIT)
    # When the first holder releases
    first.release()
    thread.join(WAIT)
    # Then the waiter holds it, and the first holder no longer does
    [second] = got
    assert second is not None
    assert second.owned()
    assert not first.owned()
    second.release()


def test_threads_never_hold_the_lock_together(provider: LockProvider) -> None:
    # Given several threads that each enter the same lock a few times
    inside = 0
    overlaps = 0
    entries = 0
    counter = threading.Lock()

    def work() -> None:
        nonlocal inside, overlaps, entries
        for _ in range(5):
            with hold(provider, "shared", ttl=30, timeout=WAIT):
                with counter:
                    inside += 1
                    overlaps += inside > 1
                    entries += 1
                threading.Event().wait(0.001)  # give another thread a chance to barge in
                with counter:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    # Then every entry happened, one at a time
    assert entries == 20
    assert overlaps == 0


def test_release_is_idempotent_and_ends_ownership(provider: LockProvider) -> None:
    lock = provider.acquire("idempotent", ttl=30)
    assert lock is not None
    assert lock.owned()
    lock.release()
    lock.release()
    assert not lock.owned()
    with pytest.raises(LockLost):
        lock.extend(30)


def test_context_manager_releases_on_error(provider: LockProvider) -> None:
    with pytest.raises(RuntimeError), hold(provider, "ctx", ttl=30):
        raise RuntimeError("boom")
    again = provider.acquire("ctx", ttl=30)
    assert again is not None
    again.release()


def test_hold_raises_when_the_lock_stays_busy(provider: LockProvider) -> None:
    # Given a held lock, when hold() is asked for it again, then it raises instead of waiting
    first = provider.acquire("busy", ttl=30)
    assert first is not None
    with pytest.raises(LockNotAcquired, match="busy"), hold(provider, "busy", ttl=30):
        pass
    first.release()


def test_extend_keeps_the_lock_past_its_first_ttl(provider: LockProvider) -> None:
    # Given a lock taken with a short TTL and extended at once
    lock = provider.acquire("extended", ttl=0.2)
    assert lock is not None
    lock.extend(30)
    # When another holder waits longer than the first TTL, then it still gets nothing
    assert provider.acquire("extended", ttl=30, timeout=0.5) is None
    assert lock.owned()
    lock.release()


# Redis --------------------------------------------------------------------------------------------


@pytest.mark.redis
def test_expired_redis_lock_goes_to_the_next_holder_and_the_old_release_spares_it(
    settings: Settings, redis_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=redis_url))
    # Given a holder whose TTL runs out while it is paused
    old = locks.acquire("relay", ttl=0.2)
    assert old is not None
    # When another holder waits for it, then it gets it once the TTL expires
    new = locks.acquire("relay", ttl=30, timeout=WAIT)
    assert new is not None
    # Then the old holder knows it lost the lock, cannot extend it, and its release leaves the
    # new holder's key alone (the token does not match)
    assert not old.owned()
    with pytest.raises(LockLost):
        old.extend(30)
    old.release()
    assert new.owned()
    assert redis.Redis.from_url(redis_url).exists(REDIS_PREFIX + "relay") == 1
    new.release()
    locks.close()


@pytest.mark.redis
def test_redis_extend_without_ttl_restores_the_original_ttl(
    settings: Settings, redis_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=redis_url))
    lock = locks.acquire("reacquired", ttl=20)
    assert lock is not None
    client = redis.Redis.from_url(redis_url)
    client.pexpire(REDIS_PREFIX + "reacquired", 1000)  # as if most of the TTL had passed
    lock.extend()
    remaining_ms = client.pttl(REDIS_PREFIX + "reacquired")
    assert isinstance(remaining_ms, int)
    assert remaining_ms > 10_000
    lock.release()
    locks.close()


@pytest.mark.redis
def test_redis_extend_sets_the_ttl_rather_than_adding_to_it(
    settings: Settings, redis_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=redis_url))
    lock = locks.acquire("set-ttl", ttl=20)
    assert lock is not None
    lock.extend(2)
    remaining_ms = redis.Redis.from_url(redis_url).pttl(REDIS_PREFIX + "set-ttl")
    assert isinstance(remaining_ms, int)
    assert 0 < remaining_ms <= 2000
    lock.release()
    locks.close()


@pytest.mark.redis
def test_a_redis_lock_that_cannot_be_extended_says_which_and_why(
    settings: Settings, redis_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=redis_url))
    # Given a lock whose key expired
    lost = locks.acquire("lost", ttl=20)
    assert isinstance(lost, RedisLock)
    redis.Redis.from_url(redis_url).delete(REDIS_PREFIX + "lost")
    with pytest.raises(LockLost) as gone:
        lost.extend(5)
    assert gone.value.message == "Redis lock 'lost' is no longer held"
    assert gone.value.details == {"name": "lost"}
    # Given a lock whose Redis went away
    cut = locks.acquire("cut", ttl=20)
    assert isinstance(cut, RedisLock)
    # (no retries: redis-py's default backs off for seconds before it reports the refusal)
    cut._lock.redis = redis.Redis(
        port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    assert not cut.owned()
    with pytest.raises(LockLost) as down:
        cut.extend(5)
    assert down.value.message.startswith("cannot extend Redis lock 'cut': ")
    assert down.value.details == {"name": "cut"}
    locks.close()


def test_lock_ttl_setting_is_the_default_redis_ttl(settings: Settings) -> None:
    locks = make_lock_provider(settings.replace(lock_url="redis://127.0.0.1:6379/0", lock_ttl=7))
    assert isinstance(locks, RedisLockProvider)
    assert locks.default_ttl == 7
    locks.close()


# PostgreSQL ---------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_advisory_lock_ends_with_its_session(settings: Settings, postgres_url: str) -> None:
    locks = make_lock_provider(settings.replace(lock_url=postgres_url))
    # Given a held advisory lock
    lock = locks.acquire("instance-9", ttl=30)
    assert isinstance(lock, PostgresLock)
    # When its session dies (the holder's process crashed or the network dropped)
    conninfo = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
            " AND objid::bigint = %s",
            (advisory_key("instance-9") & 0xFFFF_FFFF,),
        ).fetchall()
    assert killed == [(True,)]
    # Then the lock is free for the next holder, and the old one knows it lost it
    successor = locks.acquire("instance-9", ttl=30, timeout=WAIT)
    assert successor is not None
    assert not lock.owned()
    with pytest.raises(LockLost):
        lock.extend()
    lock.release()  # harmless: the session is gone
    assert successor.owned()
    successor.release()


@pytest.mark.postgres
def test_an_advisory_lock_unlocked_behind_its_back_or_on_a_closed_session_is_not_owned(
    settings: Settings, postgres_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=postgres_url))
    # Given a held advisory lock that its session let go of (another code path unlocked it)
    lock = locks.acquire("instance-10", ttl=30)
    assert isinstance(lock, PostgresLock)
    assert lock.owned()
    lock._conn.execute("SELECT pg_advisory_unlock_all()")
    # Then it is not owned, and extending it says which lock was lost
    assert not lock.owned()
    with pytest.raises(LockLost) as info:
        lock.extend()
    assert info.value.message == "advisory lock 'instance-10' is no longer held"
    assert info.value.details == {"name": "instance-10"}
    lock.release()
    # Given a held lock whose connection was closed, Then it is not owned either
    closed = locks.acquire("instance-11", ttl=30)
    assert isinstance(closed, PostgresLock)
    closed._conn.close()
    assert not closed.owned()
    closed.release()
    locks.close()


@pytest.mark.postgres
def test_an_advisory_lock_is_held_in_the_database_of_the_lock_url(
    settings: Settings, postgres_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=postgres_url))
    lock = locks.acquire("instance-12", ttl=30)
    assert lock is not None
    database = postgres_url.rsplit("/", 1)[1]
    conninfo = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        held_in = admin.execute(
            "SELECT d.datname FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND l.objid::bigint = %s",
            (advisory_key("instance-12") & 0xFFFF_FFFF,),
        ).fetchall()
    lock.release()
    assert held_in == [(database,)]


def test_advisory_keys_are_signed_64_bit_and_stable() -> None:
    key = advisory_key("outbox")
    assert -(2**63) <= key < 2**63
    assert key == advisory_key("outbox") != advisory_key("outbox2")


# File locks ---------------------------------------------------------------------------------------

CHILD = """
import sys
from pathlib import Path
from broker.adapters.locks import FileLockProvider
lock = FileLockProvider(Path(sys.argv[1])).acquire(sys.argv[2], timeout=float(sys.argv[3]))
print("held" if lock else "busy", flush=True)
sys.stdin.read()
"""


def start_child(directory: Path, name: str, timeout: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), name, str(timeout)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
    )


def test_file_lock_excludes_another_process(tmp_path: Path) -> None:
    locks = FileLockProvider(tmp_path / "locks")
    # Given a child process holding the lock
    child = start_child(tmp_path / "locks", "beat", 0)
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "held"
        # When this process tries, then it is refused
        assert locks.acquire("beat", timeout=0) is None
        # And once the child exits, the lock is free
        child.stdin.close()
        child.wait(WAIT)
        lock = locks.acquire("beat", timeout=WAIT)
        assert lock is not None
        # And while this process holds it, a new child is refused
        second = start_child(tmp_path / "locks", "beat", 0)
        try:
            assert second.stdout is not None
            assert second.stdout.readline().strip() == "busy"
        finally:
            second.kill()
            second.wait(WAIT)
        lock.release()
    finally:
        child.kill()
        child.wait(WAIT)


def test_file_lock_of_a_killed_process_is_freed(tmp_path: Path) -> None:
    child = start_child(tmp_path, "worker", 0)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
    finally:
        child.kill()
        child.wait(WAIT)
    lock = FileLockProvider(tmp_path).acquire("worker", timeout=WAIT)
    assert lock is not None
    lock.release()


def test_file_lock_names_are_sanitized_and_distinct(tmp_path: Path) -> None:
    locks = FileLockProvider(tmp_path)
    path = locks.path_for("../instance/1")
    assert path.parent == tmp_path
    assert path.name.startswith("instance_1-")
    assert locks.path_for("a/b") != locks.path_for("a_b")


def test_relative_file_lock_folder_is_relative_to_the_working_directory(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    locks = make_lock_provider(settings.replace(lock_url="file://var/locks"))
    with hold(locks, "x"):
        assert list((tmp_path / "var" / "locks").glob("x-*.lock"))


# Choosing a provider and the startup warning ------------------------------------------------------


@pytest.mark.parametrize("url", ["zookeeper://zk:2181", "file://", "sqlite:///var/broker.db"])
def test_unsupported_lock_urls_are_refused(settings: Settings, url: str) -> None:
    with pytest.raises(ConfigError):
        make_lock_provider(settings.replace(lock_url=url))


@pytest.mark.parametrize(
    ("lock_url", "distributed", "allow_local", "warns"),
    [
        ("file://var/locks", True, False, True),
        ("file://var/locks", True, True, False),
        ("file://var/locks", False, False, False),
        ("redis://127.0.0.1:6379/0", True, False, False),
        ("postgresql+psycopg://db/broker", True, False, False),
    ],
)
def test_local_locks_warn_only_when_distributed_and_not_acknowledged(
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    lock_url: str,
    distributed: bool,
    allow_local: bool,
    warns: bool,
) -> None:
    configured = settings.replace(
        lock_url=lock_url, distributed=distributed, allow_local_locks=allow_local
    )
    with caplog.at_level(logging.WARNING, logger="broker.adapters.locks"):
        assert warn_if_local_locks(configured) is warns
    assert ("BROKER_ALLOW_LOCAL_LOCKS" in caplog.text) is warns


def test_a_lock_shows_its_kind_its_name_and_whether_it_was_released(tmp_path: Path) -> None:
    lock = FileLockProvider(tmp_path).acquire("relay", ttl=5, timeout=0)
    assert lock is not None
    assert repr(lock) == "<FileLock 'relay'>"
    lock.release()
    assert repr(lock) == "<FileLock 'relay' released>"


def test_a_lock_service_that_cannot_be_reached_is_named_in_the_error() -> None:
    port = free_port()
    redis_locks = RedisLockProvider(f"redis://127.0.0.1:{port}/0", default_ttl=10)
    with pytest.raises(LockNotAcquired) as redis_down:
        redis_locks.acquire("relay", ttl=5)
    redis_locks.close()
    assert redis_down.value.message.startswith("cannot take Redis lock 'relay': ")
    assert redis_down.value.details == {"name": "relay"}
    pg_locks = PostgresLockProvider(f"postgresql+psycopg://postgres@127.0.0.1:{port}/none")
    with pytest.raises(LockNotAcquired) as pg_down:
        pg_locks.acquire("relay", ttl=5)
    assert pg_down.value.message.startswith("cannot connect for advisory lock 'relay': ")
    assert pg_down.value.details == {"name": "relay"}
