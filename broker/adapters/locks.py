"""Named mutual-exclusion locks: file locks, Redis locks, PostgreSQL advisory locks, chosen by
``BROKER_LOCK_URL`` (docs/design.md, section 12)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import filelock
import redis
import redis.exceptions
import redis.lock

from broker.backends import BackendUrl, by_url, parse_backend_url
from broker.errors import ConfigError, LockLost, LockNotAcquired
from broker.runtime.ports import Lock, LockProvider
from broker.settings import Settings
from broker.store.urls import libpq_url

if TYPE_CHECKING:  # psycopg comes with the `postgres` extra; imported where a lock uses it
    import psycopg

logger = logging.getLogger(__name__)

REDIS_PREFIX = "broker:lock:"
POLL_INTERVAL = 0.05  # seconds between attempts while waiting for a busy lock
PG_CONNECT_TIMEOUT = 10


@contextlib.contextmanager
def hold(
    provider: LockProvider, name: str, *, ttl: float | None = None, timeout: float | None = 0.0
) -> Iterator[Lock]:
    """Hold ``name`` for the ``with`` block; raises ``LockNotAcquired`` when it stays busy."""
    lock = provider.acquire(name, ttl=ttl, timeout=timeout)
    if lock is None:
        raise LockNotAcquired(f"lock {name!r} is held elsewhere (waited {timeout}s)", name=name)
    with lock:
        yield lock


class _HeldLock:
    """What the three locks share: the name, context management, idempotent release."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._released = False
        self._guard = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}{' released' if self._released else ''}>"

    def release(self) -> None:
        with self._guard:
            if self._released:
                return
            self._released = True
        self._unlock()

    def _unlock(self) -> None:
        raise NotImplementedError


def _wait_args(timeout: float | None) -> tuple[bool, float | None]:
    """(blocking, deadline in monotonic seconds) for a timeout as ``acquire`` takes it."""
    if timeout is None:
        return True, None
    if timeout < 0:
        raise ValueError(f"lock timeout must be >= 0 or None, not {timeout}")
    return timeout > 0, time.monotonic() + timeout


# File locks ---------------------------------------------------------------------------------------


class FileLock(_HeldLock):
    def __init__(self, name: str, lock: filelock.BaseFileLock) -> None:
        super().__init__(name)
        self._lock = lock

    def owned(self) -> bool:
        return not self._released and bool(self._lock.is_locked)

    def extend(self, ttl: float | None = None) -> None:
        # The OS holds a file lock until release or process exit: there is no TTL to push back.
        if not self.owned():
            raise LockLost(f"file lock {self.name!r} is no longer held", name=self.name)

    def _unlock(self) -> None:
        self._lock.release(force=True)


class FileLockProvider:
    """Locks as files in one folder; exclusive between processes and threads of one host."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, name: str) -> Path:
        """A safe file name that still reads as the lock name, distinct per name."""
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80] or "lock"
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        return self.directory / f"{safe}-{digest}.lock"

    def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0
    ) -> FileLock | None:
        blocking, _ = _wait_args(timeout)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # thread_local=False: a lock taken on one thread may be released on another.
            lock = filelock.FileLock(self.path_for(name), thread_local=False)
            lock.acquire(
                timeout=-1 if timeout is None else timeout,
                blocking=blocking,
                poll_interval=POLL_INTERVAL,
            )
        except filelock.Timeout:
            return None
        except OSError as exc:
            raise LockNotAcquired(
                f"cannot take file lock {name!r} in {self.directory}: {exc}", name=name
            ) from exc
        return FileLock(name, lock)

    def close(self) -> None:
        """Nothing to close: each lock owns its file descriptor."""


# Redis locks --------------------------------------------------------------------------------------


class RedisLock(_HeldLock):
    def __init__(self, name: str, lock: redis.lock.Lock) -> None:
        super().__init__(name)
        self._lock = lock

    def owned(self) -> bool:
        if self._released:
            return False
        try:
            return bool(self._lock.owned())
        except redis.exceptions.RedisError:
            logger.warning("cannot check Redis lock %r", self.name, exc_info=True)
            return False

    def extend(self, ttl: float | None = None) -> None:
        try:
            if ttl is None:
                self._lock.reacquire()
            else:
                self._lock.extend(ttl, replace_ttl=True)
        except redis.exceptions.LockError as exc:  # expired, and maybe taken by another holder
            raise LockLost(f"Redis lock {self.name!r} is no longer held", name=self.name) from exc
        except redis.exceptions.RedisError as exc:
            raise LockLost(
                f"cannot extend Redis lock {self.name!r}: {exc}", name=self.name
            ) from exc

    def _unlock(self) -> None:
        try:
            self._lock.release()
        except redis.exceptions.LockError:
            # Compare-and-delete found another token: the lock expired and the new holder's key
            # stays untouched.
            logger.warning("Redis lock %r had expired before its release", self.name)
        except redis.exceptions.RedisError:
            logger.warning(
                "cannot release Redis lock %r; it expires by its TTL", self.name, exc_info=True
            )


class RedisLockProvider:
    """Token-owned locks in Redis; they expire after their TTL unless extended."""

    def __init__(self, url: str, default_ttl: float) -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        self.default_ttl = default_ttl

    def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0
    ) -> RedisLock | None:
        blocking, _ = _wait_args(timeout)
        lock = self.client.lock(
            REDIS_PREFIX + name,
            timeout=ttl or self.default_ttl,
            sleep=POLL_INTERVAL,
            thread_local=False,
        )
        try:
            acquired = lock.acquire(blocking=blocking, blocking_timeout=timeout)
        except redis.exceptions.RedisError as exc:
            raise LockNotAcquired(f"cannot take Redis lock {name!r}: {exc}", name=name) from exc
        return RedisLock(name, lock) if acquired else None

    def close(self) -> None:
        self.client.close()


# PostgreSQL advisory locks ------------------------------------------------------------------------


def advisory_key(name: str) -> int:
    """The signed 64-bit key of a lock name (``pg_try_advisory_lock(bigint)``)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class PostgresLock(_HeldLock):
    def __init__(self, name: str, conn: psycopg.Connection[Any], key: int) -> None:
        super().__init__(name)
        self._conn = conn
        self.key = key

    def owned(self) -> bool:
        if self._released or self._conn.closed:
            return False
        import psycopg

        # pg_locks splits a bigint advisory key into classid (high half) and objid (low half).
        unsigned = self.key & 0xFFFF_FFFF_FFFF_FFFF
        try:
            row = self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid() AND granted AND objsubid = 1"
                " AND classid::bigint = %s AND objid::bigint = %s)",
                (unsigned >> 32, unsigned & 0xFFFF_FFFF),
            ).fetchone()
        except psycopg.Error:
            logger.warning("cannot check advisory lock %r", self.name, exc_info=True)
            return False
        return bool(row and row[0])

    def extend(self, ttl: float | None = None) -> None:
        # The session holds the lock for as long as it lives: only confirm it still does.
        if not self.owned():
            raise LockLost(f"advisory lock {self.name!r} is no longer held", name=self.name)

    def _unlock(self) -> None:
        import psycopg

        try:
            if not self._conn.closed:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except psycopg.Error:
            logger.warning(
                "cannot unlock advisory lock %r; closing its session frees it",
                self.name,
                exc_info=True,
            )
        finally:
            self._conn.close()


