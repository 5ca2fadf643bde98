"""Chaos: nothing accepted is lost and no effect happens twice while processes die.

1. Workers SIGKILLed mid-run and restarted: every request completes, one effect per request.
2. The Redis transport restarted mid-run (a private server, so other tests are not disturbed).
3. The relay's lock holder SIGSTOPped past its TTL: after a takeover, the stale holder publishes
   nothing (epochs in the publish log only grow).
4. One task delivered twice at the same time: one effect.
5. SIGTERM while a step runs: the worker drains (finishes and saves the step) before it exits.
6. SIGTERM while a step runs longer than the drain timeout: the worker hands the step back and
   another worker finishes it at once, with one effect.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from broker.adapters.transport.celery_config import create_celery
from broker.runtime import ids
from broker.runtime.outbox.publisher import CelerySender
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow, Request, RequestEvent
from broker.wiring.runtime import make_publisher
from tests.support.runtime import (
    outbox_rows_enqueue,
    prepare,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.services import require_service
from tests.support.sink import Sink
from tests.support.stack import roles
from tests.support.stack.process import Process, process_env
from tests.support.stack.redis_server import PrivateRedis
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import sink_workflow, write_workflow

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(240)]


def count_status(factory: object, status: str) -> int:
    with transaction(factory, write=False) as session:  # type: ignore[arg-type]
        return int(
            session.scalar(
                select(func.count()).select_from(Request).where(Request.status == status)
            )
            or 0
        )


def completed_beyond(factory: object, target: int) -> bool:
    return count_status(factory, "Completed") > target


def assert_one_effect_per_request(sink: Sink, path: str, request_ids: list[str]) -> None:
    """Each request's calls all carried one Idempotency-Key, and its effect was applied once."""
    keys_by_instance: dict[str, set[str]] = {}
    for called_path, key in sink.calls:
        if called_path == path and key:
            keys_by_instance.setdefault(key.split(":")[0], set()).add(key)
    for request_id in request_ids:
        instance_id = ids.instance_id_for_request(request_id)
        assert len(keys_by_instance.get(instance_id, set())) == 1, request_id
        (key,) = keys_by_instance[instance_id]
        assert sink.effects[path][key] == 1


