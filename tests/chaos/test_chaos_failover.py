"""Chaos: the PostgreSQL primary dies mid-burst and its standby is promoted; the broker follows.

Two private clusters with synchronous streaming replication (``pg_replica``); the whole stack
(public and internal gunicorn, a worker, beat) connects through one multi-host URL naming both
(``postgresql+psycopg://postgres@127.0.0.1:P1,127.0.0.1:P2/broker``, which the broker completes
with ``target_session_attrs=read-write``), for its database and its advisory locks alike; Redis
is the transport. Four clients submit back to back over mutual TLS; the primary's postmaster is
SIGKILLed, and after a detection delay the standby is promoted with ``pg_ctl promote``.

During the gap the ingress answers 503 (never 500) and readiness says the database is down;
afterwards every request answered 202 (before the kill or after the promotion) is there and
completes exactly once with one effect, the relay's fencing epochs only grow, and what the gap
left behind (rows whose worker failed mid-step) is published again. The figures are printed.
"""

from __future__ import annotations

import http.client
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from broker.adapters import health
from broker.runtime import ids
from broker.runtime.outbox.rows import RELAY_LEASE
from broker.store.db import make_engine, make_session_factory, transaction
from broker.store.models import Lease, OutboxRow, Request, RequestEvent
from tests.chaos.pg_replica import replicated_postgres
from tests.chaos.test_chaos_postgres import Burst
from tests.e2e.live import LiveStack, running_stack
from tests.support.waits import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(300)]

#: 202s to see before the kill and after the promotion
ACCEPTED_BEFORE_KILL = 40
ACCEPTED_AFTER_PROMOTION = 20
#: how long the failure goes unnoticed before the standby is promoted (an HA manager's detection)
DETECTION = 2.0
COMPLETION_TIMEOUT = 120.0


def readiness(stack: LiveStack) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", stack.internal_port, timeout=30)
    try:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def relay_epoch(stack: LiveStack) -> int:
    with transaction(stack.factory, write=False) as session:
        return int(session.scalar(select(Lease.epoch).where(Lease.name == RELAY_LEASE)) or 0)


