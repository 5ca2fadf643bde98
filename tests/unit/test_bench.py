"""The benchmark harness's pieces: percentile math, the report and its last line, CPU time from
/proc, process control, and one tiny end-to-end run on the embedded default."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from broker.errors import BrokerError
from tests.perf.bench.commands import Options, bench, run_bench
from tests.perf.bench.cpu import (
    CLOCK_TICKS,
    CpuMeter,
    Ledger,
    ProcStat,
    is_shared_postgres_process,
    parse_stat,
    select_postgres,
    select_redis,
    serves_database,
)
from tests.perf.bench.processes import Deadline, alarm
from tests.perf.bench.report import (
    Cpu,
    Ingress,
    Latency,
    Memory,
    Report,
    Side,
    Throughput,
    last_line,
    percentile,
    ratio,
    render,
)
from tests.support.stack.process import Process, children_of, tree_rss_bytes

LAST_LINE = re.compile(
    r"^e2e_ratio=(\d+\.\d{2}|nan) light_p50_ratio=(\d+\.\d{2}|nan) ingress_rps=(\d+|nan) "
    r"chain_ratio=(\d+\.\d{2}|nan) cpu_ratio=(\d+\.\d{2}|nan)$"
)


def report(broker: Side, raw: Side, memory: Memory | None = None) -> Report:
    return Report(
        backend="test",
        concurrency=2,
        cpus=2,
        options={},
        engine=[
            {
                "scenario": "5-activity sequence",
                "activities_per_run": 6,
                "runs": 10,
                "seconds": 1.0,
                "runs_per_second": 10_000.0,
                "activities_per_second": 60_000,
            }
        ],
        broker=broker,
        raw=raw,
        memory=memory,
        started_at="2026-01-01T00:00:00+00:00",
        seconds=1.0,
        load=(0.5, 1.25),
    )


def throughput(rate: float) -> Throughput:
    return Throughput(int(rate * 4), int(rate * 4), 0, 4.0, Latency.of([0.1, 0.2]))


def side(
    ingress_rate: float,
    e2e_rate: float,
    light_p50: float,
    *,
    chain_rate: float | None = None,
    cpu_ms: float | None = None,
) -> Side:
    """One side's figures; ``cpu_ms``: CPU per request, split 3:1 between worker and redis."""
    requests = int(e2e_rate * 4)
    cpu = None
    if cpu_ms is not None:
        total = cpu_ms / 1000 * requests
        cpu = Cpu({"worker": total * 0.75, "redis": total * 0.25}, requests)
    return Side(
        ingress=Ingress(int(ingress_rate * 2), 0, 2.0, Latency.of([0.01])),
        e2e=throughput(e2e_rate),
        light=Latency.of([light_p50]),
        chain=throughput(chain_rate) if chain_rate is not None else None,
        cpu=cpu,
    )


# Percentiles ---------------------------------------------------------------------------------


def test_percentile_interpolates_between_the_nearest_ranks() -> None:
    # Given four samples
    samples = [4.0, 1.0, 3.0, 2.0]
    # Then the median lies halfway between the middle two, and the ends are the extremes
    assert percentile(samples, 0.5) == 2.5
    assert percentile(samples, 0.0) == 1.0
    assert percentile(samples, 1.0) == 4.0
    assert percentile(samples, 0.99) == pytest.approx(3.97)


def test_percentile_of_one_sample_is_that_sample_and_of_none_is_nan() -> None:
    assert percentile([7.0], 0.99) == 7.0
    assert math.isnan(percentile([], 0.5))


def test_percentile_refuses_a_fraction_outside_zero_and_one() -> None:
    with pytest.raises(ValueError, match="fraction"):
        percentile([1.0], 50)


