"""How long ``acquire`` waits for a busy lock, on every provider.

``timeout`` is the caller's promise about waiting: 0 (the default) tries once, a fraction of a
second is a real wait, None waits for as long as it takes, and a negative value is a mistake. A
lock taken on one thread may be released on another (the relay extends and releases from the
thread that runs it, which is not always the one that took it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from broker.adapters.locks import (
    REDIS_PREFIX,
    Lock,
    LockProvider,
    PostgresLock,
    make_lock_provider,
)
from broker.errors import LockNotAcquired
from broker.settings import Settings

WAIT = 10.0  # upper bound for joins that are expected to end much sooner


@pytest.fixture(
    params=[
        "file",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgresql", marks=pytest.mark.postgres),
    ]
)
def provider(
    request: pytest.FixtureRequest, settings: Settings, tmp_path: Path
) -> Iterator[LockProvider]:
    if request.param == "file":
        url = f"file://{tmp_path / 'locks'}"
    elif request.param == "redis":
        url = str(request.getfixturevalue("redis_url"))
    else:
        url = str(request.getfixturevalue("postgres_url"))
    locks = make_lock_provider(settings.replace(lock_url=url))
    yield locks
    locks.close()


def later(seconds: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def take(provider: LockProvider, name: str) -> Lock:
    lock = provider.acquire(name, ttl=30)
    assert lock is not None
    return lock


def test_without_a_timeout_a_busy_lock_is_tried_once(provider: LockProvider) -> None:
    # Given a lock its holder gives up a moment later
    first = take(provider, "once")
    timer = later(0.7, first.release)
    # When another caller asks without naming a timeout, then it gets nothing at once: it did
    # not wait for the release
    assert provider.acquire("once", ttl=30) is None
    timer.join(WAIT)
    # And once released, the lock is free
    again = provider.acquire("once", ttl=30)
    assert again is not None
    again.release()


def test_a_timeout_below_one_second_still_waits_for_the_release(provider: LockProvider) -> None:
    first = take(provider, "short-wait")
    timer = later(0.2, first.release)
    second = provider.acquire("short-wait", ttl=30, timeout=0.95)
    timer.join(WAIT)
    assert second is not None
    assert second.owned()
    second.release()


def test_timeout_none_waits_for_as_long_as_it_takes(provider: LockProvider) -> None:
    # Given a holder on another thread that keeps the lock for longer than a second (a file
    # lock refuses an endless wait for a lock its own thread holds: that would never end)
    held: list[Lock] = []
    holder = threading.Thread(target=lambda: held.append(take(provider, "patient")))
    holder.start()
    holder.join(WAIT)
    [first] = held
    timer = later(1.5, first.release)
    # When another caller waits without a limit, then it gets the lock after the release
    started = time.monotonic()
    second = provider.acquire("patient", ttl=30, timeout=None)
    timer.join(WAIT)
    assert second is not None
    assert time.monotonic() - started >= 1.0
    assert second.owned()
    second.release()


def test_a_negative_timeout_is_refused(provider: LockProvider) -> None:
    with pytest.raises(ValueError, match=r"^lock timeout must be >= 0 or None, not -1$"):
        provider.acquire("negative", ttl=30, timeout=-1)


def test_a_lock_taken_on_one_thread_is_released_on_another(provider: LockProvider) -> None:
    # Given a lock taken on a worker thread
    taken: list[Lock | None] = []
    thread = threading.Thread(target=lambda: taken.append(provider.acquire("handed", ttl=30)))
    thread.start()
    thread.join(WAIT)
    [lock] = taken
    assert lock is not None
    # Then this thread sees it held, and its release here lets the next holder in
    assert lock.owned()
    assert provider.acquire("handed", ttl=30) is None
    lock.release()
    assert not lock.owned()
    successor = provider.acquire("handed", ttl=30)
    assert successor is not None
    successor.release()


@pytest.mark.redis
def test_a_redis_lock_taken_without_a_ttl_expires_after_the_lock_ttl_setting(
    settings: Settings, redis_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=redis_url, lock_ttl=7))
    lock = locks.acquire("default-ttl")
    assert lock is not None
    remaining_ms = redis.Redis.from_url(redis_url).pttl(REDIS_PREFIX + "default-ttl")
    assert isinstance(remaining_ms, int)
    assert 5_000 < remaining_ms <= 7_000
    lock.release()
    locks.close()


@pytest.mark.postgres
def test_a_zero_timeout_does_not_try_again_when_the_lock_is_freed_after_its_try(
    settings: Settings, postgres_url: str
) -> None:
    # Given a held advisory lock, and a watcher that frees it as soon as another session's try
    # for it has failed
    locks = make_lock_provider(settings.replace(lock_url=postgres_url))
    holder = locks.acquire("edge", ttl=30)
    assert isinstance(holder, PostgresLock)
    holder_pid = holder._conn.info.backend_pid
    database = postgres_url.rsplit("/", 1)[1]
    conninfo = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    stop = threading.Event()

    def free_after_the_try() -> None:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            while not stop.is_set():
                tried = admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE datname = %s"
                    " AND pid NOT IN (pg_backend_pid(), %s) AND state = 'idle'"
                    " AND query LIKE 'SELECT pg_try_advisory_lock%%'",
                    (database, holder_pid),
                ).fetchall()
                if tried:
                    holder.release()
                    return

    watcher = threading.Thread(target=free_after_the_try)
    watcher.start()
    # When another caller asks with a timeout of 0
    try:
        second = locks.acquire("edge", ttl=30, timeout=0)
    finally:
        stop.set()
        watcher.join(WAIT)
        holder.release()
    # Then it tried once and answered busy: it did not poll again once its deadline had passed
    assert not watcher.is_alive()
    assert second is None


@pytest.mark.postgres
def test_a_waiter_whose_session_dies_says_which_lock_it_could_not_take(
    settings: Settings, postgres_url: str
) -> None:
    locks = make_lock_provider(settings.replace(lock_url=postgres_url))
    holder = locks.acquire("contended", ttl=30)
    assert isinstance(holder, PostgresLock)
    # Given a second caller polling for the lock
    outcome: list[BaseException | Lock | None] = []

    def wait_for_it() -> None:
        try:
            outcome.append(locks.acquire("contended", ttl=30, timeout=WAIT))
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    # When the waiter's session is cut (the database restarted, the network dropped)
    database = postgres_url.rsplit("/", 1)[1]
    conninfo = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        terminated: list[tuple[bool]] = []
        deadline = time.monotonic() + WAIT
        while not terminated and time.monotonic() < deadline:
            terminated = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid NOT IN (pg_backend_pid(), %s)"
                " AND query LIKE 'SELECT pg_try_advisory_lock%%'",
                (database, holder._conn.info.backend_pid),
            ).fetchall()
            time.sleep(0.05)
    waiter.join(WAIT)
    # Then it fails naming the lock, instead of waiting on or answering "busy"
    assert terminated == [(True,)]
    [error] = outcome
    assert isinstance(error, LockNotAcquired)
    assert error.message.startswith("cannot take advisory lock 'contended': ")
    assert error.details == {"name": "contended"}
    assert holder.owned()
    holder.release()
