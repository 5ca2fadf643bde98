"""Rate limits: the rate format, clients.json's ``rateLimits``, the token bucket and its stores.

The stores are checked as the ingress uses them: several processes taking from one bucket (a
folder under flock, and real Redis) must together get exactly the bucket's tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.buckets import (
    Buckets,
    DatabaseBuckets,
    FileBuckets,
    RateLimiter,
    RedisBuckets,
    make_rate_limiter,
    store_url,
)
from broker.clients.entries import ApiClient
from broker.clients.registry import ClientRegistry
from broker.errors import ClientFileError, ConfigError, RateLimited
from broker.rates import (
    EVENTS,
    SUBMISSIONS,
    UNLIMITED,
    ClientLimits,
    Rate,
    parse_client_limits,
    parse_rate,
)
from broker.settings import Settings
from broker.store.db import dispose_engines, make_engine, make_session_factory, upgrade
from tests.support.services import free_port

SHA1 = hashlib.sha1(b"cert").hexdigest().upper()  # noqa: S324 - a thumbprint, as elsa-broker

# The rate format ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "period", "shown"),
    [
        ("100/second", 100, 1.0, "100/second"),
        ("  6000 / Minutes ", 6000, 60.0, "6000/minute"),
        ("5/hour", 5, 3600.0, "5/hour"),
        ("1/day", 1, 86400.0, "1/day"),
    ],
)
def test_a_rate_reads_as_count_per_unit(text: str, count: int, period: float, shown: str) -> None:
    rate = parse_rate(text)
    assert (rate.count, rate.period, str(rate)) == (count, period, shown)
    assert not rate.unlimited


@pytest.mark.parametrize("value", ["", "  ", "0", "unlimited", "Unlimited", 0])
def test_empty_zero_and_unlimited_mean_no_limit(value: Any) -> None:
    assert parse_rate(value) == UNLIMITED
    assert parse_rate(value).unlimited


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("100", "is not a rate"),
        ("100/fortnight", "is not a rate"),
        ("fast", "is not a rate"),
        ("-5/second", "is not a rate"),
        ("1.5/second", "is not a rate"),
        ("0/second", 'write "unlimited"'),
        (100, "has no unit"),
        (True, "expected a rate"),
        (None, "expected a rate"),
        ({"count": 1}, "expected a rate"),
    ],
)
def test_a_malformed_rate_is_refused_saying_why(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_rate(value)


def test_client_limits_read_each_kind_and_leave_the_others_to_the_default() -> None:
    limits = parse_client_limits({"Submissions": "10/second"})
    assert limits == ClientLimits(submissions=Rate(10, 1.0))
    assert limits.for_kind(EVENTS) is None
    assert parse_client_limits(None) == ClientLimits()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("100/second", "rateLimits must be an object"),
        ({"submissions": "lots"}, "rateLimits.submissions: 'lots' is not a rate"),
        ({"events": 7}, "rateLimits.events: a bare number (7) has no unit"),
        ({"callbacks": "1/second"}, "rateLimits.callbacks: unknown limit"),
    ],
)
def test_malformed_client_limits_name_the_field(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_client_limits(value)


def test_a_malformed_rate_setting_names_the_key() -> None:
    with pytest.raises(ConfigError, match="BROKER_RATE_LIMIT_EVENTS='fast' is invalid"):
        Settings.from_env({"BROKER_RATE_LIMIT_EVENTS": "fast"})
    assert Settings.from_env({"BROKER_RATE_LIMIT_EVENTS": ""}).rate_limit_events.unlimited


# clients.json -------------------------------------------------------------------------------------


def _registry(settings: Settings, tmp_path: Path, entry: dict[str, Any]) -> ClientRegistry:
    clients = tmp_path / "clients.json"
    clients.write_text(
        json.dumps({"clients": [{"clientId": "ClientA", "thumbprint": SHA1, **entry}]})
    )
    rules = tmp_path / "requestTypes.json"
    rules.write_text('{"requestTypes": []}')
    return ClientRegistry(
        settings.replace(clients_file=str(clients), request_types_file=str(rules))
    )


def test_clients_json_rate_limits_are_read_for_the_client(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a client entry with its own limits (field names in any case)
    registry = _registry(
        settings, tmp_path, {"RateLimits": {"submissions": "100/second", "events": "unlimited"}}
    )
    # When the registry loads, then the client carries them
    client = registry.get("ClientA")
    assert client is not None
    assert client.rate_limits == ClientLimits(submissions=Rate(100, 1.0), events=UNLIMITED)


def test_a_client_without_rate_limits_gets_the_defaults(settings: Settings, tmp_path: Path) -> None:
    client = _registry(settings, tmp_path, {}).get("ClientA")
    assert client is not None
    assert client.rate_limits == ClientLimits()


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        ({"submissions": "100 per second"}, "rateLimits.submissions: '100 per second' is not"),
        ({"events": "0/minute"}, "rateLimits.events: '0/minute' would refuse everything"),
        ({"submission": "1/second"}, "rateLimits.submission: unknown limit"),
        ([], "rateLimits must be an object"),
    ],
)
def test_a_malformed_rate_limit_in_clients_json_is_refused_naming_the_field(
    settings: Settings, tmp_path: Path, limits: Any, reason: str
) -> None:
    # Given a clients.json entry with a bad rateLimits field
    registry = _registry(settings, tmp_path, {"rateLimits": limits})
    # When it loads, then it is refused, naming the file, the entry and the field
    with pytest.raises(ClientFileError) as info:
        registry.load()
    assert "entry 0 (clientId 'ClientA')" in info.value.message
    assert reason in info.value.message


RATE_TEXTS = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"\A-?[0-9]{1,4} ?/ ?[a-zA-Z]{0,8}\Z"),
    st.sampled_from(["unlimited", "0", "", "1/second", "7/minutes"]),
)
RATE_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), RATE_TEXTS)


@fuzz_settings(max_examples=200, deadline=None, database=None)
@given(
    limits=st.one_of(
        st.dictionaries(
            st.sampled_from(["submissions", "events", "Events", "other"]), RATE_VALUES, max_size=3
        ),
        RATE_VALUES,
        st.lists(RATE_VALUES, max_size=2),
    )
)
def test_any_rate_limits_value_loads_or_is_refused_naming_the_field(limits: Any) -> None:
    # Given any JSON as a client's rateLimits, when it is read, then it loads or the error names
    # the field (never another exception)
    refused = ""
    try:
        parsed = parse_client_limits(limits)
    except ValueError as exc:
        refused = str(exc)
    if refused:
        assert refused.startswith("rateLimits")
        return
    for kind in (SUBMISSIONS, EVENTS):
        rate = parsed.for_kind(kind)
        assert rate is None or rate.unlimited or (rate.count > 0 and rate.period > 0)


def test_a_database_row_keeps_the_rate_limits_of_its_file_entry(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a file entry with limits and a database row registered for the same client
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    upgrade(url)
    factory: sessionmaker[Session] = make_session_factory(make_engine(url))
    try:
        registry = _registry(settings, tmp_path, {"rateLimits": {"events": "5/second"}})
        registry._factory = factory
        registry.register_client(ApiClient("ClientA", SHA1, None, "row", frozenset()))
        # When it reloads, then the row wins but the file's limits stay
        client = registry.get("ClientA")
        assert client is not None
        assert client.description == "row"
        assert client.rate_limits == ClientLimits(events=Rate(5, 1.0))
    finally:
        dispose_engines()


# The bucket ---------------------------------------------------------------------------------------


def test_a_bucket_grants_its_capacity_then_says_when_the_next_token_comes(tmp_path: Path) -> None:
    # Given a bucket of three tokens a day
    buckets = FileBuckets(tmp_path / "buckets")
    rate = parse_rate("3/day")
    # When four are taken at once, then three are granted and the fourth waits about 8 hours
    assert [buckets.take("k", rate) for _ in range(3)] == [0, 0, 0]
    wait = buckets.take("k", rate)
    assert 86400 / 3 - 60 < wait <= 86400 / 3
    # And another key has a bucket of its own
    assert buckets.take("other", rate) == 0


def test_a_bucket_refills_at_its_rate(tmp_path: Path) -> None:
    # Given an emptied bucket of 20 tokens a second
    buckets = FileBuckets(tmp_path / "buckets")
    rate = parse_rate("20/second")
    while buckets.take("k", rate) == 0:
        pass
    # When a token's time (50 ms) has passed, then one more is granted, and not two
    time.sleep(0.06)
    assert buckets.take("k", rate) == 0
    assert buckets.take("k", rate) > 0


class MemoryBuckets:
    def __init__(self, waits: list[float]) -> None:
        self.waits = waits
        self.keys: list[str] = []

    def take(self, key: str, rate: Rate) -> float:
        self.keys.append(key)
        return self.waits.pop(0)


def test_the_limiter_raises_rate_limited_naming_the_limit_with_whole_seconds() -> None:
    # Given a bucket that has no token for another 2.2 seconds
    buckets = MemoryBuckets([0.0, 2.2])
    limiter = RateLimiter(buckets, {SUBMISSIONS: Rate(5, 1.0, "5/second")})
    limiter.check("ClientA", SUBMISSIONS)
    # When the client asks again, then it is refused with Retry-After rounded up
    with pytest.raises(RateLimited) as info:
        limiter.check("ClientA", SUBMISSIONS)
    assert info.value.retry_after == 3
    assert info.value.status == 429
    assert info.value.to_dict()["limit"] == "submissions"
    assert info.value.to_dict()["rate"] == "5/second"
    assert buckets.keys == ["submissions:clienta", "submissions:clienta"]


def test_the_clients_own_rate_wins_and_unlimited_takes_no_token() -> None:
    buckets = MemoryBuckets([0.0])
    limiter = RateLimiter(buckets, {SUBMISSIONS: Rate(5, 1.0), EVENTS: Rate(5, 1.0)})
    own = ClientLimits(submissions=UNLIMITED, events=Rate(1, 60.0))
    assert limiter.rate_for(EVENTS, own) == Rate(1, 60.0)
    limiter.check("ClientA", SUBMISSIONS, own)
    assert buckets.keys == []
    limiter.check("ClientA", EVENTS, own)
    assert buckets.keys == ["events:clienta"]


def test_an_unreachable_store_lets_requests_through(caplog: pytest.LogCaptureFixture) -> None:
    # Given a Redis store on a port where nothing listens
    limiter = RateLimiter(
        RedisBuckets(f"redis://127.0.0.1:{free_port()}/0"), {SUBMISSIONS: Rate(1, 3600.0)}
    )
    # When a client calls twice, then nothing is refused and one warning says why
    limiter.check("ClientA", SUBMISSIONS)
    limiter.check("ClientA", SUBMISSIONS)
    warnings = [r for r in caplog.records if "rate-limit store unavailable" in r.getMessage()]
    assert len(warnings) == 1


def test_after_the_store_failed_requests_pass_without_asking_it_for_a_while() -> None:
    # Given a store that fails (cut off: each ask would cost its whole timeout)
    class Failing:
        asked = 0

        def take(self, key: str, rate: Rate) -> float:
            Failing.asked += 1
            raise OSError("timed out")

    limiter = RateLimiter(Failing(), {SUBMISSIONS: Rate(1, 3600.0)})
    # When requests come one after another
    for _ in range(5):
        limiter.check("ClientA", SUBMISSIONS)
    # Then only the first asked the store; the rest passed at once
    assert Failing.asked == 1


# Shared by processes ------------------------------------------------------------------------------


def _take_many(store: str, rate_text: str, count: int, results: Any) -> None:
    buckets: Buckets
    if store.startswith("redis://"):
        buckets = RedisBuckets(store)
    elif store.startswith("postgresql"):
        buckets = DatabaseBuckets(store)
    else:
        buckets = FileBuckets(Path(store))
    rate = parse_rate(rate_text)
    results.put(sum(1 for _ in range(count) if buckets.take("submissions:clienta", rate) == 0))


def _granted_by_processes(store: str, processes: int = 3, each: int = 40) -> int:
    """Tokens that ``processes`` processes got, each taking ``each`` from a bucket of 50."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(target=_take_many, args=(store, "50/hour", each, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        return sum(results.get(timeout=60) for _ in workers)
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()