def test_latency_summary_reports_milliseconds_and_null_when_empty() -> None:
    # Given a distribution from 1 ms to 100 ms
    latency = Latency.of([i / 1000 for i in range(1, 101)])
    # Then its summary is in milliseconds
    shown = latency.as_ms()
    assert shown["count"] == 100
    assert shown["p50_ms"] == 50.5
    assert shown["max_ms"] == 100.0
    # And an empty one has no numbers rather than NaN (JSON has no NaN)
    assert Latency.of([]).as_ms()["p99_ms"] is None


def test_ratio_is_nan_when_a_side_is_missing_or_zero() -> None:
    assert ratio(1.0, 4.0) == 0.25
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(math.nan, 2.0))


# The report ----------------------------------------------------------------------------------


def test_last_line_has_the_exact_format_with_broker_over_raw_ratios() -> None:
    # Given a broker at half the raw throughput, twice the raw light-load p50, 1234.4 accepted/s,
    # four times as many five-step workflows/s as raw chains of five, and 3x the CPU per request
    result = report(
        broker=side(1234.4, 100.0, 0.020, cpu_ms=6.0),
        raw=side(5000.0, 200.0, 0.010, chain_rate=25.0, cpu_ms=2.0),
    )
    # When the last line is formatted
    line = last_line(result)
    # Then it reads exactly so
    assert line == (
        "e2e_ratio=0.50 light_p50_ratio=2.00 ingress_rps=1234 chain_ratio=4.00 cpu_ratio=3.00"
    )
    assert LAST_LINE.match(line)


def test_last_line_says_nan_for_figures_not_measured() -> None:
    # Given a run without the raw Celery side
    result = report(broker=side(800.0, 100.0, 0.02, cpu_ms=5.0), raw=Side())
    # Then the ratios are nan and the ingress rate is still given
    assert last_line(result) == (
        "e2e_ratio=nan light_p50_ratio=nan ingress_rps=800 chain_ratio=nan cpu_ratio=nan"
    )


def test_report_json_has_ratios_targets_and_no_nan(tmp_path: Path) -> None:
    # Given a run that meets the throughput goal and misses the latency and ingress goals
    memory = Memory(
        low_requests=1000, low_rss=100 * 2**20, high_requests=5000, high_rss=105 * 2**20
    )
    result = report(
        broker=side(500.0, 150.0, 0.05, cpu_ms=6.0),
        raw=side(3000.0, 200.0, 0.01, chain_rate=60.0, cpu_ms=2.0),
        memory=memory,
    )
    # When it is written
    out = tmp_path / "bench" / "latest.json"
    result.write(out)
    document = json.loads(out.read_text())
    # Then the file holds the ratios, the memory growth and a verdict per target
    assert document["version"] == 2
    assert document["load_average"] == {"start": 0.5, "end": 1.25}
    assert document["ratios"] == {
        "e2e_throughput": 0.75,
        "light_p50": 5.0,
        "ingress": 0.167,
        "chain": 2.5,
        "cpu_per_request": 3.0,
    }
    assert document["broker"]["cpu"]["total_ms_per_request"] == 6.0
    assert document["broker"]["cpu"]["ms_per_request"] == {"worker": 4.5, "redis": 1.5}
    assert document["raw_celery"]["chain"]["per_second"] == 60.0
    assert document["memory"]["growth_percent"] == 5.0
    verdicts = {t["name"]: t["met"] for t in document["targets"]}
    assert verdicts == {
        "e2e throughput vs raw Celery": True,
        "light-load p50 vs raw Celery": False,
        "ingress accepted/s": False,
        "5-step workflow vs raw Celery chain of 5": False,
        "worker RSS growth": True,
        "engine 5-step activities/s": True,
    }
    # And it is strict JSON (a missing figure is null, never NaN)
    json.dumps(document, allow_nan=False)


def test_report_json_is_strict_when_the_raw_side_is_missing() -> None:
    document = report(broker=side(500.0, 150.0, 0.05), raw=Side()).as_dict()
    json.dumps(document, allow_nan=False)
    assert document["raw_celery"]["e2e"] is None
    assert {t["name"]: t["met"] for t in document["targets"]}[
        "e2e throughput vs raw Celery"
    ] is None


