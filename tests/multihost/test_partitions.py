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

import dataclasses
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from broker.runtime import ids
from tests.multihost.hosts import (
    Client,
    completion_counts,
    namespaced_hosts,
)
from tests.multihost.test_three_hosts import require_namespaces
from tests.support.waits import wait_until

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
#: the roles on the hosts, as ``Hosts.start_roles`` names them
ROLES = ("h2-ingress", "h2-worker", "h3-worker", "h3-beat")
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


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_a_partition_of_a_shared_service_loses_nothing_and_heals(
    partition: str, tmp_path: Path
) -> None:
    require_namespaces()
    a, b = PARTITIONS[partition]
    started = time.monotonic()
    hosts = namespaced_hosts(
        tmp_path, 4, database=DB_HOST, redis=REDIS_HOST, app=APP_HOST, BROKER_HTTP_TIMEOUT="10"
    )
    with hosts as stack:
        network, cluster, sink = stack.network, stack.cluster, stack.sink
        stack.start_roles(APP_HOST, WORK_HOST)
        text = stack.text
        processes = {name: stack.roles[name] for name in ROLES}

        try:
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
            alive = {name: process.running for name, process in processes.items()}
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
            for name in ROLES:
                print(f"--- {name}\n" + "\n".join(text(name).splitlines()[-40:]))
            raise
