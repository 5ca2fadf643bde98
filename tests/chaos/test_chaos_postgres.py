"""Chaos: the database stops mid-run and comes back; nothing accepted is lost, nothing answers 500.

The full stack (public and internal gunicorn, one worker, one beat) runs against a private
PostgreSQL cluster (``tests.support.stack.postgres``), Redis as transport and lock provider. A
client thread keeps submitting through the real mutual-TLS API before, during and after a
``pg_ctl stop -m fast`` that lasts a few seconds. While the database is down the ingress must
answer 503 with Retry-After, never 500; every 202 must have its record and end Completed; the
worker and beat must recover on their own (same processes throughout).

A second test crashes the server instead: a burst of submissions from several clients, the
postmaster SIGKILLed mid-burst on a cluster with ``fsync`` and ``synchronous_commit`` on, then a
restart (crash recovery). Every 202 answered before the kill must be found after it, with its
outbox row, and complete: a 202 means committed.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from broker.store.db import transaction
from broker.store.models import OutboxRow, Request
from tests.e2e.live import DEV, LiveStack, running_stack
from tests.support.stack.postgres import PrivatePostgres, private_postgres
from tests.support.waits import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(240)]

#: how long the database stays down
OUTAGE = 4.0
#: accepted submissions to see before the outage, and after it, before the client stops
ACCEPTED_BEFORE = 25
ACCEPTED_AFTER = 25
COMPLETION_TIMEOUT = 90.0
#: the pause between two submissions of the client thread
PACE = 0.03
#: how long the sink holds each call, so workflow steps are in flight when the database goes
SINK_DELAY = 0.2
#: one workflow that calls the sink (work in flight on the worker) and one that waits on a timer
#: (a row that beat must fire after the database is back)
REQUEST_TYPES = ("SinkCall", "Delayed")
EXPECTED_RESULTS = {"SinkCall": {"result": {"ok": True}}, "Delayed": {"result": "later"}}


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One submission as the client saw it; ``status`` 0 when no HTTP answer came back."""

    request_type: str
    began: float
    ended: float
    status: int
    retry_after: str | None = None
    request_id: str | None = None
    error: str | None = None


class Client(threading.Thread):
    """Submits continuously, a fresh Idempotency-Key each time, and records every answer."""

    def __init__(self, stack: LiveStack) -> None:
        super().__init__(name="chaos-client", daemon=True)
        self.stack = stack
        self.attempts: list[Attempt] = []
        self.halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        for n in itertools.count():
            if self.halt.is_set():
                return
            self._record(self._submit(REQUEST_TYPES[n % len(REQUEST_TYPES)], n))
            self.halt.wait(PACE)

    def _submit(self, request_type: str, n: int) -> Attempt:
        began = time.monotonic()
        body = {"requestType": request_type, "keys": {}, "payload": {"n": n}}
        try:
            response = self.stack.call(
                DEV, "POST", "/requests", body, headers={"Idempotency-Key": uuid.uuid4().hex}
            )
        except OSError as error:
            return Attempt(request_type, began, time.monotonic(), 0, error=repr(error))
        request_id = None
        if response.status == 202 and isinstance(response.body, dict):
            request_id = str(response.body.get("correlationId"))
        return Attempt(
            request_type,
            began,
            time.monotonic(),
            response.status,
            retry_after=response.headers.get("Retry-After"),
            request_id=request_id,
            error=None if response.status in (202, 503) else response.text[:500],
        )

    def _record(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)

    def snapshot(self) -> list[Attempt]:
        with self._lock:
            return list(self.attempts)

    def accepted_since(self, moment: float) -> int:
        return sum(1 for a in self.snapshot() if a.status == 202 and a.began >= moment)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=60)


@pytest.fixture
def cluster() -> Iterator[PrivatePostgres]:
    with private_postgres() as pg:
        yield pg


#: a request record as the checks read it: (status, request type, result)
Record = tuple[str, str, object]


def statuses(stack: LiveStack) -> dict[str, Record]:
    """Every request record: id -> (status, request type, result)."""
    with transaction(stack.factory, write=False) as session:
        rows = session.execute(
            select(Request.id, Request.status, Request.request_type, Request.result)
        )
        return {row.id: (row.status, row.request_type, row.result) for row in rows}


def readiness(stack: LiveStack) -> int:
    """The internal listener's ``/readyz`` status code."""
    conn = http.client.HTTPConnection("127.0.0.1", stack.internal_port, timeout=30)
    try:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def wait_all_completed(stack: LiveStack, accepted: set[str | None]) -> dict[str, Record]:
    """Every record once all are Completed; fails at once on a 202 without its record and after
    ``COMPLETION_TIMEOUT`` on a record that stays unfinished."""
    deadline = time.monotonic() + COMPLETION_TIMEOUT
    while True:
        records = statuses(stack)
        missing = sorted(str(i) for i in accepted - set(records))
        assert not missing, f"202 without a record: {missing[:5]}"
        pending = {k: v for k, v in records.items() if v[0] != "Completed"}
        if not pending:
            return records
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(pending)} requests never completed: "
                f"{dict(itertools.islice(pending.items(), 5))}\n{stack.tails()}"
            )
        time.sleep(0.5)