def test_light_p50_target_is_three_times_raw_and_chain_target_three_times_the_chain() -> None:
    # Given a broker at exactly 3x raw's light-load p50 and 3x raw's chains of five per second
    result = report(broker=side(500.0, 150.0, 0.03), raw=side(3000.0, 200.0, 0.01, chain_rate=50.0))
    verdicts = {t.name: (t.goal, t.met) for t in result.targets()}
    # Then both goals are met, and a hair worse on either misses it
    assert verdicts["light-load p50 vs raw Celery"] == ("<= 3x", True)
    assert verdicts["5-step workflow vs raw Celery chain of 5"] == (">= 3x", True)
    worse = report(
        broker=side(500.0, 150.0, 0.0301), raw=side(3000.0, 200.0, 0.01, chain_rate=51.0)
    )
    assert {t.name: t.met for t in worse.targets()}["light-load p50 vs raw Celery"] is False
    assert {t.name: t.met for t in worse.targets()}[
        "5-step workflow vs raw Celery chain of 5"
    ] is False


def test_table_shows_both_sides_and_the_ratio() -> None:
    # Given a report
    result = report(
        broker=side(500.0, 150.0, 0.05, cpu_ms=6.0),
        raw=side(3000.0, 200.0, 0.01, chain_rate=60.0, cpu_ms=2.0),
    )
    # When it is rendered for people
    console = Console(record=True, width=120)
    console.print(render(result))
    text = console.export_text()
    # Then the figures and the ratio appear side by side
    assert "e2e completions/s" in text
    assert "150" in text
    assert "200" in text
    assert "0.75" in text
    assert "5-activity sequence" in text
    # And the chain row and the CPU table with its ratio
    assert "workflow vs chain of 5" in text
    assert "2.50" in text
    assert "CPU per completed request" in text
    assert "broker/raw 3.00" in text


# CPU from /proc ------------------------------------------------------------------------------

# A real line's shape: the command name holds a space and a parenthesis.
STAT_LINE = (
    "4242 (gunicorn: w) rk) S 4200 4200 4200 0 -1 4194560 1500 0 0 0 "
    "250 75 3 1 20 0 3 0 98765 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 "
    "17 1 0 0 0 0 0"
)


def test_parse_stat_reads_pid_parent_start_and_user_plus_system_ticks() -> None:
    stat = parse_stat(STAT_LINE)
    assert stat == ProcStat(pid=4242, ppid=4200, comm="gunicorn: w) rk", start=98765, ticks=325)


def test_parse_stat_reads_this_process() -> None:
    stat = parse_stat(Path("/proc/self/stat").read_text())
    assert stat.ticks >= 0
    assert stat.ppid > 0


def test_parse_stat_refuses_a_line_without_a_command_name() -> None:
    with pytest.raises(ValueError, match="stat"):
        parse_stat("garbage")


def stat(pid: int, ticks: int, *, start: int = 100, ppid: int = 1, comm: str = "x") -> ProcStat:
    return ProcStat(pid=pid, ppid=ppid, comm=comm, start=start, ticks=ticks)


def test_ledger_counts_each_process_from_its_first_sample_or_from_its_birth() -> None:
    # Given a phase that starts at tick 1000
    ledger = Ledger(since=1000)
    # When a process alive before it is seen at 50 and then 80 ticks, one born during the phase
    # at 30 ticks, and one that exits after its first two samples
    ledger.observe("worker", stat(1, 50))
    ledger.observe("worker", stat(1, 80))
    ledger.observe("worker", stat(2, 30, start=1200))
    ledger.observe("ingress", stat(3, 10))
    ledger.observe("ingress", stat(3, 14))
    # and pid 3 is reused by a new process born during the phase
    ledger.observe("ingress", stat(3, 5, start=1500))
    # Then each group has what its processes used since the phase started
    assert ledger.seconds() == pytest.approx(
        {"worker": (30 + 30) / CLOCK_TICKS, "ingress": (4 + 5) / CLOCK_TICKS}
    )