# 1. Workers killed mid-run ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["production", "embedded"])
def test_killed_workers_lose_no_request_and_repeat_no_effect(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    count = 200 if backend == "production" else 80
    var_dir = tmp_path / "var"
    with Sink() as sink:
        sink.delay["/chaos"] = 0.03
        write_workflow(tmp_path / "wf", sink_workflow("chaos", "Chaos", sink.url("/chaos")))
        urls: dict[str, str] = {"database_url": f"sqlite:///{var_dir / 'broker.db'}"}
        if backend == "production":
            require_service("Redis", "127.0.0.1", 6379)
            redis_url = request.getfixturevalue("redis_url")
            urls = {
                "database_url": request.getfixturevalue("postgres_url"),
                "queue_url": redis_url,
                "lock_url": redis_url,
            }
        env = runtime_env(
            var_dir,
            workflows=tmp_path / "wf",
            BROKER_TASK_VISIBILITY_TIMEOUT="20",
            BROKER_WORKER_CONCURRENCY="4",
            **urls,
        )
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        publisher = make_publisher(settings, factory)
        # Given 200 accepted requests and a worker busy with them
        request_ids = [
            submit_request(factory, registry, "Chaos", payload={"n": n}, publisher=publisher)
            for n in range(count)
        ]
        log = tmp_path / "worker.log"
        worker = worker_process(env, log, concurrency=4).start()
        try:
            # When the worker is SIGKILLed three times mid-run and restarted each time
            kills = 0
            for _ in range(3):
                target = kills * count // 5
                wait_until(
                    functools.partial(completed_beyond, factory, target),
                    timeout=60,
                    what="progress before a kill",
                )
                if count_status(factory, "Completed") == count:
                    break
                worker.kill()
                kills += 1
                worker = worker_process(env, log, concurrency=4, name=f"w{kills + 1}").start()
            # Then every request ends Completed
            wait_until(
                lambda: count_status(factory, "Completed") == count,
                timeout=150,
                interval=0.5,
                what="all requests to complete",
            )
        except AssertionError:
            print(worker.tail(80))
            raise
        finally:
            worker.stop()
            registry.stop()
        assert kills >= 1, "the run finished before any kill: make the sink slower"
        # And the sink saw each request's effect once, under one Idempotency-Key
        assert_one_effect_per_request(sink, "/chaos", request_ids)
        print(f"{backend}: {kills} kills, {len(sink.calls)} calls for {count} requests")


# 2. Redis restarted mid-run ---------------------------------------------------------------------


def test_a_redis_restart_loses_nothing(tmp_path: Path, postgres_url: str) -> None:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    count = 60
    try:
        with Sink() as sink:
            sink.delay["/chaos"] = 0.05
            write_workflow(tmp_path / "wf", sink_workflow("chaos", "Chaos", sink.url("/chaos")))
            env = runtime_env(
                tmp_path / "var",
                workflows=tmp_path / "wf",
                database_url=postgres_url,
                queue_url=redis.url,
                lock_url=redis.url,
                BROKER_TASK_VISIBILITY_TIMEOUT="20",
            )
            settings = Settings.from_env(env)
            factory, registry = prepare(settings)
            publisher = make_publisher(settings, factory)
            worker = worker_process(env, tmp_path / "worker.log", concurrency=4).start()
            try:
                # Given requests in flight
                request_ids = [
                    submit_request(
                        factory, registry, "Chaos", payload={"n": n}, publisher=publisher
                    )
                    for n in range(count)
                ]
                wait_until(
                    lambda: count_status(factory, "Completed") > 5, timeout=60, what="progress"
                )
                # When Redis restarts empty (no persistence: every queued message is gone)
                redis.stop()
                time.sleep(1.0)  # a real outage, not an instant bounce
                redis.start()
                # Then every request still completes, once
                wait_until(
                    lambda: count_status(factory, "Completed") == count,
                    timeout=150,
                    interval=0.5,
                    what="all requests to complete",
                )
            except AssertionError:
                print(worker.tail(80))
                raise
            finally:
                worker.stop()
                registry.stop()
            assert_one_effect_per_request(sink, "/chaos", request_ids)
    finally:
        redis.stop()


# 3. The relay's lock holder paused past its TTL ---------------------------------------------------


#: pauses of the lock holder at most, and how long each waits for the other relay to publish
PAUSES = 10
TAKEOVER_WAIT = 10.0


def test_a_paused_relay_publishes_nothing_after_a_takeover(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    env = runtime_env(
        tmp_path / "var",
        workflows=tmp_path / "wf",
        database_url=postgres_url,
        lock_url=redis_url,
        BROKER_LOCK_TTL="1.5",
        BROKER_OUTBOX_LEASE="600",
        BROKER_OUTBOX_BATCH_SIZE="5",
    )
    (tmp_path / "wf").mkdir()
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    registry.stop()
    log = tmp_path / "published.log"
    log.touch()
    stop = threading.Event()
    inserted: list[str] = []

    def insert_rows() -> None:
        while not stop.is_set():
            inserted.extend(outbox_rows_enqueue(factory, 3))
            time.sleep(0.01)

    def published() -> list[tuple[int, int, str]]:
        lines = [line.split() for line in log.read_text().splitlines() if line.strip()]
        return [(int(pid), int(epoch), row) for pid, epoch, row in lines]

    def start_relay() -> Process:
        name = f"relay{len(relays) + 1}"
        return Process(name, roles.relay(log), process_env(env), tmp_path / f"{name}.log").start()

    inserter = threading.Thread(target=insert_rows, daemon=True)
    inserter.start()
    relays: list[Process] = []
    relays.append(start_relay())
    try:
        # Given relay A publishing
        wait_until(lambda: len(published()) > 20, timeout=30, what="relay A to publish")
        relays.append(start_relay())  # relay B, waiting for its turn
        takeovers = 0
        # Three pauses at least; more (up to PAUSES) while none led to a takeover, since a pause
        # that catches the holder mid-batch cannot (a slow, loaded machine makes that likelier)
        for pause in range(PAUSES):
            if pause >= 3 and takeovers:
                break
            # When the current holder is SIGSTOPped past its lock TTL (whichever holds it)
            holder_pid = published()[-1][0]
            holder = next(r for r in relays if r.pid == holder_pid)
            before = len(published())
            os.kill(holder.pid, signal.SIGSTOP)
            time.sleep(float(settings.lock_ttl) + 1.0)
            # the other relay takes over, unless the paused one was stopped mid-batch while it
            # held the lease row (on PostgreSQL a takeover then waits for that batch to end)
            try:
                wait_until(
                    functools.partial(lambda floor: len(published()) > floor, before + 5),
                    timeout=TAKEOVER_WAIT,
                    what="takeover",
                )
                takeovers += 1
            except AssertionError:
                pass
            os.kill(holder.pid, signal.SIGCONT)
            time.sleep(1.0)
        stop.set()
        inserter.join(10)
        # Thousands of rows wait by now, five to a fenced batch, each batch synced to disk: on a
        # loaded 2-core machine the backlog alone can take a minute, so the bound is generous.
        wait_until(
            lambda: len({row for _, _, row in published()}) >= len(inserted),
            timeout=180,
            what="every row published",
        )
    finally:
        stop.set()
        for relay in relays:
            relay.signal(signal.SIGCONT)
            relay.kill()
    lines = published()
    # Then the other relay took over at least once while its peer was stopped
    assert takeovers >= 1, f"no takeover in {PAUSES} pauses past the lock TTL"
    # And every row was published exactly once
    counts = Counter(row for _, _, row in lines)
    assert set(counts) == set(inserted)
    assert max(counts.values()) == 1
    # And the epochs in publish order never go back: no stale holder published after a takeover
    epochs = [epoch for _, epoch, _ in lines]
    assert epochs == sorted(epochs)
    assert len({pid for pid, _, _ in lines}) == 2, "both relays should have published"


# 4. The same task delivered twice at once ---------------------------------------------------------


def test_a_task_delivered_twice_at_once_has_one_effect(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    with Sink() as sink:
        sink.delay["/dup"] = 0.5  # both deliveries are in flight together
        write_workflow(tmp_path / "wf", sink_workflow("dup", "Dup", sink.url("/dup")))
        env = runtime_env(
            tmp_path / "var",
            workflows=tmp_path / "wf",
            database_url=postgres_url,
            queue_url=redis_url,
            lock_url=redis_url,
        )
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        # Given five committed requests (not yet published)
        request_ids = [submit_request(factory, registry, "Dup", payload={"n": n}) for n in range(5)]
        worker = worker_process(env, tmp_path / "worker.log", concurrency=6, beat=False).start()
        try:
            # When each one's task is delivered twice, at the same time, to a 6-process worker
            sender = CelerySender(create_celery(settings, set_as_current=False))
            with transaction(factory, write=False) as session:
                rows = list(session.scalars(select(OutboxRow)))
                session.expunge_all()
            for row in rows:
                sender.send(row)
                sender.send(row)
            # Then each request completes
            wait_until(
                lambda: count_status(factory, "Completed") == 5, timeout=60, what="completion"
            )
        except AssertionError:
            print(worker.tail(80))
            raise
        finally:
            worker.stop()
            registry.stop()
        # And the sink was called once per request: the second delivery found the work done
        for request_id in request_ids:
            instance_id = ids.instance_id_for_request(request_id)
            calls = [k for p, k in sink.calls if p == "/dup" and k and k.startswith(instance_id)]
            assert len(calls) == 1, (request_id, calls)


# 5. SIGTERM drains --------------------------------------------------------------------------------


@pytest.mark.parametrize("remap", ["", "SIGQUIT"], ids=["warm", "drain"])
def test_sigterm_lets_the_running_step_finish_and_save_before_the_worker_exits(
    tmp_path: Path, remap: str
) -> None:
    var_dir = tmp_path / "var"
    with Sink() as sink:
        sink.delay["/slow"] = 2.0
        write_workflow(tmp_path / "wf", sink_workflow("slow", "Slow", sink.url("/slow")))
        # warm: Celery's plain SIGTERM; drain: the deploy forms' REMAP_SIGTERM=SIGQUIT, with a
        # drain timeout the step fits in
        env = runtime_env(
            var_dir,
            workflows=tmp_path / "wf",
            database_url=f"sqlite:///{var_dir / 'broker.db'}",
            BROKER_DRAIN_TIMEOUT="6",
            **({"REMAP_SIGTERM": remap} if remap else {}),
        )
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        registry.stop()
        worker = worker_process(env, tmp_path / "worker.log", beat=False).start()
        try:
            # Given a step in flight (the sink holds its call for two seconds)
            request_id = submit_request(
                factory, registry, "Slow", publisher=make_publisher(settings, factory)
            )
            wait_until(lambda: "/slow" in sink.arrived, timeout=30, what="the call to be in flight")
            # When the worker is asked to stop
            worker.terminate()
            assert worker.proc is not None
            worker.proc.wait(timeout=settings.drain_timeout + 10)
            # Then it finished and saved the step before exiting
            assert request_status(factory, request_id) == "Completed", worker.tail()
        finally:
            worker.stop()


# 6. SIGTERM past the drain timeout hands the step to another worker ------------------------------


def completed_events(factory: object, request_id: str) -> int:
    with transaction(factory, write=False) as session:  # type: ignore[arg-type]
        return int(
            session.scalar(
                select(func.count())
                .select_from(RequestEvent)
                .where(
                    RequestEvent.request_id == request_id,
                    RequestEvent.event_type == "RequestCompleted",
                )
            )
            or 0
        )


def test_sigterm_mid_step_hands_the_step_to_another_worker_at_once(
    tmp_path: Path, postgres_url: str
) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    var_dir = tmp_path / "var"
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    w1 = w2 = None
    try:
        with Sink() as sink:
            # A first call takes far longer than the drain timeout (a step in flight cannot
            # finish); the same call made again answers at once.
            sink.first_delay["/slow"] = 40.0
            write_workflow(tmp_path / "wf", sink_workflow("slow", "Slow", sink.url("/slow")))
            # Leases, lock TTL and inactivity threshold far above what the test allows, so only
            # the hand-back can explain a prompt takeover.
            env = runtime_env(
                var_dir,
                workflows=tmp_path / "wf",
                database_url=postgres_url,
                queue_url=redis.url,
                lock_url=redis.url,
                BROKER_DRAIN_TIMEOUT="2",
                BROKER_LOCK_TTL="90",
                BROKER_OUTBOX_LEASE="90",
                BROKER_INACTIVITY_THRESHOLD="120",
                BROKER_HTTP_TIMEOUT="60",
                BROKER_TASK_VISIBILITY_TIMEOUT="120",
                REMAP_SIGTERM="SIGQUIT",
            )
            settings = Settings.from_env(env)
            factory, registry = prepare(settings)
            registry.stop()
            publisher = make_publisher(settings, factory)
            # Given worker 1 with two steps in flight and a third request queued behind them
            w1 = worker_process(
                env, tmp_path / "w1.log", beat=False, concurrency=2, name="w1"
            ).start()
            request_ids = [
                submit_request(factory, registry, "Slow", payload={"n": n}, publisher=publisher)
                for n in range(3)
            ]
            wait_until(
                lambda: sink.arrived.count("/slow") >= 2, timeout=60, what="two calls in flight"
            )
            sink.first_delay.clear()  # the redone calls, and the third request's, answer at once
            # and worker 2 (with beat: the relay) ready to take over
            w2 = worker_process(
                env, tmp_path / "w2.log", beat=True, concurrency=2, name="w2"
            ).start()
            wait_until(lambda: "ready" in w2.tail(), timeout=60, what="worker 2 to be ready")
            # When worker 1 gets SIGTERM (what a pod stop sends)
            stopped_at = time.monotonic()
            w1.terminate()
            assert w1.proc is not None
            w1.proc.wait(timeout=settings.drain_timeout + 15)
            exited_after = time.monotonic() - stopped_at
            # Then every request completes on worker 2, long before any lease, lock TTL or
            # inactivity threshold could have freed the work
            wait_until(
                lambda: all(request_status(factory, r) == "Completed" for r in request_ids),
                timeout=40,
                interval=0.2,
                what="every request to complete",
            )
            recovered_after = time.monotonic() - stopped_at
            assert recovered_after < 30, recovered_after
            # (the rows carry the hand-back's note: worker 1 released them itself)
            with transaction(factory, write=False) as session:
                notes = list(session.scalars(select(OutboxRow.last_error)))
            assert notes.count("worker stopped mid-step") >= 2, (notes, w1.tail(200))
            # And nothing happened twice: one completion per request, one effect per request
            assert [completed_events(factory, r) for r in request_ids] == [1, 1, 1]
            assert_one_effect_per_request(sink, "/slow", request_ids)
            print(
                f"drain: worker 1 exited {exited_after:.1f}s after SIGTERM; all 3 requests "
                f"completed {recovered_after:.1f}s after it (inactivity threshold 120 s)"
            )
    finally:
        for worker in (w1, w2):
            if worker is not None:
                worker.stop()
        redis.stop()
