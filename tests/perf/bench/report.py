"""What a benchmark run measured, and how it is shown: figures, ratios, targets, table, last line.

Every phase produces a small frozen result; ``Report`` gathers them, computes the broker/raw
ratios and the checks against the goals of the issue, writes ``latest.json`` for tools, draws a
rich table for people, and formats the one last line that scripts grep::

    e2e_ratio=<broker/raw throughput> light_p50_ratio=<broker/raw p50> ingress_rps=<n>
    chain_ratio=<five-step workflows/s over raw chains of five/s> cpu_ratio=<broker/raw CPU>

(one line; ``chain_ratio`` compares the broker's end-to-end phase, ``BenchFiveSteps`` requests,
with raw Celery chains of five no-op tasks; ``cpu_ratio`` the CPU time per completed request of
every process of each stack during its end-to-end phase).

Latencies are kept in seconds inside and shown in milliseconds. Percentiles interpolate linearly
between the two nearest ranks (numpy's default), so p50 of ``[1, 2]`` is 1.5.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.perf.bench.engine import FIVE_STEPS

#: version of the JSON layout written to latest.json
REPORT_VERSION = 2


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) percentile of ``values``, interpolated linearly; NaN when empty."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within 0 and 1, got {fraction}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    weight = position - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * weight


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when either is missing or the denominator is zero."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator


@dataclasses.dataclass(frozen=True)
class Latency:
    """A latency distribution in seconds."""

    count: int
    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Latency:
        if not samples:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(
            count=len(samples),
            p50=percentile(samples, 0.50),
            p95=percentile(samples, 0.95),
            p99=percentile(samples, 0.99),
            mean=sum(samples) / len(samples),
            max=max(samples),
        )

    def as_ms(self) -> dict[str, Any]:
        return {
            "count": self.count,
            **{
                f"{name}_ms": _round(getattr(self, name) * 1000, 2)
                for name in ("p50", "p95", "p99", "mean", "max")
            },
        }


@dataclasses.dataclass(frozen=True)
class Ingress:
    """Accepted submissions per second (broker: 202s over HTTPS; raw: ``send_task`` calls)."""

    accepted: int
    errors: int
    seconds: float
    latency: Latency

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds if self.seconds > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "errors": self.errors,
            "seconds": _round(self.seconds, 3),
            "per_second": _round(self.rate, 1),
            "latency": self.latency.as_ms(),
        }


@dataclasses.dataclass(frozen=True)
class Throughput:
    """N submissions run to completion: completions per second and submit-to-done latency."""

    submitted: int
    completed: int
    failed: int
    seconds: float
    latency: Latency

    @property
    def rate(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "submitted": self.submitted,
            "completed": self.completed,
            "failed": self.failed,
            "seconds": _round(self.seconds, 3),
            "per_second": _round(self.rate, 1),
            "latency": self.latency.as_ms(),
        }


@dataclasses.dataclass(frozen=True)
class Memory:
    """Worker RSS (main process plus pool children) at two request counts."""

    low_requests: int
    low_rss: int
    high_requests: int
    high_rss: int

    @property
    def growth_percent(self) -> float:
        return ratio(self.high_rss - self.low_rss, self.low_rss) * 100

    def as_dict(self) -> dict[str, Any]:
        return {
            "low_requests": self.low_requests,
            "low_rss_mib": _round(self.low_rss / 2**20, 1),
            "high_requests": self.high_requests,
            "high_rss_mib": _round(self.high_rss / 2**20, 1),
            "growth_percent": _round(self.growth_percent, 2),
        }


@dataclasses.dataclass(frozen=True)
class Cpu:
    """CPU seconds each group of a stack's processes used over a phase that completed
    ``requests`` requests (``cpu.CpuMeter``)."""

    seconds: dict[str, float]
    requests: int

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    @property
    def per_request(self) -> float:
        """CPU seconds per completed request, every process of the stack together."""
        return self.total / self.requests if self.requests > 0 else math.nan

    def group_per_request(self, group: str) -> float:
        if group not in self.seconds or self.requests <= 0:
            return math.nan
        return self.seconds[group] / self.requests

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": {name: _round(value, 3) for name, value in self.seconds.items()},
            "ms_per_request": {
                name: _round(self.group_per_request(name) * 1000, 3) for name in self.seconds
            },
            "total_ms_per_request": _round(self.per_request * 1000, 3),
        }


@dataclasses.dataclass(frozen=True)
class Side:
    """The figures of one side (the broker, or raw Celery).

    ``chain`` is raw Celery's only: chains of five no-op tasks, the shape of the broker's
    five-step workflow (the broker's ``e2e`` runs that workflow). ``cpu`` covers ``e2e``.
    """

    ingress: Ingress | None = None
    e2e: Throughput | None = None
    light: Latency | None = None
    chain: Throughput | None = None
    cpu: Cpu | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ingress": self.ingress.as_dict() if self.ingress else None,
            "e2e": self.e2e.as_dict() if self.e2e else None,
            "light": self.light.as_ms() if self.light else None,
            "chain": self.chain.as_dict() if self.chain else None,
            "cpu": self.cpu.as_dict() if self.cpu else None,
        }


@dataclasses.dataclass(frozen=True)
class Target:
    """One goal of the issue and where this run stands against it."""

    name: str
    goal: str
    value: float
    met: bool | None  # None: not measured in this run

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "goal": self.goal,
            "value": _round(self.value, 3),
            "met": self.met,
        }


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything one run measured."""

    backend: str
    concurrency: int
    cpus: int
    options: dict[str, Any]
    engine: list[dict[str, Any]]
    broker: Side
    raw: Side
    memory: Memory | None
    started_at: str
    seconds: float
    #: the 1-minute load average before and after the run: other work on the machine skews both
    #: sides, so a reader can tell a quiet run from a busy one
    load: tuple[float, float] = (math.nan, math.nan)
    #: how the shared processes' CPU was counted (``cpu.SHARED_NOTE``), shown with the figures
    cpu_note: str = ""
    #: five steps of Python activities (``python_steps``), by mode: inline, task
    python: dict[str, Throughput] = dataclasses.field(default_factory=dict)

    @property
    def e2e_ratio(self) -> float:
        return ratio(
            _nan(self.broker.e2e.rate if self.broker.e2e else None),
            _nan(self.raw.e2e.rate if self.raw.e2e else None),
        )

    @property
    def light_p50_ratio(self) -> float:
        return ratio(
            _nan(self.broker.light.p50 if self.broker.light else None),
            _nan(self.raw.light.p50 if self.raw.light else None),
        )

    @property
    def ingress_ratio(self) -> float:
        return ratio(
            _nan(self.broker.ingress.rate if self.broker.ingress else None),
            _nan(self.raw.ingress.rate if self.raw.ingress else None),
        )

    @property
    def ingress_rps(self) -> float:
        return self.broker.ingress.rate if self.broker.ingress else math.nan

    @property
    def chain_ratio(self) -> float:
        """Broker five-step workflows per second over raw Celery chains of five per second."""
        return ratio(
            _nan(self.broker.e2e.rate if self.broker.e2e else None),
            _nan(self.raw.chain.rate if self.raw.chain else None),
        )

    @property
    def cpu_ratio(self) -> float:
        """Broker CPU per completed request over raw Celery CPU per completed task."""
        return ratio(
            _nan(self.broker.cpu.per_request if self.broker.cpu else None),
            _nan(self.raw.cpu.per_request if self.raw.cpu else None),
        )

    def targets(self) -> list[Target]:
        """The goals of the issue; they are reported, never asserted."""
        five = next((r for r in self.engine if r["scenario"] == FIVE_STEPS), None)
        engine_rate = float(five["activities_per_second"]) if five else math.nan
        growth = self.memory.growth_percent if self.memory else math.nan
        return [
            _target("e2e throughput vs raw Celery", ">= 0.5x", self.e2e_ratio, lambda v: v >= 0.5),
            _target(
                "light-load p50 vs raw Celery", "<= 3x", self.light_p50_ratio, lambda v: v <= 3
            ),
            _target("ingress accepted/s", ">= 1000", self.ingress_rps, lambda v: v >= 1000),
            _target(
                "5-step workflow vs raw Celery chain of 5",
                ">= 3x",
                self.chain_ratio,
                lambda v: v >= 3,
            ),
            _target("worker RSS growth", "< 10%", growth, lambda v: v < 10),
            _target("engine 5-step activities/s", ">= 50000", engine_rate, lambda v: v >= 50_000),
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "started_at": self.started_at,
            "seconds": _round(self.seconds, 1),
            "backend": self.backend,
            "concurrency": self.concurrency,
            "cpus": self.cpus,
            "load_average": {"start": _round(self.load[0], 2), "end": _round(self.load[1], 2)},
            "options": self.options,
            "engine": self.engine,
            "broker": self.broker.as_dict(),
            "raw_celery": self.raw.as_dict(),
            "memory": self.memory.as_dict() if self.memory else None,
            "ratios": {
                "e2e_throughput": _round(self.e2e_ratio, 3),
                "light_p50": _round(self.light_p50_ratio, 3),
                "ingress": _round(self.ingress_ratio, 3),
                "chain": _round(self.chain_ratio, 3),
                "cpu_per_request": _round(self.cpu_ratio, 3),
            },
            "cpu_note": self.cpu_note,
            "python_activities": {mode: found.as_dict() for mode, found in self.python.items()},
            "targets": [t.as_dict() for t in self.targets()],
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n")


def _target(name: str, goal: str, value: float, check: Any) -> Target:
    return Target(name, goal, value, None if math.isnan(value) else bool(check(value)))


def _round(value: float, digits: int) -> float | None:
    """Rounded for JSON; NaN (not measured) becomes null."""
    return None if math.isnan(value) else round(value, digits)


def last_line(report: Report) -> str:
    """The machine-readable summary printed last (``nan`` where a figure was not measured)."""
    return (
        f"e2e_ratio={_fmt(report.e2e_ratio, 2)} "
        f"light_p50_ratio={_fmt(report.light_p50_ratio, 2)} "
        f"ingress_rps={_fmt(report.ingress_rps, 0)} "
        f"chain_ratio={_fmt(report.chain_ratio, 2)} "
        f"cpu_ratio={_fmt(report.cpu_ratio, 2)}"
    )


def _fmt(value: float, digits: int) -> str:
    return "nan" if math.isnan(value) else f"{value:.{digits}f}"


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 1000:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.0f}"


def render(report: Report) -> Any:
    """The rich renderables for people: the side-by-side table, engine and memory, targets."""
    from rich.console import Group
    from rich.table import Table

    title = f"broker vs raw Celery: {report.backend}, concurrency {report.concurrency}"
    caption = (
        f"1-min load average: {_fmt(report.load[0], 2)} before, {_fmt(report.load[1], 2)} after"
    )
    sides = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    sides.add_column("figure")
    sides.add_column("broker", justify="right")
    sides.add_column("raw Celery", justify="right")
    sides.add_column("broker/raw", justify="right")
    b, r = report.broker, report.raw
    sides.add_row(
        "ingress accepted/s",
        _rate(b.ingress.rate if b.ingress else None),
        _rate(r.ingress.rate if r.ingress else None),
        _fmt(report.ingress_ratio, 2),
    )
    sides.add_row(
        "ingress p50 / p99 ms",
        _pair(b.ingress.latency if b.ingress else None, "p99"),
        _pair(r.ingress.latency if r.ingress else None, "p99"),
        "",
    )
    sides.add_row(
        "e2e completions/s",
        _rate(b.e2e.rate if b.e2e else None),
        _rate(r.e2e.rate if r.e2e else None),
        _fmt(report.e2e_ratio, 2),
    )
    for name in ("p50", "p95", "p99"):
        sides.add_row(
            f"e2e {name} ms",
            _ms(getattr(b.e2e.latency, name) if b.e2e else None),
            _ms(getattr(r.e2e.latency, name) if r.e2e else None),
            "",
        )
    sides.add_row(
        "light p50 / p99 ms",
        _pair(b.light, "p99"),
        _pair(r.light, "p99"),
        _fmt(report.light_p50_ratio, 2),
    )
    sides.add_row(
        "5 steps/s: workflow vs chain of 5",
        _rate(b.e2e.rate if b.e2e else None),
        _rate(r.chain.rate if r.chain else None),
        _fmt(report.chain_ratio, 2),
    )
    sides.add_row(
        "chain of 5 p50 / p99 ms",
        "",
        _pair(r.chain.latency if r.chain else None, "p99"),
        "",
    )

    engine = Table(title="engine, in process", title_justify="left")
    for column in ("scenario", "activities/run", "runs/s", "activities/s"):
        engine.add_column(column, justify="left" if column == "scenario" else "right")
    for row in report.engine:
        engine.add_row(
            str(row["scenario"]),
            str(row["activities_per_run"]),
            f"{row['runs_per_second']:,.0f}",
            f"{row['activities_per_second']:,.0f}",
        )

    targets = Table(title="targets (goals, not tests)", title_justify="left")
    for column in ("target", "goal", "this run", "met"):
        targets.add_column(column)
    for target in report.targets():
        met = {True: "yes", False: "no", None: "-"}[target.met]
        targets.add_row(target.name, target.goal, _fmt(target.value, 2), met)

    parts: list[Any] = [sides, _cpu_table(report), engine]
    if report.memory is not None:
        m = report.memory
        memory = Table(title="worker memory (main + pool children)", title_justify="left")
        for column in ("requests", "RSS MiB"):
            memory.add_column(column, justify="right")
        memory.add_row(str(m.low_requests), f"{m.low_rss / 2**20:.1f}")
        memory.add_row(str(m.high_requests), f"{m.high_rss / 2**20:.1f}")
        memory.add_row("growth", f"{_fmt(m.growth_percent, 1)}%")
        parts.append(memory)
    parts.append(targets)
    return Group(*parts)


def _cpu_table(report: Report) -> Any:
    """CPU ms per completed request of each group of processes, both sides of the e2e phase."""
    from rich.table import Table

    b, r = report.broker.cpu, report.raw.cpu
    cpu = Table(
        title="CPU per completed request, end-to-end phase (ms, from /proc)",
        title_justify="left",
        caption=report.cpu_note or None,
        caption_justify="left",
    )
    for column in ("processes", "broker", "raw Celery"):
        cpu.add_column(column, justify="left" if column == "processes" else "right")
    groups = list(dict.fromkeys([*(b.seconds if b else {}), *(r.seconds if r else {})]))
    for group in groups:
        cpu.add_row(
            group,
            _ms(b.group_per_request(group) if b else None),
            _ms(r.group_per_request(group) if r else None),
        )
    cpu.add_row(
        "all (broker/raw " + _fmt(report.cpu_ratio, 2) + ")",
        _ms(b.per_request if b else None),
        _ms(r.per_request if r else None),
    )
    return cpu


def _pair(latency: Latency | None, other: str) -> str:
    if latency is None:
        return "-"
    return f"{_ms(latency.p50)} / {_ms(getattr(latency, other))}"
