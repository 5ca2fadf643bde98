"""``make soak``: the production roles under load and faults for ``SOAK_MINUTES``, then the
checks, the report (``var/soak/soak.json``), the chart (``var/soak/soak.png``) and the last line.

Exit status 0 only when nothing was lost, duplicated or stuck and the growth figures kept their
limits (``report.Verdict``). ``docs/soak.md`` explains the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.soak import chart, report
from tests.soak.faults import Faults
from tests.soak.load import Accepted, Client, Load
from tests.soak.receiver import Receiver
from tests.soak.sampler import Sampler
from tests.soak.stack import CLIENT, Stack
from tests.soak.workloads import ALL_KINDS, CANCELLED_EFFECT, POISON_KINDS, POISON_TASKS, documents

logger = logging.getLogger("tests.soak")

ROLES = ["public", "internal", "beat", "worker1", "worker2"]
#: tables the purges keep bounded, and the request history the broker keeps by design
BOUNDED_TABLES = ["outbox", "bookmark_queue", "bookmarks", "timers", "dead_letters",
                  "webhook_deliveries", "webhook_attempts"]  # fmt: skip
HISTORY_TABLES = ["requests", "request_events", "workflow_instances", "activity_executions",
                  "step_results"]  # fmt: skip
TERMINAL = ("Completed", "Faulted", "Cancelled")
TERMINAL_EVENTS = ("RequestCompleted", "RequestFaulted", "RequestCancelled")
#: after the load stops: how long every accepted request has to finish, and its webhook to arrive
DRAIN_SECONDS = 240.0

#: the soak's settings: short purge TTLs (purging runs many times), timeouts short enough that
#: a cut-off worker's work is taken over within the partition
SOAK_ENV = {
    "BROKER_PURGE_INTERVAL": "20",
    "BROKER_ORPHANED_OUTBOX_RETENTION": "60",
    "BROKER_RESULT_RETENTION": "60",
    "BROKER_DEAD_LETTER_TTL": "60",
    "BROKER_BOOKMARK_QUEUE_TTL": "300",
    "BROKER_LOCK_TTL": "10",
    "BROKER_TASK_VISIBILITY_TIMEOUT": "20",
    "BROKER_OUTBOX_LEASE": "20",
    "BROKER_HEARTBEAT_INTERVAL": "3",
    "BROKER_INACTIVITY_THRESHOLD": "30",
    "BROKER_RECOVERY_INTERVAL": "5",
    "BROKER_DRAIN_TIMEOUT": "5",
    "BROKER_HTTP_TIMEOUT": "10",
    "BROKER_WEBHOOK_RETRY_INITIAL_DELAY": "2",
    "BROKER_WEBHOOK_HORIZON": "600",
    "BROKER_LOG_LEVEL": "INFO",
    "BROKER_TASK_MODULES": f"tasks,{POISON_TASKS}",
}
#: what a poison request's errorDetail begins with (``broker.runtime.steps.poison``)
POISON_ERROR = "the worker died "


def window_length(minutes: float) -> float:
    """Five-minute windows; one-minute windows for runs shorter than 25 minutes."""
    return 300.0 if minutes >= 25 else 60.0


def warmup(minutes: float) -> float:
    """Seconds before the first compared window: one window, and at least the two minutes the
    purges need to reach their steady state (retentions of 60 s, a purge every 20 s)."""
    return max(window_length(minutes), 120.0)


def fault_spacing(duration: float, kinds: int) -> float:
    """Seconds between two faults: every kind at least once, at most every 150 s, at least 25 s."""
    return max(25.0, min(150.0, (duration - 90.0) / kinds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    # the Makefile's knobs (not broker settings: the soak's own)
    minutes = os.environ.get("SOAK_MINUTES") or "30"  # noqa: TID251
    rate = os.environ.get("SOAK_RATE") or "2"  # noqa: TID251
    parser.add_argument("--minutes", type=float, default=float(minutes))
    parser.add_argument("--rate", type=float, default=float(rate))
    parser.add_argument("--out", type=Path, default=Path("var/soak"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("urllib3", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return run(args.minutes, args.rate, args.out)


def run(minutes: float, rate: float, out: Path) -> int:
    duration = minutes * 60
    stack = Stack({**SOAK_ENV})
    receiver: Receiver | None = None
    try:
        stack.start_servers()
        receiver = Receiver(stack.address).__enter__()
        # Poison tasks die while this file exists (the whole run): tests/chaos/poison_tasks.py
        armed = stack.root / "poison-armed"
        armed.touch()
        poison = {"switch": str(armed), "attempts": str(stack.root / "poison-attempts")}
        stack.configure(
            documents(receiver.base, poison),
            [k.request_type for k in ALL_KINDS],
            receiver.base + "/hook",
        )
        for role in ROLES:
            stack.start(role)
        stack.wait_ready()
        logger.info("soak: %g minutes at %g requests/s; logs in %s", minutes, rate, stack.logs)
        started = time.monotonic()
        started_wall = time.time()
        client = Client(stack.pki(), CLIENT, stack.public_port)
        load = Load(client, rate, started)
        sampler = Sampler(stack, ROLES, started)
        faults = Faults(stack, started)
        load.start()
        sampler.start()
        faults.run_on_schedule(
            first=min(60.0, duration / 6),
            every=fault_spacing(duration, len(faults.catalog())),
            until=duration - 60.0,
        )
        while time.monotonic() - started < duration:
            time.sleep(5)
            for role in ROLES:  # a role that died on its own (not a fault) is a finding
                process = stack.children.get(role)
                if process is not None and not process.running and not faults.busy.is_set():
                    code = process.proc.returncode if process.proc is not None else None
                    logger.warning("%s exited on its own (code %s)", role, code)
        faults.stop()
        load.stop()
        logger.info("load stopped; %d accepted, %d refused", len(load.accepted), load.refused)
        accepted = load.snapshot()
        drained = drain(stack, receiver, accepted)
        sampler.stop()
        return finish(
            out, minutes, duration, started_wall, stack, receiver, load, accepted, sampler, faults,
            drained,
        )  # fmt: skip
    finally:
        if receiver is not None:
            receiver.__exit__(None, None, None)
        stack.close(keep=out / "logs")


def engine_of(stack: Stack) -> sa.Engine:
    assert stack.postgres is not None
    return sa.create_engine(stack.postgres.url.replace(stack.postgres.address, "127.0.0.1"))


def statuses(engine: sa.Engine, ids: list[str]) -> dict[str, tuple[str, Any, Any, Any]]:
    found: dict[str, tuple[str, Any, Any, Any]] = {}
    with engine.connect() as conn:
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows = conn.execute(
                sa.text(
                    "SELECT id, status, submitted_at, completed_at, updated_at FROM requests "
                    "WHERE id = ANY(:ids)"
                ),
                {"ids": chunk},
            )
            for rid, status, submitted, completed, updated in rows:
                found[rid] = (status, submitted, completed, updated)
    return found


def drain(stack: Stack, receiver: Receiver, accepted: list[Accepted]) -> float:
    """Wait until every accepted request is terminal and its webhook arrived; seconds taken."""
    engine = engine_of(stack)
    began = time.monotonic()
    ids = [a.request_id for a in accepted]
    try:
        while time.monotonic() - began < DRAIN_SECONDS:
            try:
                found = statuses(engine, ids)
            except sa.exc.OperationalError:
                time.sleep(2)
                continue
            open_ = [i for i in ids if found.get(i, ("",))[0] not in TERMINAL]
            hooked = {h.get("data", {}).get("correlationId") for h in receiver.webhooks()}
            unhooked = [i for i in ids if found.get(i, ("",))[0] in TERMINAL and i not in hooked]
            if not open_ and not unhooked:
                break
            logger.info("draining: %d open, %d webhooks missing", len(open_), len(unhooked))
            time.sleep(5)
    finally:
        engine.dispose()
    return time.monotonic() - began


def check(
    stack: Stack, receiver: Receiver, accepted: list[Accepted], started_wall: float
) -> dict[str, Any]:
    """Lost, duplicates, stuck (and what each consists of), and the finished requests' times."""
    from broker.runtime import ids as broker_ids

    engine = engine_of(stack)
    try:
        found = statuses(engine, [a.request_id for a in accepted])
        with engine.connect() as conn:
            died = {
                rid
                for (rid,) in conn.execute(
                    sa.text("SELECT id FROM requests WHERE error_detail LIKE :died"),
                    {"died": POISON_ERROR + "%"},
                )
            }
        with engine.connect() as conn:
            terminal_events = Counter(
                rid
                for (rid,) in conn.execute(
                    sa.text("SELECT request_id FROM request_events WHERE event_type = ANY(:types)"),
                    {"types": list(TERMINAL_EVENTS)},
                )
            )
    finally:
        engine.dispose()
    keys = receiver.effect_keys()
    hooks: dict[tuple[str, str], set[str]] = defaultdict(set)
    for hook_id, body in list(receiver.hooks.items()):
        data = body.get("data", {}) if isinstance(body, dict) else {}
        hooks[(str(data.get("correlationId")), str(body.get("type")))].add(hook_id)
    hooked = {rid for rid, _ in hooks}
    repeated_hooks: Counter[str] = Counter()
    for (rid, _), hook_ids in hooks.items():
        repeated_hooks[rid] += len(hook_ids) - 1
    lost: Counter[str] = Counter()
    duplicates: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    stuck = 0
    finished: list[report.Finished] = []
    poison_latencies: list[float] = []
    parents_completed = 0
    for item in accepted:
        row = found.get(item.request_id)
        if row is None:
            lost["no request record"] += 1
            continue
        status, submitted, completed, updated = row
        outcomes[f"{item.kind.request_type}:{status}"] += 1
        if status not in TERMINAL:
            stuck += 1
            continue
        end = completed or updated
        latency = (end - submitted).total_seconds()
        if item.kind in POISON_KINDS:
            # Poison ends by design after BROKER_MAX_WORKER_DEATHS leases (each death is found
            # when its lease runs out): its time is reported apart, not in the latency windows.
            poison_latencies.append(latency)
        else:
            finished.append(
                report.Finished(
                    at=end.replace(tzinfo=dt.UTC).timestamp() - started_wall, latency=latency
                )
            )
        if terminal_events[item.request_id] > 1:
            duplicates["terminal event repeated"] += terminal_events[item.request_id] - 1
        if item.request_id not in hooked:
            lost["webhook never arrived"] += 1
        if repeated_hooks[item.request_id]:
            duplicates["webhook event sent under two ids"] += repeated_hooks[item.request_id]
        instance = broker_ids.instance_id_for_request(item.request_id)
        effects = [k for k in keys.get(instance, set())]
        if item.kind.request_type == "SoakParent" and status == "Completed":
            parents_completed += 1
        if item.kind.effect and item.kind.effect != "/effect/child":
            paths = Counter(k.split(" ")[0] for k in effects)
            if status == "Completed" and not paths.get(item.kind.effect):
                lost["completed without its effect"] += 1
            if paths.get(item.kind.effect, 0) > 1:
                duplicates["effect under two keys"] += paths[item.kind.effect] - 1
        if any(k.startswith(CANCELLED_EFFECT + " ") for k in effects):
            duplicates["cancelled request's effect happened"] += 1
    child_effects = len(receiver.effects.get("/effect/child", {}))
    if child_effects > parents_completed:
        duplicates["child effects beyond completed parents"] += child_effects - parents_completed
    elif child_effects < parents_completed:
        lost["completed parents without a child effect"] += parents_completed - child_effects
    poison_types = {k.request_type for k in POISON_KINDS}
    poisoned = [a.request_id for a in accepted if a.kind.request_type in poison_types]
    poison = {
        "submitted": len(poisoned),
        "dead_lettered": sum(1 for rid in poisoned if rid in died),
        # requests that were no poison but were dead-lettered as such (the faults' kills are
        # counted as deaths too: three on one piece of work would be a false verdict)
        "false": sum(1 for a in accepted if a.request_id in died and a.request_id not in poisoned),
        "p50_seconds": round(report.percentile(poison_latencies, 50), 2) if poison_latencies else 0,
        "max_seconds": round(max(poison_latencies, default=0.0), 2),
    }
    return {
        "lost": lost,
        "duplicates": duplicates,
        "stuck": stuck,
        "outcomes": outcomes,
        "finished": finished,
        "poison": poison,
    }


