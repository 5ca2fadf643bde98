"""Partitions of the shared services: one host cut away from another while both still reach the
rest. Nothing accepted is lost, nothing is done twice, nothing stays stuck after the heal.

Four test hosts (network namespaces on one bridge, ``netns.Network``): h1 runs PostgreSQL, h4
Redis (transport and locks), h2 the public listener and a worker, h3 a worker and beat, each role
started with the README's command and ``BROKER_DISTRIBUTED=true``. The test (on the bridge)
submits a burst over mutual TLS to h2; each request's workflow POSTs to an HTTP sink the test
serves, which records the caller's address and applies each ``Idempotency-Key`` once.

Mid-burst one pair of hosts is partitioned (``Network.partition``: every packet between them is
dropped, silently, both ways) for ``PARTITION_SECONDS``, then healed:

* ``database-from-worker``: h1 (PostgreSQL) and h3 (a worker and beat); h2 still reaches it;
* ``redis-from-ingress``: h4 (Redis) and h2 (the ingress and a worker); h3 still reaches it.

The figures (what each role did meanwhile, and lost, duplicated and stuck requests after the
heal) are printed on one line per partition; docs/design.md, section 8, has the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from broker.runtime import ids
from broker.store import db
from tests.chaos.pg_private import require_binaries
from tests.multihost.hosts import (
    BIN,
    PUBLIC,
    WORKER,
    Client,
    NamespacedPostgres,
    Sink,
    beat,
    completion_counts,
    redis_up,
    role_env,
    write_pki_and_config,
)
from tests.multihost.netns import Network
from tests.multihost.test_three_hosts import require_namespaces
from tests.support.services import PROJECT_ROOT
from tests.support.waits import wait_until
from tests.support.workflows import sink_workflow, write_workflow

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.timeout(300)]

DB_HOST, APP_HOST, WORK_HOST, REDIS_HOST = 1, 2, 3, 4
REQUESTS = 80
SUBMIT_INTERVAL = 0.25  # the burst lasts about 20 s, the partition in its middle
PARTITION_AFTER = 4.0
PARTITION_SECONDS = 20.0
HEAL_TIMEOUT = 120.0
#: requests submitted once everything accepted before has completed
AFTER_HEAL = 20
#: single requests then, until the worker on the cut side makes a call (at most this many)
RECOVERY_PROBES = 120
#: the partitions: (hosts cut apart), and what the roles on each side are
PARTITIONS = {
    "database-from-worker": (DB_HOST, WORK_HOST),
    "redis-from-ingress": (REDIS_HOST, APP_HOST),
}


@dataclasses.dataclass(frozen=True)
class Answer:
    n: int
    began: float
    ended: float
    status: int
    request_id: str | None


@contextlib.contextmanager
def four_hosts(root: Path) -> Iterator[tuple[Network, NamespacedPostgres, Sink, dict[str, str]]]:
    network = Network(hosts=4)
    cluster: NamespacedPostgres | None = None
    sink: Sink | None = None
    try:
        network.create()
        cluster = NamespacedPostgres(require_binaries(), network, DB_HOST)
        cluster.create()
        redis_url = f"redis://{network.address(REDIS_HOST)}:6379"
        network.start(
            REDIS_HOST,
            ["redis-server", "--bind", network.address(REDIS_HOST), "--port", "6379",
             "--save", "", "--appendonly", "no", "--protected-mode", "no"],
            env={"PATH": "/usr/bin:/bin"},
            log=root / "redis.log",
        )  # fmt: skip
        sink = Sink(network.gateway)
        workflows = root / "workflows"
        write_workflow(workflows, sink_workflow("multi-host", "MultiHost", sink.url))
        env = {
            "BROKER_DISTRIBUTED": "true",
            "BROKER_DATABASE_URL": cluster.url,
            "BROKER_QUEUE_URL": f"{redis_url}/0",
            "BROKER_LOCK_URL": f"{redis_url}/1",
            "BROKER_WORKFLOW_PATHS": str(workflows),
            "BROKER_WATCH_WORKFLOWS": "false",
            "BROKER_HTTP_ALLOWLIST": f"{network.gateway}:*",
            "BROKER_HTTP_TIMEOUT": "10",
            "BROKER_CALLBACK_SECRET": "multi-host-test",
            "BROKER_LOG_FORMAT": "text",
            "BROKER_PUBLIC_BIND": f"{network.address(APP_HOST)}:5001",
            # short enough that work a cut-off host holds is taken over within the partition
            "BROKER_LOCK_TTL": "4",
            "BROKER_TASK_VISIBILITY_TIMEOUT": "8",
            "BROKER_OUTBOX_LEASE": "8",
            "BROKER_OUTBOX_RELAY_INTERVAL": "0.5",
            "BROKER_BOOKMARK_QUEUE_INTERVAL": "1",
            "BROKER_TIMER_INTERVAL": "1",
            "BROKER_RECOVERY_INTERVAL": "2",
            "BROKER_HEARTBEAT_INTERVAL": "1",
            "BROKER_INACTIVITY_THRESHOLD": "30",
            "BROKER_DRAIN_TIMEOUT": "3",
            "REMAP_SIGTERM": "SIGQUIT",
            **write_pki_and_config(root, network.address(APP_HOST)),
        }
        wait_until(lambda: redis_up(redis_url), timeout=30, what="redis on h4")
        yield network, cluster, sink, env
    finally:
        if sink is not None:
            sink.close()
        network.stop_processes()
        if cluster is not None:
            cluster.destroy()
        network.destroy()
        db.dispose_engines()


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_a_partition_of_a_shared_service_loses_nothing_and_heals(
    partition: str, tmp_path: Path
) -> None:
    require_namespaces()
    a, b = PARTITIONS[partition]
    started = time.monotonic()
    with four_hosts(tmp_path) as (network, cluster, sink, env):
        migrate = subprocess.run(
            network.wrap(APP_HOST, [str(BIN / "broker"), "db", "upgrade"]),
            env=role_env(env, tmp_path / "h2"),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert migrate.returncode == 0, migrate.stderr
        h2, h3 = role_env(env, tmp_path / "h2"), role_env(env, tmp_path / "h3")
        roles = {
            "h2-ingress": (APP_HOST, PUBLIC, h2),
            "h2-worker": (APP_HOST, [*WORKER, "--hostname", "worker@h2"], h2),
            "h3-worker": (WORK_HOST, [*WORKER, "--hostname", "worker@h3"], h3),
            "h3-beat": (WORK_HOST, beat(tmp_path / "h3" / "celerybeat-schedule"), h3),
        }
        processes = {
            name: network.start(host, argv, env=role_env_, log=tmp_path / f"{name}.log",
                                cwd=PROJECT_ROOT)
            for name, (host, argv, role_env_) in roles.items()
        }  # fmt: skip

        def text(name: str) -> str:
            log = tmp_path / f"{name}.log"
            return log.read_text(errors="replace") if log.exists() else ""

        try:
            for name in ("h2-worker", "h3-worker"):
                wait_until(lambda name=name: " ready." in text(name), timeout=60, what=name)
            # (a patient client: what is measured is whether an answer comes, and how late)
            client = Client(tmp_path / "pki", network.address(APP_HOST), 5001, timeout=60)
            wait_until(lambda: client.submit(-1), timeout=60, what="the ingress on h2")
            answers: list[Answer] = []

            def burst() -> None:
                for n in range(REQUESTS):
                    began = time.monotonic()
                    status, request_id = client.post(n)
                    answers.append(Answer(n, began, time.monotonic(), status, request_id))
                    time.sleep(SUBMIT_INTERVAL)

            submitter = threading.Thread(target=burst)
            submitter.start()
            # When, mid-burst, the two hosts are cut apart for a while, then healed
            time.sleep(PARTITION_AFTER)
            network.partition(a, b)
            cut_at = time.monotonic()
            time.sleep(PARTITION_SECONDS)
            network.heal(a, b)
            healed_at = time.monotonic()
            submitter.join(timeout=120)
            accepted = [x.request_id for x in answers if x.request_id]
            engine = sa.create_engine(cluster.url)
            # Then every accepted request completes
            wait_until(
                lambda: (
                    sum(1 for n in completion_counts(engine, accepted).values() if n)
                    == len(accepted)
                ),
                timeout=HEAL_TIMEOUT,
                interval=0.5,
                what="every accepted request to complete after the heal",
            )
            settled = time.monotonic() - healed_at
            # And after the heal both worker hosts take work again (a short second burst)
            after_heal = time.monotonic()
            more = [client.submit(REQUESTS + n) for n in range(AFTER_HEAL)]
            accepted += [request_id for request_id in more if request_id]
            wait_until(
                lambda: (
                    sum(1 for n in completion_counts(engine, accepted).values() if n)
                    == len(accepted)
                ),
                timeout=HEAL_TIMEOUT,
                interval=0.5,
                what="the second burst to complete",
            )
            # (until when the worker host on the cut side took no work: poll with single requests)
            cut_worker = network.address(WORK_HOST if WORK_HOST in (a, b) else APP_HOST)
            back_at = None
            for n in range(RECOVERY_PROBES):
                since = time.monotonic()
                request_id = client.submit(REQUESTS + AFTER_HEAL + n)
                if request_id:
                    accepted.append(request_id)
                time.sleep(0.5)
                if any(caller == cut_worker for _, caller in sink.calls[-4:]):
                    back_at = since - healed_at
                    break
            wait_until(
                lambda: (
                    sum(1 for n in completion_counts(engine, accepted).values() if n)
                    == len(accepted)
                ),
                timeout=HEAL_TIMEOUT,
                interval=0.5,
                what="the probes to complete",
            )
            completions = completion_counts(engine, accepted)
            effects = Counter(key.split(":")[0] for key in sink.effects)
            engine.dispose()
            duplicates = sum(n - 1 for n in completions.values() if n > 1)
            lost = sum(1 for n in completions.values() if n == 0)
            during = [x for x in answers if cut_at <= x.began < healed_at]
            statuses = Counter(x.status for x in during)
            slowest = max((x.ended - x.began for x in during), default=0.0)

            def calls_by_host(since: float, until: float) -> dict[str, int]:
                return dict(
                    Counter(
                        "h2" if caller == network.address(APP_HOST) else "h3"
                        for (_, caller), at in zip(sink.calls, sink.call_times, strict=True)
                        if since <= at < until
                    )
                )

            callers = calls_by_host(cut_at, healed_at)
            callers_after = calls_by_host(after_heal, time.monotonic())
            alive = {name: process.poll() is None for name, process in processes.items()}
            print(
                f"\npartition {partition}: cut={PARTITION_SECONDS:.0f}s "
                f"ingress_answers_during={dict(statuses)} ingress_slowest={slowest:.1f}s "
                f"effects_during_by_worker_host={callers} "
                f"effects_after_heal_by_worker_host={callers_after} accepted={len(accepted)} "
                f"lost={lost} duplicates={duplicates} stuck=0 "
                f"all_completed_after_heal={settled:.1f}s "
                f"cut_worker_took_work_again_after_heal="
                f"{'never' if back_at is None else f'{back_at:.1f}s'} "
                f"roles_alive={alive} "
                f"total={time.monotonic() - started:.0f}s"
            )
            assert len(accepted) >= REQUESTS // 2, "the ingress refused most of the burst"
            assert lost == 0
            assert duplicates == 0
            for request_id in accepted:
                assert effects[ids.instance_id_for_request(request_id)] == 1, request_id
            assert all(alive.values()), alive
            assert set(statuses) <= {202, 503}, statuses
        except BaseException:
            for name in roles:
                print(f"--- {name}\n" + "\n".join(text(name).splitlines()[-40:]))
            raise
