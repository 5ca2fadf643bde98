"""Three test hosts, one cut off mid-burst and rejoined: nothing lost, nothing done twice.

Hosts are network namespaces (``netns.Network``) on one bridge: h1 runs PostgreSQL and Redis
(private instances on its own address), h2 the public listener and a worker, h3 a worker and
beat, each started with the README's per-role command and ``BROKER_DISTRIBUTED=true``. The test
(on the bridge's .254) submits a burst of requests over mutual TLS to h2; each request's workflow
POSTs to an HTTP sink the test serves, which applies each ``Idempotency-Key`` once.

While the burst runs, h3 is cut off at a chosen moment: when the sink holds a call from h3 (its
step is in flight, under the instance lock). The sink answers that call into the dead link. The
lock's TTL runs out, Redis gives the unacknowledged message to h2 after the visibility timeout,
and h2 finishes the request. When h3 rejoins, TCP delivers the old answer, h3's step ends and
tries to save: the fence (the instance's checkpoint, checked in the saving statement) refuses it.

Figures printed: accepted, completed, duplicates, stale saves refused, takeover and recovery
times. Bounded to about two minutes; every namespace and process is removed, whatever happens.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from broker.runtime import ids
from tests.multihost.hosts import (
    Client,
    completed,
    completed_instances,
    completion_counts,
    namespaced_hosts,
)
from tests.multihost.netns import unavailable
from tests.support.services import ON_CI
from tests.support.waits import wait_until

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.timeout(240)]

DB_HOST, APP_HOST, CUT_HOST = 1, 2, 3
REQUESTS = 48
SUBMIT_INTERVAL = 0.25  # seconds between submissions: the burst lasts about 12 s
CUT_SECONDS = 20.0  # longer than the visibility timeout and a restore sweep, with room to spare


def require_namespaces() -> None:
    reason = unavailable()
    if reason:
        if ON_CI:
            pytest.fail(f"{reason} (CI=true: the multi-host test must run)")
        pytest.skip(reason)
    if shutil.which("redis-server") is None:
        if ON_CI:
            pytest.fail("redis-server is missing (CI=true)")
        pytest.skip("redis-server is missing")


def test_a_host_cut_off_mid_burst_loses_nothing_and_its_stale_step_cannot_commit(
    tmp_path: Path,
) -> None:
    require_namespaces()
    started = time.monotonic()
    hosts = namespaced_hosts(
        tmp_path, 3, database=DB_HOST, redis=DB_HOST, app=APP_HOST, BROKER_HTTP_TIMEOUT="80"
    )
    with hosts as stack:
        network, cluster, sink = stack.network, stack.cluster, stack.sink
        # Given the roles, each from its README command, on their hosts
        stack.start_roles(APP_HOST, CUT_HOST)
        text = stack.text
        logs = ("h2-ingress", "h2-worker", "h3-worker", "h3-beat")

        try:
            client = Client(tmp_path / "pki", network.address(APP_HOST), 5001)
            first = wait_until(lambda: client.submit(-1), timeout=60, what="the ingress on h2")
            # When a burst runs, and h3 is cut off while the sink holds a call of its step
            sink.hold_from = network.address(CUT_HOST)
            accepted: list[str] = [first]

            def burst() -> None:
                for n in range(REQUESTS):
                    request_id = client.submit(n)
                    if request_id:
                        accepted.append(request_id)
                    time.sleep(SUBMIT_INTERVAL)

            submitter = threading.Thread(target=burst)
            submitter.start()
            assert sink.held.wait(timeout=60), "no call from h3 arrived"
            network.cut(CUT_HOST)
            cut_at = time.monotonic()
            sink.release.set()  # the answer goes into the dead link
            held_instance = (sink.held_key or "").split(":")[0]
            engine = sa.create_engine(cluster.url)
            takeover: float | None = None
            while time.monotonic() - cut_at < CUT_SECONDS:
                if takeover is None and held_instance in completed_instances(engine):
                    takeover = time.monotonic() - cut_at  # h2 finished the held request
                time.sleep(0.5)
            submitter.join(timeout=60)
            taken_over = completed_instances(engine)
            network.rejoin(CUT_HOST)
            rejoined_at = time.monotonic()
            # Then every accepted request completes
            wait_until(
                lambda: completed(engine, accepted) == len(accepted),
                timeout=90,
                interval=0.5,
                what="every accepted request to complete",
            )
            recovered_at = time.monotonic()
            # And h3's stale step, its answer delivered after the rejoin, is refused at the save
            wait_until(
                lambda: held_instance in _dropped(text("h3-worker")),
                timeout=60,
                interval=0.5,
                what="h3's stale save to be refused",
            )
            completions = completion_counts(engine, accepted)
            duplicates = sum(1 for count in completions.values() if count > 1)
            effects_by_instance = Counter(key.split(":")[0] for key in sink.effects)
            repeated_calls = len(sink.calls) - len({key for key, _ in sink.calls})
            refused = len(_dropped(text("h3-worker")))
            finished = sum(1 for count in completions.values() if count)
            print(
                f"\nmulti-host: accepted={len(accepted)} completed={finished} "
                f"duplicates={duplicates} stale_saves_refused={refused} "
                f"repeated_calls_same_key={repeated_calls} "
                f"cut={CUT_SECONDS:.0f}s held_request_finished_by_h2_after={takeover or -1:.1f}s "
                f"all_completed_after_rejoin={recovered_at - rejoined_at:.1f}s "
                f"total={time.monotonic() - started:.0f}s"
            )
            assert len(accepted) >= REQUESTS // 2, "the ingress refused most of the burst"
            assert duplicates == 0
            assert all(count == 1 for count in completions.values()), completions
            for request_id in accepted:
                instance_id = ids.instance_id_for_request(request_id)
                assert effects_by_instance[instance_id] == 1, request_id
            assert held_instance in taken_over, "h2 did not finish the held request during the cut"
            assert cut_at < rejoined_at
            engine.dispose()
        except BaseException:
            for name in logs:
                print(f"--- {name}\n" + "\n".join(text(name).splitlines()[-40:]))
            raise


STALE = re.compile(r"instance (\S+) moved on; this step's result is dropped")


def _dropped(log: str) -> set[str]:
    return set(STALE.findall(log))
