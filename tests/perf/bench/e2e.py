"""End-to-end figures of the broker: throughput, light-load latency and the worker's memory.

Throughput: N requests submitted as fast as the API accepts them; completions per second and
submit-to-Completed latency, both from the database's own timestamps (``submitted_at`` written by
the ingress, ``completed_at`` by the worker), so nothing the client does is counted. Light load:
one request at a time, the latency a client sees (submit, then poll ``GET /requests/{id}`` until
it is terminal). Memory: a sampler reads the completed count and the worker's RSS (main process
plus pool children, from /proc) twice a second for the whole run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence

from sqlalchemy import func, select

from broker.errors import BrokerError
from broker.store.db import transaction
from broker.store.models import Request, RequestStatus
from tests.perf.bench.harness import Stack
from tests.perf.bench.ingress import Api, api_sender, burst
from tests.perf.bench.processes import Deadline
from tests.perf.bench.report import Latency, Memory, Throughput
from tests.support.stack.process import tree_rss_bytes

logger = logging.getLogger(__name__)

TERMINAL = tuple(s.value for s in RequestStatus if s.terminal)
#: how often the light-load client polls a request's status
POLL_INTERVAL = 0.005
#: ids per IN (...) clause
CHUNK = 500


def count_unfinished(stack: Stack) -> int:
    with transaction(stack.factory, write=False) as session:
        query = select(func.count()).select_from(Request).where(Request.status.not_in(TERMINAL))
        return int(session.scalar(query) or 0)


def count_completed(stack: Stack) -> int:
    with transaction(stack.factory, write=False) as session:
        query = (
            select(func.count())
            .select_from(Request)
            .where(Request.status == RequestStatus.COMPLETED.value)
        )
        return int(session.scalar(query) or 0)


def wait_drained(stack: Stack, deadline: Deadline, what: str = "draining the queue") -> None:
    """Until no request is Queued or Processing."""
    while count_unfinished(stack):
        deadline.check(what)
        stack.check_alive()
        time.sleep(0.25)


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: str
    latency: float | None  # completed_at - submitted_at, seconds
    submitted: float  # epoch seconds
    completed: float | None


def outcomes(stack: Stack, ids: Sequence[str]) -> list[Outcome]:
    found: list[Outcome] = []
    with transaction(stack.factory, write=False) as session:
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            rows = session.execute(
                select(Request.status, Request.submitted_at, Request.completed_at).where(
                    Request.id.in_(chunk)
                )
            )
            for status, submitted, completed in rows:
                done = completed.timestamp() if completed is not None else None
                latency = (completed - submitted).total_seconds() if completed else None
                found.append(Outcome(status, latency, submitted.timestamp(), done))
    return found


def measure_e2e(stack: Stack, *, requests: int, threads: int, deadline: Deadline) -> Throughput:
    """``requests`` submissions from ``threads`` clients, run to the end."""
    wait_drained(stack, deadline)
    sent = burst(api_sender(stack), threads=threads, count=requests, deadline=deadline)
    ids = [str(i) for i in sent.results]
    if not ids:
        raise BrokerError(f"no submission was accepted: {sent.first_error}")
    wait_drained(stack, deadline, "waiting for the end-to-end requests")
    found = outcomes(stack, ids)
    completed = [o for o in found if o.status == RequestStatus.COMPLETED.value]
    if not completed:
        raise BrokerError(f"none of {len(ids)} requests completed; statuses: {_statuses(found)}")
    first = min(o.submitted for o in found)
    last = max(o.completed for o in completed if o.completed is not None)
    return Throughput(
        submitted=len(ids),
        completed=len(completed),
        failed=len(found) - len(completed) + sent.errors,
        seconds=last - first,
        latency=Latency.of([o.latency for o in completed if o.latency is not None]),
    )


def _statuses(found: Sequence[Outcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in found:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return counts


def measure_light(stack: Stack, *, requests: int, deadline: Deadline) -> Latency:
    """One request at a time: submit, poll until terminal; the latency as the client sees it."""
    wait_drained(stack, deadline)
    api = Api(stack.public_port, stack.client_context())
    samples: list[float] = []
    try:
        for n in range(requests):
            t0 = time.perf_counter()
            request_id = api.submit(n)
            while (status := api.status(request_id)) not in TERMINAL:
                deadline.check("polling a light-load request")
                time.sleep(POLL_INTERVAL)
            if status != RequestStatus.COMPLETED.value:
                raise BrokerError(f"light-load request {request_id} ended {status}")
            samples.append(time.perf_counter() - t0)
    finally:
        api.close()
    return Latency.of(samples)


@dataclasses.dataclass(frozen=True)
class Sample:
    completed: int
    rss: int


class MemorySampler:
    """A thread that samples (completed requests, worker tree RSS) every ``interval`` seconds."""

    def __init__(self, stack: Stack, pid: int, interval: float = 0.5) -> None:
        self.stack = stack
        self.pid = pid
        self.interval = interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> Sample:
        taken = Sample(count_completed(self.stack), tree_rss_bytes(self.pid))
        self.samples.append(taken)
        return taken

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:
                logger.warning("memory sample failed", exc_info=True)

    def first_at(self, requests: int) -> Sample | None:
        return next((s for s in self.samples if s.completed >= requests), None)


def measure_memory(
    stack: Stack,
    sampler: MemorySampler,
    *,
    low: int,
    high: int,
    threads: int,
    deadline: Deadline,
) -> Memory:
    """Submit what is missing to reach ``high`` completions; RSS at the first samples past both."""
    missing = high - count_completed(stack)
    if missing > 0:
        sent = burst(api_sender(stack), threads=threads, count=missing, deadline=deadline)
        if sent.errors:
            logger.warning("%d top-up submissions failed: %s", sent.errors, sent.first_error)
    wait_drained(stack, deadline, "topping up for the memory figure")
    sampler.sample()
    at_low, at_high = sampler.first_at(low), sampler.first_at(high)
    if at_low is None or at_high is None:
        raise BrokerError(f"the worker never reached {high} completed requests")
    return Memory(at_low.completed, at_low.rss, at_high.completed, at_high.rss)