def test_processes_on_one_host_share_one_file_bucket(tmp_path: Path) -> None:
    # Given three processes each taking 40 tokens from one bucket of 50 in a folder
    granted = _granted_by_processes(str(tmp_path / "buckets"))
    # Then together they got exactly 50
    assert granted == 50


@pytest.mark.redis
def test_processes_share_one_redis_bucket(redis_url: str) -> None:
    # Given three processes each taking 40 tokens from one bucket of 50 in Redis
    granted = _granted_by_processes(redis_url)
    # Then together they got exactly 50
    assert granted == 50


@pytest.mark.postgres
def test_processes_share_one_database_bucket(postgres_url: str) -> None:
    # Given three processes each taking 40 tokens from one bucket of 50 in PostgreSQL
    upgrade(postgres_url)
    dispose_engines()
    granted = _granted_by_processes(postgres_url)
    # Then together they got exactly 50
    assert granted == 50


@pytest.mark.postgres
def test_a_database_bucket_says_when_the_next_token_comes(postgres_url: str) -> None:
    upgrade(postgres_url)
    try:
        buckets = DatabaseBuckets(postgres_url)
        rate = parse_rate("2/hour")
        assert [buckets.take("k", rate) for _ in range(2)] == [0, 0]
        assert 1800 - 60 < buckets.take("k", rate) <= 1800
        assert buckets.take("other", rate) == 0
    finally:
        dispose_engines()


