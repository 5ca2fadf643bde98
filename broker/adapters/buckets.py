"""Token buckets shared by every ingress process (Redis, PostgreSQL or a folder), checked once
per limited call; docs/design.md section 11 has the mechanism."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import logging
import math
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from redis.exceptions import RedisError
from sqlalchemy import create_engine
from sqlalchemy import text as sql_text
from sqlalchemy.exc import SQLAlchemyError

from broker.backends import BackendUrl, by_url, scheme_family
from broker.errors import ConfigError, RateLimited
from broker.rates import EVENTS, SUBMISSIONS, UNLIMITED, ClientLimits, Rate

if TYPE_CHECKING:
    from broker.settings import Settings

logger = logging.getLogger(__name__)

REDIS_PREFIX = "broker:ratelimit:"
#: seconds between two warnings about an unreachable store
WARN_INTERVAL = 60.0
#: after the store failed, seconds during which requests pass without asking it: a store cut
#: off by a partition costs each request its whole timeout, which one failure per window bounds
STORE_BACKOFF = 5.0


# Stores -----------------------------------------------------------------------------------------


class Buckets(Protocol):
    """Where the buckets live. ``take`` answers 0 when a token was taken, else the seconds until
    one will be there (and takes none)."""

    def take(self, key: str, rate: Rate) -> float: ...


class FileBuckets:
    """One file per bucket under ``folder``, shared by the processes of one host through
    ``flock``. Each file holds the bucket's theoretical arrival time (8 bytes)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, key: str, rate: Rate) -> float:
        name = hashlib.sha256(key.encode()).hexdigest()[:40]
        fd = os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 8, 0)
            now = time.time()
            stored = struct.unpack("!d", raw)[0] if len(raw) == 8 else now
            wait, arrival = _gcra(stored, now, rate)
            if wait == 0:
                os.pwrite(fd, struct.pack("!d", arrival), 0)
            return wait
        finally:
            os.close(fd)  # releases the flock


# KEYS[1] the bucket; ARGV[1] microseconds per token; ARGV[2] capacity; ARGV[3] tokens wanted.
# Answers {tokens taken (at most the wanted, at least 1), 0}, or {0, microseconds to wait}. The
# clock is the Redis server's, the same for every ingress host.
_GCRA_SCRIPT = """
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local room = math.floor((now - tat) / interval + capacity)
if room < 1 then return {0, math.ceil(tat + interval - capacity * interval - now)} end
local taken = math.min(wanted, room)
local arrival = tat + taken * interval
redis.call('SET', KEYS[1], string.format('%.0f', arrival), 'PX',
           math.ceil((arrival - now) / 1000) + 1000)
return {taken, 0}
"""
#: a fast bucket (this many seconds of its rate make two tokens or more) is drawn on ahead: a
#: process that used up what it took within ``HELD_SECONDS`` takes twice as many next time, up to
#: ``AHEAD_MAX``, so a busy ingress makes one round trip per several submissions
AHEAD_SECONDS = 0.01
AHEAD_MAX = 16
#: how long tokens taken ahead stay usable; they were taken from the shared bucket, so the
#: rate holds, and at most the few left unused when a client stops are lost
HELD_SECONDS = 1.0


@dataclasses.dataclass
class _Held:
    tokens: int
    until: float
    #: how many the last round trip asked for
    asked: int