def test_a_postgres_backend_is_told_from_the_shared_processes_by_its_title() -> None:
    backend = "postgres: 15/main: postgres broker_bench_ab12 127.0.0.1(50432) idle"
    assert serves_database(backend, "broker_bench_ab12")
    assert not serves_database(backend, "broker_bench_ab")
    assert not is_shared_postgres_process(backend)
    assert not is_shared_postgres_process("postgres: postgres broker [local] idle")
    assert is_shared_postgres_process("postgres: 15/main: walwriter ")


def test_select_postgres_keeps_the_bench_database_and_its_server_and_leaves_the_rest() -> None:
    # Given two clusters: the shared one (postmaster 10) and a test's private one (postmaster 20)
    stats = [
        stat(10, 0, comm="postgres"),
        stat(11, 0, ppid=10, comm="postgres"),
        stat(12, 0, ppid=10, comm="postgres"),
        stat(13, 0, ppid=10, comm="postgres"),
        stat(14, 0, ppid=10, comm="postgres"),
        stat(20, 0, comm="postgres"),
        stat(21, 0, ppid=20, comm="postgres"),
        stat(30, 0, comm="python"),
    ]
    titles = {
        10: "/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main",
        11: "postgres: 15/main: walwriter ",
        12: "postgres: 15/main: postgres broker_bench_x 127.0.0.1(40000) idle",
        13: "postgres: 15/main: postgres broker_test_y 127.0.0.1(40001) idle",
        14: "postgres: 15/main: autovacuum worker broker_bench_x",
        20: "/usr/lib/postgresql/15/bin/postgres -D /tmp/pg/data",
        21: "postgres: walwriter ",
    }
    # Then the bench's backends, its postmaster and that postmaster's helpers are selected
    assert select_postgres(stats, titles, "broker_bench_x") == [10, 11, 12, 14]


def test_select_redis_keeps_the_server_on_the_bench_port() -> None:
    stats = [stat(5, 0, comm="redis-server"), stat(6, 0, comm="redis-server")]
    titles = {5: "redis-server 127.0.0.1:6379", 6: "redis-server 127.0.0.1:16379"}
    assert select_redis(stats, titles, 6379) == [5]


def test_cpu_meter_measures_a_busy_child_and_not_an_idle_one() -> None:
    # Given a child that spins until it has used 0.4 s of CPU, and one that sleeps
    spin = "import time\nwhile time.process_time() < 0.4: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        # When a meter watches both while they run
        meter = CpuMeter({"busy": lambda: [busy.pid], "idle": lambda: [idle.pid]}, interval=0.05)
        meter.start()
        busy.wait(timeout=60)
        idle.wait(timeout=60)
        used = meter.stop()
    finally:
        for process in (busy, idle):
            if process.poll() is None:
                process.kill()
                process.wait()
    # Then the busy one is seen with most of its CPU (the last sample may miss up to one
    # interval's worth), the idle one with its start-up only
    assert used["busy"] > 0.3
    assert used["idle"] < 0.15


def test_cpu_per_request_is_every_group_together_over_the_completed_requests() -> None:
    cpu = Cpu({"ingress": 1.0, "worker": 2.0, "postgres": 1.0}, requests=1000)
    assert cpu.per_request == pytest.approx(0.004)
    assert cpu.group_per_request("worker") == pytest.approx(0.002)
    assert math.isnan(cpu.group_per_request("beat"))
    assert math.isnan(Cpu({"worker": 1.0}, requests=0).per_request)


def test_memory_growth_is_relative_to_the_low_mark() -> None:
    assert Memory(1000, 200, 5000, 230).growth_percent == pytest.approx(15.0)