def test_database_buckets_refuse_sqlite(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="need PostgreSQL"):
        DatabaseBuckets(f"sqlite:///{tmp_path / 'x.db'}")
    dispose_engines()


# Choosing the store -------------------------------------------------------------------------------


def test_the_store_follows_redis_lock_or_queue_urls_else_the_var_folder(
    settings: Settings,
) -> None:
    assert store_url(settings) == f"file://{Path(settings.var_dir) / 'ratelimits'}"
    redis_locks = settings.replace(lock_url="redis://cache:6379/1")
    assert store_url(redis_locks) == "redis://cache:6379/1"
    redis_queue = settings.replace(queue_url="redis://cache:6379/0")
    assert store_url(redis_queue) == "redis://cache:6379/0"
    pg = "postgresql+psycopg://broker@db/broker"
    postgres_locks = settings.replace(lock_url="postgresql://broker@db/broker", database_url=pg)
    assert store_url(postgres_locks) == pg
    chosen = redis_queue.replace(rate_limit_url="file:///srv/buckets")
    assert store_url(chosen) == "file:///srv/buckets"
    assert isinstance(
        make_rate_limiter(chosen.replace(rate_limit_url=f"file://{settings.var_dir}/b")).buckets,
        FileBuckets,
    )
    assert isinstance(make_rate_limiter(redis_locks).buckets, RedisBuckets)
    with pytest.raises(ConfigError, match="BROKER_RATE_LIMIT_URL"):
        make_rate_limiter(settings.replace(rate_limit_url="memcached://x"))


