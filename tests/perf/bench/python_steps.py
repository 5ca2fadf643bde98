"""Five steps of Python activities, side by side with ``BenchFiveSteps`` and raw Celery's chain
of five: the same burst and end-to-end measure as the broker's own, once with inline activities
and once with task-mode ones."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.errors import BrokerError
from tests.perf.bench.bench_activities import INLINE_TYPE, TASK_TYPE
from tests.perf.bench.e2e import outcomes, wait_drained
from tests.perf.bench.harness import Stack
from tests.perf.bench.ingress import Api, burst
from tests.perf.bench.processes import Deadline
from tests.perf.bench.report import Latency, Throughput

#: the rows of the table and the JSON, in order
MODES = {"inline": INLINE_TYPE, "task": TASK_TYPE}


def typed_sender(
    stack: Stack, request_type: str
) -> Callable[[], tuple[Callable[[int], Any], Callable[[], None]]]:
    context = stack.client_context()

    def make() -> tuple[Callable[[int], Any], Callable[[], None]]:
        api = Api(stack.public_port, context)

        def submit(n: int) -> str:
            body = {"requestType": request_type, "keys": {}, "payload": {"n": n}}
            status, answer = api.call("POST", "/requests", body)
            if status != 202:
                raise BrokerError(f"submit answered {status}: {answer}", status=status)
            return str(answer["correlationId"])

        return submit, api.close

    return make


def measure(
    stack: Stack, request_type: str, *, requests: int, threads: int, deadline: Deadline
) -> Throughput:
    """``requests`` submissions of ``request_type`` from ``threads`` clients, run to the end."""
    wait_drained(stack, deadline)
    sent = burst(
        typed_sender(stack, request_type), threads=threads, count=requests, deadline=deadline
    )
    ids = [str(i) for i in sent.results]
    if not ids:
        raise BrokerError(f"no {request_type} submission was accepted: {sent.first_error}")
    wait_drained(stack, deadline, f"waiting for the {request_type} requests")
    found = outcomes(stack, ids)
    completed = [o for o in found if o.status == "Completed"]
    if not completed:
        raise BrokerError(f"none of {len(ids)} {request_type} requests completed")
    first = min(o.submitted for o in found)
    last = max(o.completed for o in completed if o.completed is not None)
    return Throughput(
        submitted=len(ids),
        completed=len(completed),
        failed=len(found) - len(completed) + sent.errors,
        seconds=last - first,
        latency=Latency.of([o.latency for o in completed if o.latency is not None]),
    )


def measure_all(
    stack: Stack, *, requests: int, threads: int, deadline: Deadline
) -> dict[str, Throughput]:
    return {
        mode: measure(stack, request_type, requests=requests, threads=threads, deadline=deadline)
        for mode, request_type in MODES.items()
    }


def as_dict(found: Mapping[str, Throughput]) -> dict[str, Any]:
    return {mode: figures.as_dict() for mode, figures in found.items()}


def summary(
    found: Mapping[str, Throughput], five_steps: Throughput | None, chain: Throughput | None
) -> list[str]:
    """One line per five-step shape: completions per second and the e2e p50."""
    rows: list[tuple[str, Throughput | None]] = [
        ("BenchFiveSteps (built-in activities)", five_steps),
        ("5 Python activities, inline", found.get("inline")),
        ("5 Python activities, task mode", found.get("task")),
        ("raw Celery chain of 5 no-op tasks", chain),
    ]
    lines = ["five steps, one run:"]
    for name, figures in rows:
        if figures is None:
            lines.append(f"  {name:<40} -")
            continue
        p50 = figures.latency.p50 * 1000
        lines.append(f"  {name:<40} {figures.rate:8,.1f}/s   p50 {p50:8.1f} ms")
    return lines