def test_a_promoted_standby_takes_over_and_every_202_completes_exactly_once(
    tmp_path: Path, redis_url: str
) -> None:
    started = time.monotonic()
    with replicated_postgres() as (primary, standby):
        url = (
            f"postgresql+psycopg://postgres@127.0.0.1:{primary.port},"
            f"127.0.0.1:{standby.port}/broker"
        )
        with running_stack(
            tmp_path / "stack",
            database_url=url,
            queue_url=redis_url,
            lock_url=url,
            BROKER_TASK_VISIBILITY_TIMEOUT="30",
            BROKER_OUTBOX_LEASE="8",
        ) as stack:
            pids = stack.roles.leaders()
            stack.sink.delay["/effect"] = 0.1
            burst = Burst(stack)
            burst.start()
            try:
                # Given a burst of submissions, the stack writing to the primary
                wait_until(
                    lambda: len(burst.accepted()) >= ACCEPTED_BEFORE_KILL,
                    timeout=90,
                    interval=0.05,
                    what="202s before the kill",
                )
                wait_until(lambda: relay_epoch(stack) > 0, timeout=30, what="the relay's lease")
                epoch_before = relay_epoch(stack)
                # When the primary's postmaster is SIGKILLed
                killed_at = time.monotonic()
                primary.kill()
                time.sleep(DETECTION)
                ready_in_gap = readiness(stack)
                # (a check pointed at the standby alone sees a server that answers but takes no
                # writes: down until promoted)
                standby_alone = make_session_factory(make_engine(standby.url))
                standby_before = health.check_database(standby_alone)
                # and the standby is promoted
                standby.promote()
                promoted_at = time.monotonic()
                standby_after = health.check_database(standby_alone)
                wait_until(
                    lambda: len(burst.accepted(since=promoted_at)) >= ACCEPTED_AFTER_PROMOTION,
                    timeout=90,
                    interval=0.1,
                    what="202s after the promotion",
                )
            finally:
                burst.stop()
            attempts = burst.snapshot()
            accepted = {a.request_id for a in attempts if a.status == 202 and a.request_id}
            first_after = min(
                (a.ended for a in attempts if a.status == 202 and a.began >= killed_at),
                default=float("nan"),
            )
            in_gap = [a for a in attempts if a.ended >= killed_at and a.began <= first_after]
            counts = Counter(a.status for a in attempts)
            refused_before = sum(1 for a in attempts if a.status == 503 and a.ended < killed_at)
            refused_after = sum(1 for a in attempts if a.status == 503 and a.began > first_after)

            # Then during the gap the ingress refused with 503, never 500 (libpq's reasons: the
            # connection to the killed primary was lost, the standby "session is read-only"),
            # and readiness said the database was down
            unexpected = [a for a in attempts if a.status not in (202, 503)]
            assert not unexpected, unexpected[:5]
            refused_in_gap = sum(1 for a in in_gap if a.status == 503)
            assert refused_in_gap > 0, "no submission fell into the gap"
            assert ready_in_gap == 503
            assert (standby_before, standby_after) == ("down", "ok")
            # And every 202 is on the promoted standby and completes
            deadline = time.monotonic() + COMPLETION_TIMEOUT
            while True:
                with transaction(stack.factory, write=False) as session:
                    found = dict(
                        session.execute(
                            select(Request.id, Request.status).where(Request.id.in_(accepted))
                        ).all()
                    )
                missing = sorted(accepted - set(found))
                assert not missing, f"{len(missing)} 202s lost in the failover: {missing[:5]}"
                pending = [i for i, status in found.items() if status != "Completed"]
                if not pending:
                    break
                assert time.monotonic() < deadline, f"{len(pending)} open\n{stack.tails()}"
                time.sleep(0.5)
            completed_after = time.monotonic() - promoted_at
            # exactly once: one completion event and one effect (one Idempotency-Key) each
            with transaction(stack.factory, write=False) as session:
                completions = Counter(
                    session.scalars(
                        select(RequestEvent.request_id).where(
                            RequestEvent.request_id.in_(accepted),
                            RequestEvent.event_type == "RequestCompleted",
                        )
                    )
                )
                republished = int(
                    session.scalar(
                        select(func.count())
                        .select_from(OutboxRow)
                        .where(OutboxRow.request_id.in_(accepted), OutboxRow.attempts > 1)
                    )
                    or 0
                )
            duplicates = sum(n - 1 for n in completions.values() if n > 1)
            assert duplicates == 0
            assert set(completions) == accepted
            keys_by_instance: Counter[str] = Counter()
            for key in stack.sink.effects["/effect"]:
                keys_by_instance[key.split(":")[0]] += 1
            for request_id in accepted:
                assert keys_by_instance[ids.instance_id_for_request(request_id)] == 1, request_id
            assert all(n == 1 for n in stack.sink.effects["/effect"].values())
            # And the relay's fence held: its epoch never went back across the promotion
            epoch_after = relay_epoch(stack)
            assert epoch_after >= epoch_before
            # And readiness is back, the same processes serving throughout
            assert readiness(stack) == 200
            stack.roles.check_unchanged(pids)
            print(
                f"\nfailover: gap={first_after - killed_at:.1f}s (kill to first 202; promotion "
                f"{promoted_at - killed_at:.1f}s after the kill) 503s_in_gap={refused_in_gap} "
                f"503s_before={refused_before} 503s_after={refused_after} "
                f"answers={dict(counts)} accepted={len(accepted)} "
                f"completed={sum(1 for n in completions.values() if n)} duplicates={duplicates} "
                f"republished_rows={republished} relay_epoch={epoch_before}->{epoch_after} "
                f"all_completed={completed_after:.1f}s_after_promotion "
                f"total={time.monotonic() - started:.0f}s"
            )