class PostgresLockProvider:
    """Session advisory locks, one dedicated connection per held lock."""

    def __init__(self, url: str) -> None:
        if importlib.util.find_spec("psycopg") is None:
            raise ConfigError(
                "BROKER_LOCK_URL names PostgreSQL, which needs the postgres extra: "
                "pip install 'elsa-celery-broker[postgres]'",
                field="BROKER_LOCK_URL",
            )
        # libpq's form of the URL: postgresql:// (no driver), several servers as h1:p1,h2:p2
        # with target_session_attrs=read-write, so every lock is taken on the current primary
        # (after a failover, the promoted standby) and never on a standby beside it.
        self.conninfo = libpq_url(url)

    def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0
    ) -> PostgresLock | None:
        import psycopg

        _, deadline = _wait_args(timeout)
        key = advisory_key(name)
        try:
            conn = psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=PG_CONNECT_TIMEOUT
            )
        except psycopg.Error as exc:
            raise LockNotAcquired(
                f"cannot connect for advisory lock {name!r}: {exc}", name=name
            ) from exc
        try:
            while True:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if row and row[0]:
                    return PostgresLock(name, conn, key)
                if deadline is not None and time.monotonic() + POLL_INTERVAL > deadline:
                    conn.close()
                    return None
                time.sleep(POLL_INTERVAL)
        except psycopg.Error as exc:
            conn.close()
            raise LockNotAcquired(f"cannot take advisory lock {name!r}: {exc}", name=name) from exc
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        """Nothing to close: each held lock owns its connection."""


# Choosing one -------------------------------------------------------------------------------------


def _file_locks(url: BackendUrl, settings: Settings) -> LockProvider:
    return FileLockProvider(Path(url.folder("file://var/locks")))


def _redis_locks(url: BackendUrl, settings: Settings) -> LockProvider:
    return RedisLockProvider(url.url, settings.lock_ttl)


def _postgres_locks(url: BackendUrl, settings: Settings) -> LockProvider:
    return PostgresLockProvider(url.url)


#: the lock backends by URL scheme (``postgresql+driver`` finds ``postgresql``)
LOCK_BACKENDS: dict[str, Callable[[BackendUrl, Settings], LockProvider]] = {
    "file": _file_locks,
    "redis": _redis_locks,
    "rediss": _redis_locks,
    "unix": _redis_locks,
    "postgresql": _postgres_locks,
    "postgres": _postgres_locks,
}


def make_lock_provider(settings: Settings) -> LockProvider:
    """The provider ``settings.lock_url`` names; raises ``ConfigError`` for other schemes."""
    return by_url("BROKER_LOCK_URL", settings.lock_url, LOCK_BACKENDS, settings)


def is_local(settings: Settings) -> bool:
    """Whether the configured locks only exclude processes on one host."""
    return parse_backend_url("BROKER_LOCK_URL", settings.lock_url).scheme == "file"


def warn_if_local_locks(settings: Settings) -> bool:
    """Log a warning when distributed processes would share host-local file locks.

    docs/design.md, section 2: every process calls this at startup. Returns whether it warned.
    """
    if settings.distributed and is_local(settings) and not settings.allow_local_locks:
        logger.warning(
            "BROKER_DISTRIBUTED=true but BROKER_LOCK_URL=%s is a host-local file lock: processes "
            "on other hosts are not excluded. Use redis:// or postgresql:// locks, or set "
            "BROKER_ALLOW_LOCAL_LOCKS=true to acknowledge local-only locks.",
            settings.lock_url,
        )
        return True
    return False
