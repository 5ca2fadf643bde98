"""``python -m tests.perf.bench``: measure the broker end to end, side by side with raw Celery, in
one run.

The phases, in order (each side has the machine to itself while it is measured):

1. engine: in-process activities per second (no stack yet);
2. broker ingress: 202s per second from 8 keep-alive mTLS clients (the worker is not started yet,
   so the API alone is measured; the backlog then drains and warms the worker up);
3. broker end to end: N ``BenchFiveSteps`` requests (five steps each) as fast as accepted, to
   Completed, with the CPU time every process of the stack used meanwhile (``cpu``);
4. broker light load: requests one at a time, polled by the client;
5. worker memory: RSS after the low and the high request counts;
6. the same N requests of a five-step workflow of Python activities, inline, then as tasks;
7. raw Celery, after the broker's roles are stopped: the same three figures for a no-op task (the
   end-to-end one with its CPU time), and N chains of five no-op tasks run to the end.

Everything runs under one global timeout; every process started is stopped by its PID, and the
database, the Redis database and the temporary folder are cleaned up, also on failure or Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from broker.errors import BrokerError
from tests.perf.bench import e2e, ingress, python_steps, raw_celery
from tests.perf.bench.cpu import SHARED_NOTE, CpuMeter
from tests.perf.bench.engine import measure_all
from tests.perf.bench.harness import (
    DEFAULT_PG_ADMIN_URL,
    DEFAULT_REDIS_DB,
    DEFAULT_REDIS_URL,
    Backend,
    Stack,
)
from tests.perf.bench.processes import Deadline, alarm
from tests.perf.bench.report import Cpu, Latency, Memory, Report, Side, last_line, render

#: --quick: every phase small, the whole run in about a minute
QUICK = {
    "requests": 200,
    "light": 30,
    "memory_requests": 500,
    "ingress_seconds": 2.0,
    "ingress_limit": 400,
    "engine_seconds": 0.3,
}


@dataclasses.dataclass(frozen=True)
class Options:
    """One run's knobs (the command line's options)."""

    embedded: bool = False
    requests: int = 2000
    light: int = 300
    memory_requests: int = 5000
    ingress_seconds: float = 5.0
    #: at most this many submissions in the ingress burst (they are run afterwards)
    ingress_limit: int = 20_000
    engine_seconds: float = 1.0
    threads: int = 8
    concurrency: int = 2
    raw: bool = True
    timeout: float = 1800.0
    output: Path = Path("var") / "bench" / "latest.json"
    pg_admin_url: str = DEFAULT_PG_ADMIN_URL
    redis_url: str = DEFAULT_REDIS_URL
    redis_db: int = DEFAULT_REDIS_DB

    @property
    def memory_low(self) -> int:
        """The first memory mark: 1,000 requests, or a fifth of the high mark in short runs."""
        return min(1000, self.memory_requests // 5)

    @property
    def backend(self) -> Backend:
        return Backend(self.embedded, self.pg_admin_url, self.redis_url, self.redis_db)

    def as_dict(self) -> dict[str, Any]:
        keep = (
            "requests",
            "light",
            "memory_requests",
            "ingress_seconds",
            "ingress_limit",
            "engine_seconds",
            "threads",
            "raw",
            "timeout",
        )
        return {name: getattr(self, name) for name in keep}


def say(message: str) -> None:
    click.echo(f"[bench] {message}", err=True)


def run_bench(options: Options) -> Report:
    """Run every phase and answer the report (nothing is printed but progress on stderr)."""
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    deadline = Deadline(options.timeout)
    with alarm(deadline):
        say(f"engine: {options.engine_seconds:g}s per scenario")
        engine_rows = measure_all(options.engine_seconds)
        say(f"starting the stack ({options.backend.name}, concurrency {options.concurrency})")
        with Stack(options.backend, concurrency=options.concurrency, deadline=deadline) as stack:
            broker, memory = _broker_side(stack, options, deadline)
            say(f"broker, five Python activities inline and as tasks: {options.requests} each")
            python = python_steps.measure_all(
                stack, requests=options.requests, threads=options.threads, deadline=deadline
            )
            stack.stop_broker()
            raw = _raw_side(stack, options, deadline) if options.raw else Side()
    return Report(
        backend=options.backend.name,
        concurrency=options.concurrency,
        cpus=os.cpu_count() or 0,
        options=options.as_dict(),
        engine=engine_rows,
        broker=broker,
        raw=raw,
        memory=memory,
        started_at=started_at,
        seconds=time.monotonic() - started,
        load=(load_before, os.getloadavg()[0]),
        cpu_note="" if options.embedded else SHARED_NOTE,
        python=python,
    )


def _broker_side(stack: Stack, options: Options, deadline: Deadline) -> tuple[Side, Memory | None]:
    stack.start_listeners()
    say(f"broker ingress: {options.threads} clients for {options.ingress_seconds:g}s")
    accepted = ingress.measure_ingress(
        stack,
        seconds=options.ingress_seconds,
        threads=options.threads,
        deadline=deadline,
        limit=options.ingress_limit,
    )
    say(f"  {accepted.rate:,.0f} accepted/s; starting the worker, draining {accepted.accepted}")
    worker = stack.start_worker()
    sampler = e2e.MemorySampler(stack, worker.pid)
    sampler.start()
    try:
        e2e.wait_drained(stack, deadline)
        say(f"broker end to end: {options.requests} requests")
        meter = CpuMeter(stack.cpu_groups()).start()
        try:
            throughput = e2e.measure_e2e(
                stack, requests=options.requests, threads=options.threads, deadline=deadline
            )
        finally:
            used = meter.stop()
        cpu = Cpu(used, throughput.completed)
        say(
            f"  {throughput.rate:,.0f} completed/s, {cpu.per_request * 1000:.1f} ms CPU per request"
        )
        say(f"broker light load: {options.light} requests one at a time")
        light: Latency | None = None
        if options.light:
            light = e2e.measure_light(stack, requests=options.light, deadline=deadline)
            say(f"  p50 {light.p50 * 1000:.1f} ms")
        memory = None
        if options.memory_requests:
            say(f"worker memory: up to {options.memory_requests} completed requests")
            memory = e2e.measure_memory(
                stack,
                sampler,
                low=options.memory_low,
                high=options.memory_requests,
                threads=options.threads,
                deadline=deadline,
            )
            say(f"  growth {memory.growth_percent:.1f}%")
    finally:
        sampler.stop()
    return Side(accepted, throughput, light, cpu=cpu), memory


def _raw_side(stack: Stack, options: Options, deadline: Deadline) -> Side:
    app = raw_celery.create_raw_app(stack.settings, set_as_current=False)
    try:
        say(f"raw Celery ingress: send_task from {options.threads} threads")
        accepted = raw_celery.measure_ingress(
            app,
            seconds=options.ingress_seconds,
            threads=options.threads,
            deadline=deadline,
            limit=options.ingress_limit,
        )
        stack.start_raw_worker()
        raw_celery.warm_up(app, stack, deadline)
        say(f"raw Celery end to end: {options.requests} tasks")
        meter = CpuMeter(stack.cpu_groups(raw=True)).start()
        try:
            throughput = raw_celery.measure_e2e(
                app, stack, requests=options.requests, threads=options.threads, deadline=deadline
            )
        finally:
            used = meter.stop()
        cpu = Cpu(used, throughput.completed)
        say(f"  {throughput.rate:,.0f} completed/s, {cpu.per_request * 1000:.1f} ms CPU per task")
        say(f"raw Celery chains of {raw_celery.CHAIN_LENGTH}: {options.requests} chains")
        chains = raw_celery.measure_chain(
            app, stack, chains=options.requests, threads=options.threads, deadline=deadline
        )
        say(f"  {chains.rate:,.0f} chains/s")
        light = None
        if options.light:
            say(f"raw Celery light load: {options.light} tasks one at a time")
            light = raw_celery.measure_light(app, stack, requests=options.light, deadline=deadline)
        stack.stop("raw-worker")
    finally:
        app.close()
    return Side(accepted, throughput, light, chain=chains, cpu=cpu)


def _on_sigterm(_signum: int, _frame: Any) -> None:
    # Unwind through the harness's cleanup, as Ctrl-C does.
    raise KeyboardInterrupt


@click.command()
@click.option("--embedded", is_flag=True, help="SQLite + filesystem transport + file locks.")
@click.option("--requests", "requests_", type=click.IntRange(1), help="End-to-end requests.")
@click.option("--light", type=click.IntRange(0), help="Light-load requests, one at a time.")
@click.option(
    "--memory-requests",
    type=click.IntRange(0),
    help="Completed requests at the high memory mark (the low mark is a fifth, at most 1,000).",
)
@click.option("--ingress-seconds", type=click.FloatRange(0.1), help="Length of the ingress burst.")
@click.option(
    "--ingress-limit",
    type=click.IntRange(1),
    help="Most submissions in the ingress burst (the broker runs them all afterwards).",
)
@click.option("--concurrency", type=click.IntRange(1), default=2, show_default=True)
@click.option("--threads", type=click.IntRange(1), default=8, show_default=True)
@click.option("--quick", is_flag=True, help="Small numbers everywhere: about a minute.")
@click.option("--no-raw", is_flag=True, help="Skip the raw Celery side.")
@click.option(
    "--timeout", type=click.FloatRange(10), default=1800, show_default=True, help="Seconds."
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("var") / "bench" / "latest.json",
    show_default=True,
)
@click.option("--postgres-admin-url", default=DEFAULT_PG_ADMIN_URL, show_default=True)
@click.option("--redis-url", default=DEFAULT_REDIS_URL, show_default=True)
@click.option("--redis-db", type=click.IntRange(0), default=DEFAULT_REDIS_DB, show_default=True)
def bench(
    embedded: bool,
    requests_: int | None,
    light: int | None,
    memory_requests: int | None,
    ingress_seconds: float | None,
    ingress_limit: int | None,
    concurrency: int,
    threads: int,
    quick: bool,
    no_raw: bool,
    timeout: float,
    output: Path,
    postgres_admin_url: str,
    redis_url: str,
    redis_db: int,
) -> None:
    """Benchmark the broker on a private loopback stack, side by side with raw Celery.

    Prints a table, writes OUTPUT (JSON), and ends with the line
    ``e2e_ratio=<x> light_p50_ratio=<y> ingress_rps=<n> chain_ratio=<c> cpu_ratio=<r>``.
    """
    from rich.console import Console

    base = {**dataclasses.asdict(Options()), **(QUICK if quick else {})}
    given = {
        "requests": requests_,
        "light": light,
        "memory_requests": memory_requests,
        "ingress_seconds": ingress_seconds,
        "ingress_limit": ingress_limit,
    }
    base.update({k: v for k, v in given.items() if v is not None})
    base.update(
        embedded=embedded,
        concurrency=concurrency,
        threads=threads,
        raw=not no_raw,
        timeout=timeout,
        output=output,
        pg_admin_url=postgres_admin_url,
        redis_url=redis_url,
        redis_db=redis_db,
    )
    options = Options(**base)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        report = run_bench(options)
    except BrokerError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        signal.signal(signal.SIGTERM, previous)
    report.write(options.output)
    Console(soft_wrap=True).print(render(report))
    for line in python_steps.summary(report.python, report.broker.e2e, report.raw.chain):
        click.echo(line)
    click.echo(f"wrote {options.output}")
    click.echo(last_line(report))