def finish(
    out: Path,
    minutes: float,
    duration: float,
    started_wall: float,
    stack: Stack,
    receiver: Receiver,
    load: Load,
    accepted: list[Accepted],
    sampler: Sampler,
    faults: Faults,
    drained: float,
) -> int:
    checked = check(stack, receiver, accepted, started_wall)
    finished: list[report.Finished] = checked["finished"]
    unexpected = sum(
        n
        for key, n in checked["outcomes"].items()
        if key.split(":")[1] in TERMINAL
        and key.split(":")[1]
        != next(k.expected for k in ALL_KINDS if k.request_type == key.split(":")[0])
    )
    samples = [s for s in sampler.samples if s.at < duration]
    folded = report.windows(
        length=window_length(minutes),
        duration=duration,
        samples=samples,
        accepted_at=[a.at for a in accepted],
        finished=finished,
        faults=faults.log,
    )
    verdict = report.verdict(
        minutes=minutes,
        lost=sum(checked["lost"].values()),
        duplicates=sum(checked["duplicates"].values()),
        stuck=checked["stuck"],
        folded=folded,
        bounded_tables=BOUNDED_TABLES,
        warmup=warmup(minutes),
    )
    problems = verdict.problems()
    if unexpected:
        problems.append(f"unexpected outcomes={unexpected}")
    if faults.errors:
        problems.append(f"faults failed: {faults.errors}")
    poison = checked["poison"]
    if poison["dead_lettered"] != poison["submitted"] or poison["false"]:
        problems.append(f"poison: {poison}")
    logger.info(
        "poison: %d submitted, %d dead-lettered as the worker dying, %d others dead-lettered so; "
        "submit to Faulted p50=%ss max=%ss (not in the latency windows)",
        poison["submitted"], poison["dead_lettered"], poison["false"],
        poison["p50_seconds"], poison["max_seconds"],
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "version": 1,
        "minutes": minutes,
        "rate": load.rate,
        "started": dt.datetime.fromtimestamp(started_wall, dt.UTC).isoformat(),
        "window_seconds": window_length(minutes),
        "warmup_seconds": warmup(minutes),
        "accepted": len(accepted),
        "refused": load.refused,
        "follow_ups_failed": load.follow_ups_failed,
        "finished": len(finished),
        "drain_seconds": round(drained, 1),
        "lost": checked["lost"],
        "duplicates": checked["duplicates"],
        "stuck": checked["stuck"],
        "outcomes": checked["outcomes"],
        "poison": checked["poison"],
        "partition": "on" if stack.network is not None else f"skipped: {stack.partition_reason}",
        "faults": [{"at": round(at, 1), "fault": name} for at, name in faults.log],
        "fault_errors": faults.errors,
        "bounded_tables": BOUNDED_TABLES,
        "history_tables": HISTORY_TABLES,
        "windows": [
            {
                **report.as_json(w),
                "rss_total": w.rss_total,
                "bounded_rows": w.rows_total(BOUNDED_TABLES),
                "history_rows": w.rows_total(HISTORY_TABLES),
            }
            for w in folded
        ],
        "verdict": report.as_json(verdict),
        "problems": problems,
        "last_line": verdict.line(),
        "samples": [report.as_json(s) for s in sampler.samples],
    }
    (out / "soak.json").write_text(json.dumps(document, indent=1, default=str))
    chart.draw(
        out / "soak.png",
        title=f"soak: {minutes:g} min at {load.rate:g} req/s, {len(faults.log)} faults",
        samples=samples,
        accepted_at=[a.at for a in accepted],
        finished=finished,
        faults=faults.log,
        bounded_tables=BOUNDED_TABLES,
        history_tables=HISTORY_TABLES,
        duration=duration,
    )
    for window in folded:
        logger.info(
            "window %4.0f-%4.0fs: accepted=%d completed=%d p50=%.2fs p99=%.2fs rss=%.0fMiB "
            "bounded_rows=%.0f history_rows=%.0f db_conn=%.0f redis_conn=%.0f redis_mem=%.1fMiB "
            "outbox=%.1f bq=%.1f faults=%s",
            window.start, window.end, window.accepted, window.completed, window.p50, window.p99,
            window.rss_total / 2**20, window.rows_total(BOUNDED_TABLES),
            window.rows_total(HISTORY_TABLES), window.db_connections, window.redis_connections,
            window.redis_memory / 2**20, window.outbox_depth, window.bookmark_queue_depth,
            window.faults,
        )  # fmt: skip
    if problems:
        logger.error("soak problems: %s", "; ".join(problems))
    print(verdict.line(), flush=True)
    return 1 if problems or math.isnan(verdict.rss_growth_pct) else 0


if __name__ == "__main__":
    sys.exit(main())