class RedisBuckets:
    """One key per bucket in Redis, shared by every ingress process on every host."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._script = self.client.register_script(_GCRA_SCRIPT)
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def take(self, key: str, rate: Rate) -> float:
        most = max(1, min(AHEAD_MAX, int(rate.count / rate.period * AHEAD_SECONDS)))
        now = time.monotonic()
        with self._lock:
            held = self._held.get(key)
            if held is not None and now < held.until and held.tokens > 0:
                held.tokens -= 1
                return 0.0
            # Used up within its time: the demand is high, ask for twice as many.
            asked = min(most, 2 * held.asked) if held is not None and now < held.until else 1
        interval = max(1, round(rate.interval * 1_000_000))
        taken, waited = self._script(keys=[REDIS_PREFIX + key], args=[interval, rate.count, asked])
        if not int(taken):
            return int(waited) / 1_000_000
        with self._lock:
            held = self._held.get(key)
            left = held.tokens if held is not None and now < held.until else 0
            self._held[key] = _Held(left + int(taken) - 1, now + HELD_SECONDS, asked)
        return 0.0


# The bucket's row takes the token when the bucket has one, in one statement: the row lock
# serializes the processes of every host, and the clock is the database server's.
_TAKE = sql_text(
    """
    WITH taken AS (
        INSERT INTO rate_buckets AS b (key, arrival_us)
        VALUES (:key, (extract(epoch from now()) * 1000000)::bigint + :interval)
        ON CONFLICT (key) DO UPDATE
        SET arrival_us = GREATEST(b.arrival_us, (extract(epoch from now()) * 1000000)::bigint)
            + :interval
        WHERE GREATEST(b.arrival_us, (extract(epoch from now()) * 1000000)::bigint) + :interval
            - :burst <= (extract(epoch from now()) * 1000000)::bigint
        RETURNING 0::bigint AS wait_us
    )
    SELECT wait_us FROM taken
    UNION ALL
    SELECT arrival_us + :interval - :burst - (extract(epoch from now()) * 1000000)::bigint
    FROM rate_buckets WHERE key = :key AND NOT EXISTS (SELECT 1 FROM taken)
    """
)


class DatabaseBuckets:
    """One row per bucket in the broker's PostgreSQL database (``rate_buckets``), shared by every
    ingress process on every host, for deployments without Redis."""

    def __init__(self, url: str) -> None:
        from broker.store.urls import normalize_url

        parsed = normalize_url(url)
        if parsed.get_backend_name() != "postgresql":
            raise ConfigError(
                f"BROKER_RATE_LIMIT_URL: database buckets need PostgreSQL, not "
                f"{parsed.get_backend_name()} (use file://DIR on one host)"
            )
        # A small pool of its own in autocommit: a take is one round trip, no BEGIN or COMMIT.
        self.engine = create_engine(
            parsed,
            isolation_level="AUTOCOMMIT",
            pool_size=2,
            max_overflow=8,
            # No ping per checkout (a round trip): a dropped connection fails one take, which
            # lets its call through, and is replaced. A bucket is no record to keep: losing its
            # last updates in a crash costs a client a few tokens, so commits need not wait for
            # the disk.
            connect_args={"connect_timeout": 5, "options": "-c synchronous_commit=off"},
            hide_parameters=True,
        )

    def take(self, key: str, rate: Rate) -> float:
        interval = max(1, round(rate.interval * 1_000_000))
        params = {"key": key, "interval": interval, "burst": interval * rate.count}
        # One statement in autocommit: a refused take reads the row as it was (the CTE's
        # snapshot), so it needs no second round trip.
        with self.engine.connect() as conn:
            waited = (
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(_TAKE, params).scalar()
            )
        return 0.0 if not waited else max(int(waited), 1) / 1_000_000


def _gcra(stored: float, now: float, rate: Rate) -> tuple[float, float]:
    """(seconds to wait, new theoretical arrival time) of one take from a bucket."""
    arrival = max(stored, now) + rate.interval
    allowed_at = arrival - rate.count * rate.interval
    if now < allowed_at:
        return allowed_at - now, stored
    return 0.0, arrival


# The limiter ------------------------------------------------------------------------------------


class RateLimiter:
    """Checks a client's rate for a kind against its bucket; raises ``RateLimited``."""

    def __init__(self, buckets: Buckets, defaults: Mapping[str, Rate]) -> None:
        self.buckets = buckets
        self.defaults = dict(defaults)
        self._warned_at = -math.inf
        self._skip_until = -math.inf

    def rate_for(self, kind: str, limits: ClientLimits | None) -> Rate:
        own = limits.for_kind(kind) if limits is not None else None
        return own if own is not None else self.defaults.get(kind, UNLIMITED)

    def check(self, client_id: str, kind: str, limits: ClientLimits | None = None) -> None:
        """Take one token of ``client_id``'s ``kind`` bucket, or raise ``RateLimited`` with the
        whole seconds after which to try again."""
        rate = self.rate_for(kind, limits)
        if rate.unlimited or time.monotonic() < self._skip_until:
            return
        try:
            wait = self.buckets.take(f"{kind}:{client_id.lower()}", rate)
        except (
            OSError,
            RedisError,
            SQLAlchemyError,
        ) as exc:  # an unreachable store must not refuse work, nor slow every request down
            self._skip_until = time.monotonic() + STORE_BACKOFF
            self._warn(exc)
            return
        if wait <= 0:
            return
        retry_after = max(1, math.ceil(wait))
        raise RateLimited(
            f"Rate limit exceeded: {kind} of client '{client_id}' are limited to {rate}",
            limit=kind,
            rate=str(rate),
            retry_after=retry_after,
        )

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_INTERVAL:
            self._warned_at = now
            logger.warning("rate-limit store unavailable, letting requests through: %s", exc)


def store_url(settings: Settings) -> str:
    """The store ``BROKER_RATE_LIMIT_URL`` names, or the automatic choice when it is empty:
    the Redis of the lock or queue URL; else, with PostgreSQL locks, the broker's database (its
    processes may be on several hosts); else files under the var folder."""
    if settings.rate_limit_url:
        return settings.rate_limit_url
    for url in (settings.lock_url, settings.queue_url):
        if scheme_family(url) in ("redis", "rediss"):
            return url
    if scheme_family(settings.lock_url) in ("postgresql", "postgres") and (
        scheme_family(settings.database_url) == "postgresql"
    ):
        return settings.database_url
    return f"file://{Path(settings.var_dir) / 'ratelimits'}"


def _file_buckets(url: BackendUrl, settings: Settings) -> Buckets:
    if settings.distributed:
        logger.warning(
            "rate limits are kept in files under %s: ingress processes on other hosts do "
            "not share them (set BROKER_RATE_LIMIT_URL=redis://...)",
            url.location,
        )
    return FileBuckets(Path(url.folder("file://var/ratelimits")))


def _redis_buckets(url: BackendUrl, settings: Settings) -> Buckets:
    return RedisBuckets(url.url)


def _database_buckets(url: BackendUrl, settings: Settings) -> Buckets:
    return DatabaseBuckets(url.url)


#: the bucket stores by URL scheme (``postgresql+driver`` finds ``postgresql``)
BUCKET_BACKENDS: dict[str, Callable[[BackendUrl, Settings], Buckets]] = {
    "redis": _redis_buckets,
    "rediss": _redis_buckets,
    "postgresql": _database_buckets,
    "file": _file_buckets,
}


def make_rate_limiter(settings: Settings) -> RateLimiter:
    """The limiter of an ingress process, on the store its settings name."""
    buckets = by_url("BROKER_RATE_LIMIT_URL", store_url(settings), BUCKET_BACKENDS, settings)
    return RateLimiter(
        buckets,
        {SUBMISSIONS: settings.rate_limit_submissions, EVENTS: settings.rate_limit_events},
    )