def test_options_put_the_low_memory_mark_at_a_fifth_capped_at_one_thousand() -> None:
    assert Options(memory_requests=5000).memory_low == 1000
    assert Options(memory_requests=500).memory_low == 100
    assert Options(memory_requests=20000).memory_low == 1000


# Processes -----------------------------------------------------------------------------------


def test_deadline_check_raises_once_expired() -> None:
    Deadline(60).check("waiting")
    with pytest.raises(BrokerError, match="timed out"):
        Deadline(0).check("waiting")


def test_alarm_puts_back_an_earlier_alarm_and_its_handler() -> None:
    # Given an alarm and a handler of someone else's (pytest-timeout's, say)
    def handler(_signum: int, _frame: object) -> None:
        raise AssertionError("the earlier alarm fired")

    old_handler = signal.signal(signal.SIGALRM, handler)
    old_alarm = signal.alarm(1000)
    try:
        # When a benchmark's alarm comes and goes
        with alarm(Deadline(60)):
            assert signal.getsignal(signal.SIGALRM) is not handler
        # Then the earlier handler and alarm are back
        assert signal.getsignal(signal.SIGALRM) is handler
        assert 990 <= signal.alarm(0) <= 1000
    finally:
        signal.signal(signal.SIGALRM, old_handler)
        if old_alarm:
            signal.alarm(old_alarm)


def test_a_stopped_role_takes_its_leader_and_every_member_of_its_group(tmp_path: Path) -> None:
    # Given a leader that ignores SIGTERM and has a child of its own, in its own group
    script = "import signal, subprocess, sys, time\n" + (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    process = Process("stubborn", [sys.executable, "-c", script], {}, tmp_path / "log").start()
    try:
        deadline = time.monotonic() + 10
        while not children_of(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchildren = children_of(process.pid)
        assert grandchildren
        # Then its memory counts the child too
        assert tree_rss_bytes(process.pid) > 0
        # When it is stopped with a short grace
        process.stop(0.5)
        # Then the leader and its child are gone
        assert not process.running
        deadline = time.monotonic() + 5
        while any(Path(f"/proc/{pid}").exists() for pid in grandchildren):
            assert time.monotonic() < deadline, "the grandchild survived"
            time.sleep(0.05)
    finally:
        process.kill()


def test_command_help_names_the_options() -> None:
    result = CliRunner().invoke(bench, ["--help"])
    assert result.exit_code == 0
    for option in ("--embedded", "--requests", "--light", "--memory-requests", "--quick"):
        assert option in result.output


# A tiny real run -----------------------------------------------------------------------------


@pytest.mark.slow
def test_tiny_embedded_run_measures_both_sides(tmp_path: Path) -> None:
    # Given a run of 20 requests on the embedded default, with every phase cut short
    options = Options(
        embedded=True,
        requests=20,
        light=3,
        memory_requests=0,
        ingress_seconds=0.5,
        ingress_limit=20,
        threads=2,
        engine_seconds=0.05,
        timeout=240,
        output=tmp_path / "latest.json",
    )
    # When it runs
    result = run_bench(options)
    # Then both sides ran every request to the end
    assert result.broker.e2e is not None
    assert result.broker.e2e.completed == 20
    assert result.raw.e2e is not None
    assert result.raw.e2e.completed == 20
    assert result.broker.light is not None
    assert result.broker.light.count == 3
    assert result.broker.ingress is not None
    assert result.broker.ingress.accepted > 0
    # And the raw side ran its chains of five, and both sides have their CPU
    assert result.raw.chain is not None
    assert result.raw.chain.completed == 20
    assert result.broker.cpu is not None
    assert result.broker.cpu.total > 0
    assert set(result.broker.cpu.seconds) == {"ingress", "worker", "beat"}
    assert result.raw.cpu is not None
    assert set(result.raw.cpu.seconds) == {"worker"}
    # And the last line carries real numbers
    assert LAST_LINE.match(last_line(result))
    assert "nan" not in last_line(result)