def test_a_postgres_restart_answers_503_and_loses_no_accepted_request(
    tmp_path: Path, cluster: PrivatePostgres, redis_url: str
) -> None:
    with running_stack(
        tmp_path / "stack",
        database_url=cluster.url,
        queue_url=redis_url,
        lock_url=redis_url,
        BROKER_TASK_VISIBILITY_TIMEOUT="30",
    ) as stack:
        pids = stack.roles.leaders()
        stack.sink.delay["/effect"] = SINK_DELAY
        client = Client(stack)
        client.start()
        try:
            # Given a stack under a steady stream of submissions, with work in flight
            wait_until(
                lambda: client.accepted_since(0.0) >= ACCEPTED_BEFORE,
                timeout=30,
                what="submissions before the outage",
            )
            wait_until(
                lambda: any(v[0] == "Completed" for v in statuses(stack).values()),
                timeout=30,
                what="the first completion before the outage",
            )
            # When PostgreSQL stops for a few seconds (fast shutdown: every session cut off)
            cluster.stop("fast")
            down_from = time.monotonic()
            wait_until(
                lambda: any(a.began >= down_from for a in client.snapshot()),
                timeout=30,
                what="a submission during the outage",
            )
            ready_while_down = readiness(stack)
            # (reads and the other write path are refused the same way)
            known = next(a.request_id for a in client.snapshot() if a.request_id)
            others_while_down = [
                stack.call(DEV, "GET", f"/requests/{known}"),
                stack.call(DEV, "GET", "/requests"),
                stack.call(DEV, "POST", "/events/go", {"correlationId": known}),
            ]
            time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_from)))
            down_until = time.monotonic()
            cluster.start()
            back_at = time.monotonic()
            # and the client keeps submitting after it is back
            wait_until(
                lambda: client.accepted_since(back_at) >= ACCEPTED_AFTER,
                timeout=45,
                interval=0.2,
                what="submissions accepted after the restart",
            )
        finally:
            client.stop()
        attempts = client.snapshot()
        accepted = {a.request_id: a for a in attempts if a.status == 202 and a.request_id}
        during = [a for a in attempts if a.began >= down_from and a.ended <= down_until]
        counts = Counter(a.status for a in attempts)
        first_after = min((a.ended for a in accepted.values() if a.began >= back_at), default=0.0)
        print(
            f"\nattempts {len(attempts)}: accepted {counts[202]}, 503 {counts[503]}, "
            f"during the outage {len(during)}, other {len(attempts) - counts[202] - counts[503]}; "
            f"outage {down_until - down_from:.1f}s, first 202 {first_after - back_at:.2f}s "
            "after the restart"
        )

        # Then every answer was a 202 or a 503, and every 503 said when to come back
        unexpected = [a for a in attempts if a.status not in (202, 503)]
        assert not unexpected, unexpected[:5]
        assert all(a.retry_after for a in attempts if a.status == 503)
        # and while the database was down, submissions were refused with 503 (none accepted)
        assert during, "no submission fell inside the outage"
        assert {a.status for a in during} == {503}
        assert ready_while_down == 503
        assert [(r.status, bool(r.headers.get("Retry-After"))) for r in others_while_down] == [
            (503, True)
        ] * len(others_while_down), [r.text for r in others_while_down]

        # And every accepted request has its record and ends Completed with its result
        records = wait_all_completed(stack, set(accepted))
        for request_id, (_, request_type, result) in records.items():
            assert result == EXPECTED_RESULTS[request_type], (request_id, result)
        # (a record committed behind a 503, if the connection dropped at commit, completes too)
        print(
            f"records {len(records)}, all completed {time.monotonic() - back_at:.1f}s "
            "after the restart"
        )

        # And the client sees the records through the API, the last one before and the first
        # one after the outage included
        before = max((a for a in accepted.values() if a.ended <= down_from), key=lambda a: a.began)
        after = min((a for a in accepted.values() if a.began >= back_at), key=lambda a: a.began)
        for attempt in (before, after):
            assert attempt.request_id is not None
            assert stack.request(attempt.request_id)["status"] == "Completed"
        assert readiness(stack) == 200

        # And each sink call's effect happened once (one Idempotency-Key per request, applied once)
        assert all(count == 1 for count in stack.sink.effects["/effect"].values())
        sink_calls = sum(1 for v in records.values() if v[1] == "SinkCall")
        assert len(stack.sink.effects["/effect"]) == sink_calls

        # And the worker, beat and listeners recovered by themselves: the same processes throughout
        stack.roles.check_unchanged(pids)


# A crash of the server -----------------------------------------------------------------------

#: client threads of the burst, and the 202s to see before the kill and after the restart
BURST_THREADS = 4
ACCEPTED_BEFORE_KILL = 40
ACCEPTED_AFTER_RESTART = 10
#: how long the server stays down after the kill
DOWN_FOR = 1.0


