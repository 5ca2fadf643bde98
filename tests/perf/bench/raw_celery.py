"""The baseline: a raw Celery no-op task on the broker's transport with the broker's worker options.

``create_raw_app`` starts from the broker's own Celery configuration (``create_celery``: same
transport, acks late, reject on worker lost, prefetch 1, JSON only, task events) and changes only
what a raw Celery user needs to see a task finish: a result backend (Redis on the Redis transport,
files in the var folder on the embedded default) and a queue of its own. The task returns the time
it ran, so throughput and latency come from the same kind of timestamps as the broker's
``submitted_at``/``completed_at``. The three figures mirror the broker's: ``send_task`` calls per
second from 8 threads, N tasks run to the end, and one task at a time polled until it succeeds.
A fourth row has the shape of the broker's ``BenchFiveSteps``: N chains of five no-op tasks (each
step published by the worker when the one before it finished, every result stored), run to the
end; its throughput is chains per second.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Celery, chain

from broker.adapters.transport.celery_config import create_celery
from broker.errors import BrokerError
from broker.settings import Settings
from tests.perf.bench.harness import Stack
from tests.perf.bench.ingress import burst
from tests.perf.bench.processes import Deadline
from tests.perf.bench.report import Ingress, Latency, Throughput

RAW_QUEUE = "bench.raw"
NOOP = "bench.noop"
#: how often the light-load client polls the result backend (the broker side polls as often)
POLL_INTERVAL = 0.005
#: tasks per chain: the steps of the broker's five-step bench workflow
CHAIN_LENGTH = 5


def noop(sent_at: float) -> list[float]:
    """Does nothing; answers when it was sent and when it ran (epoch seconds)."""
    return [sent_at, time.time()]


def result_backend_url(settings: Settings) -> str:
    if settings.queue_url.startswith(("redis://", "rediss://")):
        return settings.queue_url
    if settings.queue_url.startswith("filesystem://"):
        folder = (settings.var_path / "raw-results").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return f"file://{folder}"
    raise BrokerError(f"no raw Celery result backend for the transport {settings.queue_url!r}")


def create_raw_app(settings: Settings, *, set_as_current: bool = True) -> Celery:
    """The broker's Celery configuration plus a result backend and the no-op task."""
    app = create_celery(settings, set_as_current=set_as_current)
    app.conf.update(
        task_ignore_result=False,
        result_backend=result_backend_url(settings),
        result_expires=3600,
        task_default_queue=RAW_QUEUE,
        task_routes={},
        beat_schedule={},
    )
    app.task(name=NOOP)(noop)
    return app


def _sender(app: Celery) -> Any:
    def make() -> tuple[Any, Any]:
        def send(_n: int) -> str:
            return str(app.send_task(NOOP, args=[time.time()], queue=RAW_QUEUE).id)

        return send, lambda: None

    return make


def measure_ingress(
    app: Celery, *, seconds: float, threads: int, deadline: Deadline, limit: int | None = None
) -> Ingress:
    """``send_task`` calls per second from ``threads`` threads (no worker runs meanwhile), for
    ``seconds`` or ``limit`` calls, whichever comes first."""
    burst(_sender(app), threads=threads, count=threads * 4, deadline=deadline)
    sent = burst(_sender(app), threads=threads, seconds=seconds, count=limit, deadline=deadline)
    # Nothing is to run them: drop the published messages before the worker starts.
    app.control.purge()
    return Ingress(len(sent.results), sent.errors, sent.seconds, Latency.of(sent.latencies))


def _meta(app: Celery, task_id: str) -> dict[str, Any]:
    meta: dict[str, Any] = app.backend.get_task_meta(task_id, cache=False)
    return meta


def wait_results(app: Celery, ids: list[str], stack: Stack, deadline: Deadline) -> list[Any]:
    """The results of ``ids``, in order, once all have succeeded."""
    pending = list(ids)
    while pending:
        deadline.check("waiting for raw Celery results")
        stack.check_alive()
        # Roughly FIFO: stop a sweep at the first unfinished task, and sweep again later.
        while pending and _meta(app, pending[0])["status"] in ("SUCCESS", "FAILURE"):
            pending.pop(0)
        if pending:
            time.sleep(0.25)
    results = []
    for task_id in ids:
        meta = _meta(app, task_id)
        if meta["status"] != "SUCCESS":
            raise BrokerError(f"raw task {task_id} ended {meta['status']}: {meta.get('result')}")
        results.append(meta["result"])
    return results


def measure_e2e(
    app: Celery, stack: Stack, *, requests: int, threads: int, deadline: Deadline
) -> Throughput:
    """``requests`` no-op tasks sent from ``threads`` threads, run to the end."""
    sent = burst(_sender(app), threads=threads, count=requests, deadline=deadline)
    ids = [str(i) for i in sent.results]
    times = wait_results(app, ids, stack, deadline)
    first = min(float(t[0]) for t in times)
    last = max(float(t[1]) for t in times)
    return Throughput(
        submitted=len(ids),
        completed=len(times),
        failed=sent.errors,
        seconds=last - first,
        latency=Latency.of([float(t[1]) - float(t[0]) for t in times]),
    )


def _chain_sender(app: Celery) -> Any:
    def make() -> tuple[Any, Any]:
        def send(_n: int) -> str:
            sent_at = time.time()
            steps = [
                app.signature(NOOP, args=[sent_at], immutable=True, queue=RAW_QUEUE)
                for _ in range(CHAIN_LENGTH)
            ]
            # The answer is the last task's result: [sent_at, when the fifth step ran].
            return str(chain(*steps).apply_async().id)

        return send, lambda: None

    return make


def measure_chain(
    app: Celery, stack: Stack, *, chains: int, threads: int, deadline: Deadline
) -> Throughput:
    """``chains`` chains of five no-op tasks sent from ``threads`` threads, run to the end."""
    sent = burst(_chain_sender(app), threads=threads, count=chains, deadline=deadline)
    ids = [str(i) for i in sent.results]
    times = wait_results(app, ids, stack, deadline)
    first = min(float(t[0]) for t in times)
    last = max(float(t[1]) for t in times)
    return Throughput(
        submitted=len(ids),
        completed=len(times),
        failed=sent.errors,
        seconds=last - first,
        latency=Latency.of([float(t[1]) - float(t[0]) for t in times]),
    )


def measure_light(app: Celery, stack: Stack, *, requests: int, deadline: Deadline) -> Latency:
    """One task at a time: send, poll the result backend until it succeeded."""
    samples: list[float] = []
    for _ in range(requests):
        t0 = time.perf_counter()
        task_id = app.send_task(NOOP, args=[time.time()], queue=RAW_QUEUE).id
        while (status := _meta(app, task_id)["status"]) not in ("SUCCESS", "FAILURE"):
            deadline.check("polling a light-load raw task")
            time.sleep(POLL_INTERVAL)
        if status != "SUCCESS":
            raise BrokerError(f"raw task {task_id} ended {status}")
        samples.append(time.perf_counter() - t0)
    stack.check_alive()
    return Latency.of(samples)


def warm_up(app: Celery, stack: Stack, deadline: Deadline, count: int = 20) -> None:
    """Until the raw worker runs tasks (its pool is up), then a few more to warm it."""
    first = app.send_task(NOOP, args=[time.time()], queue=RAW_QUEUE).id
    wait_results(app, [first], stack, deadline)
    ids = [app.send_task(NOOP, args=[time.time()], queue=RAW_QUEUE).id for _ in range(count)]
    wait_results(app, ids, stack, deadline)