def _evalsha_calls(stack: contextlib.ExitStack, *buckets: RedisBuckets) -> Callable[[], int]:
    """How many EVALSHA calls these buckets' clients have sent since this call (counted on the
    clients: the server's own figure also counts the other test processes' calls)."""
    spies = [
        stack.enter_context(mock.patch.object(b.client, "evalsha", wraps=b.client.evalsha))
        for b in buckets
    ]
    return lambda: sum(spy.call_count for spy in spies)


@pytest.mark.redis
def test_a_busy_process_draws_on_a_fast_bucket_ahead_and_the_rate_still_holds(
    redis_url: str,
) -> None:
    # Given two processes' buckets on one Redis bucket of 1,000 a second
    first, second = RedisBuckets(redis_url), RedisBuckets(redis_url)
    rate = parse_rate("1000/second")

    def take(count: int) -> int:
        return sum(
            1 for n in range(count) if (first, second)[n % 2].take("submissions:c", rate) == 0
        )

    # When both take as fast as they can, 900 times between them (within the capacity)
    with contextlib.ExitStack() as stack:
        calls = _evalsha_calls(stack, first, second)
        started = time.monotonic()
        granted = take(900)
        # Then each take was granted, with far fewer round trips to Redis than takes
        assert granted == 900
        assert calls() < 900 / 4
    # And when they go on, 2,100 times more, together they get no more than the capacity plus
    # its refill meanwhile (tokens still held, taken from the bucket already, are not granted)
    granted += take(2100)
    assert granted <= 1000 + (time.monotonic() - started) * 1000
    assert granted >= 1000


@pytest.mark.redis
def test_a_slow_bucket_is_never_drawn_on_ahead(redis_url: str) -> None:
    # Given a process's bucket of 50 an hour (too slow to draw on ahead)
    buckets = RedisBuckets(redis_url)
    rate = parse_rate("50/hour")
    # When it takes 60 times
    with contextlib.ExitStack() as stack:
        calls = _evalsha_calls(stack, buckets)
        granted = sum(1 for _ in range(60) if buckets.take("submissions:slow", rate) == 0)
    # Then it got the 50 and asked Redis every time
    assert granted == 50
    assert calls() == 60