class Burst:
    """``BURST_THREADS`` clients submitting back to back, each 202 recorded with when it came."""

    def __init__(self, stack: LiveStack) -> None:
        self.stack = stack
        self.halt = threading.Event()
        self._lock = threading.Lock()
        self.attempts: list[Attempt] = []
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"burst-{i}", daemon=True)
            for i in range(BURST_THREADS)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, index: int) -> None:
        for n in itertools.count(index * 1_000_000):
            if self.halt.is_set():
                return
            began = time.monotonic()
            body = {"requestType": "SinkCall", "keys": {}, "payload": {"n": n}}
            try:
                response = self.stack.call(DEV, "POST", "/requests", body)
            except OSError as error:
                attempt = Attempt("SinkCall", began, time.monotonic(), 0, error=repr(error))
                self.halt.wait(0.05)  # the listener may be restarting its connection
            else:
                request_id = None
                if response.status == 202 and isinstance(response.body, dict):
                    request_id = str(response.body.get("correlationId"))
                attempt = Attempt(
                    "SinkCall",
                    began,
                    time.monotonic(),
                    response.status,
                    request_id=request_id,
                    error=None if response.status == 202 else response.text[:300],
                )
            with self._lock:
                self.attempts.append(attempt)

    def snapshot(self) -> list[Attempt]:
        with self._lock:
            return list(self.attempts)

    def accepted(self, *, since: float = 0.0) -> list[Attempt]:
        return [a for a in self.snapshot() if a.status == 202 and a.began >= since]

    def stop(self) -> None:
        self.halt.set()
        for thread in self._threads:
            thread.join(timeout=60)


def records_and_outbox(stack: LiveStack, ids: set[str]) -> tuple[dict[str, str], set[str]]:
    """(request id -> status, the ids among ``ids`` that have an outbox row)."""
    with transaction(stack.factory, write=False) as session:
        rows = session.execute(select(Request.id, Request.status).where(Request.id.in_(ids)))
        statuses_ = {str(request_id): str(status) for request_id, status in rows}
        with_row = set(
            session.scalars(select(OutboxRow.request_id).where(OutboxRow.request_id.in_(ids)))
        )
    return statuses_, {str(i) for i in with_row}


@pytest.fixture
def durable_cluster() -> Iterator[PrivatePostgres]:
    with private_postgres(durable=True) as pg:
        yield pg


def test_every_202_answered_before_the_postmaster_is_killed_survives_the_restart_and_completes(
    tmp_path: Path, durable_cluster: PrivatePostgres, redis_url: str
) -> None:
    cluster = durable_cluster
    with running_stack(
        tmp_path / "stack",
        database_url=cluster.url,
        queue_url=redis_url,
        lock_url=redis_url,
        BROKER_TASK_VISIBILITY_TIMEOUT="30",
    ) as stack:
        pids = stack.roles.leaders()
        burst = Burst(stack)
        burst.start()
        try:
            # Given a burst of submissions over the real ingress, on a server with fsync and
            # synchronous_commit on
            wait_until(
                lambda: len(burst.accepted()) >= ACCEPTED_BEFORE_KILL,
                timeout=60,
                interval=0.05,
                what="202s before the kill",
            )
            # When the postmaster is SIGKILLed mid-burst, and PostgreSQL restarted
            before_kill = {a.request_id for a in burst.accepted() if a.request_id}
            cluster.kill()
            killed_at = time.monotonic()
            time.sleep(DOWN_FOR)
            cluster.start()
            back_at = time.monotonic()
            # (and the burst goes on being accepted after the restart)
            wait_until(
                lambda: len(burst.accepted(since=back_at)) >= ACCEPTED_AFTER_RESTART,
                timeout=60,
                interval=0.2,
                what="202s after the restart",
            )
        finally:
            burst.stop()
        attempts = burst.snapshot()
        accepted = {a.request_id for a in attempts if a.status == 202 and a.request_id}
        counts = Counter(a.status for a in attempts)
        print(
            f"\nattempts {len(attempts)}: {dict(counts)}; 202s before the kill {len(before_kill)}, "
            f"server down {back_at - killed_at:.1f}s"
        )

        # Then every request answered 202 before the kill is there after the restart, with its
        # outbox row (or already run: a finished row may have been purged)
        found, with_row = records_and_outbox(stack, before_kill)
        missing = sorted(before_kill - set(found))
        assert not missing, f"{len(missing)} of {len(before_kill)} 202s lost: {missing[:5]}"
        without_row = sorted(
            i for i in before_kill - with_row if found[i] not in ("Completed", "Faulted")
        )
        assert not without_row, f"accepted requests without an outbox row: {without_row[:5]}"
        # And so is every later 202, and every one of them completes
        records = wait_all_completed(stack, accepted)
        assert all(records[i][0] == "Completed" for i in accepted)
        # And the stack's processes came through the crash, the same ones
        stack.roles.check_unchanged(pids)
