"""The soak report's maths: percentiles, growth, windows and the verdict's last line."""

from __future__ import annotations

import math

import pytest

from tests.soak.report import Finished, Sample, Verdict, growth_pct, percentile, verdict, windows
from tests.soak.run import fault_spacing, warmup, window_length


def sample(at: float, rss: int, rows: int) -> Sample:
    return Sample(
        at=at,
        rss={"worker": rss},
        fds={"worker": 10},
        rows={"outbox": rows, "requests": rows * 10},
        db_connections=5,
        redis_connections=3,
        redis_memory=1000,
        outbox_depth=1,
        bookmark_queue_depth=0,
    )


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([3.0], 99) == 3
    assert math.isnan(percentile([], 50))


def test_growth_is_relative_to_the_first_figure() -> None:
    assert growth_pct(100, 110) == pytest.approx(10)
    assert growth_pct(200, 150) == pytest.approx(-25)
    assert growth_pct(0, 0) == 0
    assert math.isnan(growth_pct(0, 5))


def test_windows_fold_samples_latencies_and_faults() -> None:
    # Given three minutes of samples, finished requests and one fault in the second minute
    samples = [sample(t, rss=100 + int(t), rows=10) for t in range(0, 180, 10)]
    finished = [Finished(at=t + 0.5, latency=1.0 + (t % 60) / 60) for t in range(180)]
    folded = windows(
        length=60,
        duration=180,
        samples=samples,
        accepted_at=[t + 0.1 for t in range(180)],
        finished=finished,
        faults=[(75.0, "Redis restart")],
    )
    # Then there are three windows, each with its own figures
    assert [(w.start, w.end) for w in folded] == [(0, 60), (60, 120), (120, 180)]
    assert [w.accepted for w in folded] == [60, 60, 60]
    assert [w.completed for w in folded] == [60, 60, 60]
    assert folded[1].faults == ["Redis restart"]
    assert folded[0].rss["worker"] == pytest.approx(125)  # mean of 100, 110, ..., 150
    assert folded[2].p99 == pytest.approx(1 + 59 / 60)


def test_a_short_tail_joins_the_last_window() -> None:
    folded = windows(length=60, duration=200, samples=[], accepted_at=[], finished=[], faults=[])
    assert [(w.start, w.end) for w in folded] == [(0, 60), (60, 120), (120, 200)]


def test_the_verdict_compares_the_last_window_with_the_first_after_the_warmup() -> None:
    # Given RSS growing 20% and rows flat between minute 2 and minute 4, latency doubled
    samples = [sample(t, rss=1000 if t < 180 else 1200, rows=50) for t in range(0, 300, 5)]
    finished = [Finished(at=t, latency=1.0 if t < 240 else 2.0) for t in range(300)]
    folded = windows(
        length=60, duration=300, samples=samples, accepted_at=[], finished=finished, faults=[]
    )
    result = verdict(
        minutes=5,
        lost=0,
        duplicates=0,
        stuck=0,
        folded=folded,
        bounded_tables=["outbox"],
        warmup=120,
    )
    # Then the figures compare window 120-180 s with window 240-300 s
    assert result.rss_growth_pct == pytest.approx(20)
    assert result.rows_growth_pct == pytest.approx(0)
    assert result.p99_drift_pct == pytest.approx(100)
    assert result.problems() == [
        "rss_growth_pct=20.0 (limit 10)",
        "p99_drift_pct=100.0 (limit 25)",
    ]
    assert result.line() == (
        "soak_minutes=5 lost=0 duplicates=0 stuck=0 rss_growth_pct=20.0 rows_growth_pct=0.0 "
        "p99_drift_pct=100.0"
    )


def test_losses_fail_the_run_and_too_short_a_run_compares_nothing() -> None:
    result = Verdict(1, lost=2, duplicates=0, stuck=1, rss_growth_pct=math.nan,
                     rows_growth_pct=math.nan, p99_drift_pct=math.nan)  # fmt: skip
    assert result.problems()[:2] == ["lost=2", "stuck=1"]
    folded = windows(length=60, duration=120, samples=[], accepted_at=[], finished=[], faults=[])
    short = verdict(minutes=2, lost=0, duplicates=0, stuck=0, folded=folded,
                    bounded_tables=[], warmup=120)  # fmt: skip
    assert math.isnan(short.rss_growth_pct)


def test_every_fault_fits_in_the_short_run_and_the_long_one_repeats_them() -> None:
    # Given the eight faults, the first after a minute (or a sixth of the run), the last a minute
    # before the load stops
    for minutes, expected in ((5, 8), (30, 12), (60, 24)):
        duration = minutes * 60.0
        every = fault_spacing(duration, 8)
        first = min(60.0, duration / 6)
        fired = len([at for at in (first + n * every for n in range(100)) if at < duration - 60])
        # Then the short run sees each fault once and the long one sees them again
        assert fired == expected, (minutes, every)
    assert (window_length(5), warmup(5)) == (60.0, 120.0)
    assert (window_length(30), warmup(30)) == (300.0, 300.0)
