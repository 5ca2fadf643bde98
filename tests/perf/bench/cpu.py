"""CPU time of the stack's processes during a measured phase, read from ``/proc`` (Linux).

A process's CPU time is ``utime + stime`` of ``/proc/<pid>/stat``. ``CpuMeter`` samples the
processes of a few named groups (the ingress's gunicorn trees, the worker's tree with its pool
children, beat, PostgreSQL, Redis) when a phase starts, twice a second during it and when it
ends, keeping the last figure seen per process: a process that exits mid-phase (a recycled pool
child, a closed database connection) keeps what it had used at its last sample, and one that
starts mid-phase counts from zero. A process is known by its pid *and* its start time, so a
reused pid is a new process.

PostgreSQL is the server's processes that serve the bench: the backends connected to the bench's
database, the postmaster and its shared processes (WAL writer, checkpointer, background writer,
autovacuum launcher). The shared ones also work for every other client of the server, so the
figure is exact only when the bench is the server's only client. Redis is the whole server on the
bench's port, with the same caveat.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

#: clock ticks per second, the unit of utime, stime and starttime
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: what the output says about how the PostgreSQL and Redis figures were taken
SHARED_NOTE = (
    "PostgreSQL: the backends of the bench's database plus the server's shared processes "
    "(postmaster, WAL writer, checkpointer, ...); Redis: the whole server. The shared processes "
    "also serve any other client, so these two are exact only on an otherwise idle machine."
)

#: a group's members at one moment: the pids to read
Selector = Callable[[], Iterable[int]]


@dataclasses.dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the meter needs."""

    pid: int
    ppid: int
    comm: str
    #: when the process started, in clock ticks since boot (with ``pid``, its identity)
    start: int
    #: ``utime + stime``: CPU time used so far, in clock ticks
    ticks: int


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line (the command name may hold spaces and parentheses)."""
    head, sep, rest = text.rpartition(")")
    if not sep:
        raise ValueError(f"not a /proc stat line: {text[:80]!r}")
    pid, _, comm = head.partition(" (")
    fields = rest.split()
    # fields[0] is proc(5)'s field 3 (state): ppid is 4, utime 14, stime 15, starttime 22
    return ProcStat(
        pid=int(pid),
        ppid=int(fields[1]),
        comm=comm,
        start=int(fields[19]),
        ticks=int(fields[11]) + int(fields[12]),
    )


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat, None when it is gone."""
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def read_cmdline(pid: int) -> str:
    """The process's command line (its title, for PostgreSQL), '' when gone or unreadable."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def all_stats() -> list[ProcStat]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := read_stat(int(entry.name))) is not None:
            found.append(stat)
    return found


def ticks_since_boot() -> int:
    """Now, in the clock ticks of ``starttime``."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return int(uptime * CLOCK_TICKS)


# Which processes ---------------------------------------------------------------------------------


def serves_database(title: str, database: str) -> bool:
    """A PostgreSQL backend's title names its user and database:
    ``postgres: 15/main: postgres broker_bench_x 127.0.0.1(5432) idle``."""
    return f" {database} " in f" {title} "


def is_shared_postgres_process(title: str) -> bool:
    """The postmaster's helpers (``postgres: 15/main: walwriter``), not a client's backend: a
    backend's title carries its client's address, ``host(port)`` or ``[local]``."""
    return "(" not in title and "[local]" not in title


def select_postgres(
    stats: Iterable[ProcStat], titles: Mapping[int, str], database: str
) -> list[int]:
    """The postmaster serving ``database``, its shared processes and that database's backends,
    among ``stats`` (``titles``: the postgres processes' command lines).

    Other clusters on the machine (a test's private one) and other databases' backends are left
    out; the postmaster is found as the parent of a backend of ``database``.
    """
    postgres = [s for s in stats if s.comm == "postgres"]
    ours = [s for s in postgres if serves_database(titles.get(s.pid, ""), database)]
    masters = {s.ppid for s in ours} & {s.pid for s in postgres}
    found = {s.pid for s in ours} | masters
    found.update(
        s.pid
        for s in postgres
        if s.ppid in masters and is_shared_postgres_process(titles.get(s.pid, ""))
    )
    return sorted(found)


def select_redis(stats: Iterable[ProcStat], titles: Mapping[int, str], port: int) -> list[int]:
    """The ``redis-server`` listening on ``port`` (its title: ``redis-server 127.0.0.1:6379``)."""
    return sorted(
        s.pid
        for s in stats
        if s.comm.startswith("redis-server") and titles.get(s.pid, "").endswith(f":{port}")
    )


def postgres_pids(database: str) -> list[int]:
    stats = all_stats()
    titles = {s.pid: read_cmdline(s.pid) for s in stats if s.comm == "postgres"}
    return select_postgres(stats, titles, database)


def redis_pids(port: int) -> list[int]:
    stats = all_stats()
    titles = {s.pid: read_cmdline(s.pid) for s in stats if s.comm.startswith("redis-server")}
    return select_redis(stats, titles, port)


# Accumulating ------------------------------------------------------------------------------------


class Ledger:
    """CPU ticks per group since a moment, from samples of the groups' processes (pure)."""

    def __init__(self, since: int) -> None:
        #: the moment, in clock ticks since boot: a process started after it counts from zero
        self.since = since
        self._first: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], int] = {}
        self._group: dict[tuple[int, int], str] = {}

    def observe(self, group: str, stat: ProcStat) -> None:
        key = (stat.pid, stat.start)
        if key not in self._first:
            self._first[key] = 0 if stat.start >= self.since else stat.ticks
            self._group[key] = group
        self._last[key] = max(self._last.get(key, 0), stat.ticks)

    def seconds(self) -> dict[str, float]:
        """CPU seconds used per group between ``since`` and the last sample."""
        used: dict[str, float] = {}
        for key, group in self._group.items():
            used[group] = used.get(group, 0.0) + (self._last[key] - self._first[key]) / CLOCK_TICKS
        return used


class CpuMeter:
    """Samples the groups' processes from ``start`` to ``stop`` on a thread; see the module."""

    def __init__(self, groups: Mapping[str, Selector], interval: float = 0.5) -> None:
        self.groups = dict(groups)
        self.interval = interval
        self.ledger = Ledger(0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)

    def start(self) -> CpuMeter:
        self.ledger = Ledger(ticks_since_boot())
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """Stop sampling; CPU seconds per group over the phase."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
        return {name: self.ledger.seconds().get(name, 0.0) for name in self.groups}

    def sample(self) -> None:
        for name, select in self.groups.items():
            try:
                pids = list(select())
            except OSError:
                logger.warning("could not list the processes of %s", name, exc_info=True)
                continue
            for pid in pids:
                if (stat := read_stat(pid)) is not None:
                    self.ledger.observe(name, stat)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
