"""The soak's figures: samples folded into windows, growth and drift, the JSON and the last line.

Pure functions over plain data, so their maths is unit-tested without a stack. Growth compares the
last window with the first one that starts after the warm-up; a window's value is the mean of its
samples (RSS, rows) or the percentile of the latencies of the requests that finished in it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading of the stack, ``at`` seconds after the load started."""

    at: float
    rss: Mapping[str, int]  # bytes per role (the role's process tree)
    fds: Mapping[str, int]  # open file descriptors per role
    rows: Mapping[str, int]  # rows per table
    db_connections: int
    redis_connections: int
    redis_memory: int
    outbox_depth: int
    bookmark_queue_depth: int


@dataclasses.dataclass(frozen=True)
class Finished:
    """A request that reached a terminal state: when (seconds after the start) and how long it
    took from submission."""

    at: float
    latency: float


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` percentile (0-100) by the nearest-rank method; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def growth_pct(first: float, last: float) -> float:
    """How much ``last`` grew over ``first``, in percent (negative when it shrank); 0 when both
    are 0, NaN when only ``first`` is."""
    if first == 0:
        return 0.0 if last == 0 else math.nan
    return (last - first) / first * 100


def mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else math.nan


@dataclasses.dataclass(frozen=True)
class Window:
    """The figures of one window [start, end)."""

    start: float
    end: float
    accepted: int
    completed: int
    p50: float
    p99: float
    rss: dict[str, float]
    fds: dict[str, float]
    rows: dict[str, float]
    db_connections: float
    redis_connections: float
    redis_memory: float
    outbox_depth: float
    bookmark_queue_depth: float
    faults: list[str]

    @property
    def rss_total(self) -> float:
        return sum(self.rss.values())

    def rows_total(self, tables: Iterable[str]) -> float:
        return sum(self.rows.get(t, 0.0) for t in tables)


def windows(
    *,
    length: float,
    duration: float,
    samples: Sequence[Sample],
    accepted_at: Sequence[float],
    finished: Sequence[Finished],
    faults: Sequence[tuple[float, str]],
) -> list[Window]:
    """Fold the run into consecutive windows of ``length`` seconds covering ``duration``; a last
    partial window shorter than half a window joins the one before."""
    count = max(1, int(duration // length))
    if duration - count * length >= length / 2:
        count += 1
    bounds = [(i * length, (i + 1) * length) for i in range(count)]
    bounds[-1] = (bounds[-1][0], max(bounds[-1][1], duration))
    result = []
    for start, end in bounds:
        inside = [s for s in samples if start <= s.at < end]
        latencies = [f.latency for f in finished if start <= f.at < end]
        roles = sorted({r for s in inside for r in s.rss})
        tables = sorted({t for s in inside for t in s.rows})
        result.append(
            Window(
                start=start,
                end=end,
                accepted=sum(1 for a in accepted_at if start <= a < end),
                completed=len(latencies),
                p50=percentile(latencies, 50),
                p99=percentile(latencies, 99),
                rss={r: mean(s.rss.get(r, 0) for s in inside) for r in roles},
                fds={r: mean(s.fds.get(r, 0) for s in inside) for r in roles},
                rows={t: mean(s.rows.get(t, 0) for s in inside) for t in tables},
                db_connections=mean(s.db_connections for s in inside),
                redis_connections=mean(s.redis_connections for s in inside),
                redis_memory=mean(s.redis_memory for s in inside),
                outbox_depth=mean(s.outbox_depth for s in inside),
                bookmark_queue_depth=mean(s.bookmark_queue_depth for s in inside),
                faults=[name for at, name in faults if start <= at < end],
            )
        )
    return result


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The run's outcome: the invariants (must be 0) and the growth figures."""

    minutes: float
    lost: int
    duplicates: int
    stuck: int
    rss_growth_pct: float
    rows_growth_pct: float
    p99_drift_pct: float

    #: the limits a run must keep
    RSS_LIMIT = 10.0
    ROWS_LIMIT = 10.0
    P99_LIMIT = 25.0

    def problems(self) -> list[str]:
        """What this run broke (empty when it passed); NaN growth counts as broken."""
        found = [
            f"{name}={value}"
            for name, value in (
                ("lost", self.lost),
                ("duplicates", self.duplicates),
                ("stuck", self.stuck),
            )
            if value
        ]
        for name, value, limit in (
            ("rss_growth_pct", self.rss_growth_pct, self.RSS_LIMIT),
            ("rows_growth_pct", self.rows_growth_pct, self.ROWS_LIMIT),
            ("p99_drift_pct", self.p99_drift_pct, self.P99_LIMIT),
        ):
            if math.isnan(value) or value >= limit:
                found.append(f"{name}={value:.1f} (limit {limit:g})")
        return found

    def line(self) -> str:
        return (
            f"soak_minutes={self.minutes:g} lost={self.lost} duplicates={self.duplicates} "
            f"stuck={self.stuck} rss_growth_pct={self.rss_growth_pct:.1f} "
            f"rows_growth_pct={self.rows_growth_pct:.1f} p99_drift_pct={self.p99_drift_pct:.1f}"
        )


def verdict(
    *,
    minutes: float,
    lost: int,
    duplicates: int,
    stuck: int,
    folded: Sequence[Window],
    bounded_tables: Iterable[str],
    warmup: float,
) -> Verdict:
    """Growth of the last window over the first one starting after ``warmup`` seconds; when no
    later window follows that one, nothing can be compared (NaN)."""
    tables = list(bounded_tables)
    after = [w for w in folded if w.start >= warmup]
    if len(after) < 2:
        nan = math.nan
        return Verdict(minutes, lost, duplicates, stuck, nan, nan, nan)
    first, last = after[0], after[-1]
    return Verdict(
        minutes=minutes,
        lost=lost,
        duplicates=duplicates,
        stuck=stuck,
        rss_growth_pct=growth_pct(first.rss_total, last.rss_total),
        rows_growth_pct=growth_pct(first.rows_total(tables), last.rows_total(tables)),
        p99_drift_pct=growth_pct(first.p99, last.p99),
    )


def as_json(value: Any) -> Any:
    """``value`` with dataclasses as dicts and NaN as None (JSON has no NaN)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: as_json(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
