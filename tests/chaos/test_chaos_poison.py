"""Chaos: work that kills the process running it is dead-lettered, and the rest keeps moving.

A real ``celery -A tasks worker`` (prefork pool, with beat) runs 200 quick requests and, among
them, one whose RunTask calls a task (``tests/chaos/poison_tasks.py``) that kills its pool
process: a segfault, the kernel's OOM killer (a memory cgroup), a ``MemoryError`` under an
address-space limit, ``os._exit``. Each death is counted on the task's outbox row; after
``BROKER_MAX_WORKER_DEATHS`` (the default, 3) the work is dead-lettered and its request Faulted,
while the worker's main process survives, the pool replaces each dead process and all 200 other
requests complete. Replaying the dead letter (its cause fixed) runs the task once more.

On Redis a dead pool process's message comes back at once (``task_reject_on_worker_lost``); on
the filesystem transport it is gone and the relay publishes the row again after its lease: the
count works on both paths.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from broker.names import RUN_TASK
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, OutboxRow, Request
from broker.wiring.runtime import make_publisher
from tests.chaos import memory_cap
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.services import ON_CI, require_service
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import activity, literal, obj, set_output, workflow, write_workflow

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(300)]

OTHERS = 200
DEATHS = 3  # BROKER_MAX_WORKER_DEATHS's default, which the worker keeps
#: the cap of the OOM test's cgroup: far above a task's needs, far below what the task takes
CGROUP_LIMIT = 96 * 2**20


def poison_workflow(task: str, payload: dict[str, Any]) -> dict[str, Any]:
    return workflow(
        "poison",
        [
            activity("poison", "Elsa.RunTask", taskName=literal(task), payload=obj(payload)),
            set_output("out", "result", "survived"),
        ],
        request_type="Poison",
    )


@contextlib.contextmanager
def cgroup_for(kind: str) -> Iterator[str]:
    if kind != "oom":
        yield ""
        return
    reason = memory_cap.unavailable()
    if reason:
        if ON_CI:
            pytest.fail(f"{reason} (CI=true: the OOM test must run)")
        pytest.skip(reason)
    with memory_cap.memory_cgroup(CGROUP_LIMIT) as path:
        yield str(path)


def count(factory: Any, status: str, request_type: str) -> int:
    with transaction(factory, write=False) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Request)
                .where(Request.status == status, Request.request_type == request_type)
            )
            or 0
        )


@pytest.mark.parametrize(
    ("kind", "backend"),
    [
        ("segfault", "production"),
        ("segfault", "embedded"),
        ("oom", "production"),
        ("memory_error", "embedded"),
        ("exit", "production"),
    ],
)
def test_work_that_kills_its_worker_is_dead_lettered_while_every_other_request_completes(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dispose_engines()
    var_dir = tmp_path / "var"
    urls: dict[str, str] = {"database_url": f"sqlite:///{var_dir / 'broker.db'}"}
    if backend == "production":
        require_service("Redis", "127.0.0.1", 6379)
        redis_url = request.getfixturevalue("redis_url")
        urls = {
            "database_url": request.getfixturevalue("postgres_url"),
            "queue_url": redis_url,
            "lock_url": redis_url,
        }
    switch, attempts = tmp_path / "armed", tmp_path / "attempts"
    switch.touch()
    attempts.touch()
    with cgroup_for(kind) as cgroup:
        folder = tmp_path / "wf"
        payload = {"switch": str(switch), "attempts": str(attempts), "cgroup": cgroup}
        write_workflow(folder, poison_workflow(f"poison.{kind}", payload))
        write_workflow(
            folder, workflow("quick", [set_output("out", "result", "ok")], request_type="Quick")
        )
        env = runtime_env(
            var_dir,
            workflows=folder,
            BROKER_TASK_MODULES="tasks,tests.chaos.poison_tasks",
            BROKER_OUTBOX_LEASE="3",
            BROKER_TASK_VISIBILITY_TIMEOUT="30",
            **urls,
        )
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        registry.stop()
        publisher = make_publisher(settings, factory)
        worker = worker_process(env, tmp_path / "worker.log", concurrency=2).start()
        try:
            # Given 200 requests submitted around one whose task kills its worker process
            others = [
                submit_request(factory, registry, "Quick", payload={"n": n}, publisher=publisher)
                for n in range(OTHERS // 2)
            ]
            started = time.monotonic()
            poisoned = submit_request(factory, registry, "Poison", publisher=publisher)
            others += [
                submit_request(factory, registry, "Quick", payload={"n": n}, publisher=publisher)
                for n in range(OTHERS // 2, OTHERS)
            ]
            # When the worker runs them all
            wait_until(
                lambda: request_status(factory, poisoned) == "Faulted",
                timeout=150,
                interval=0.5,
                what="the poison request to be dead-lettered",
            )
            faulted_after = time.monotonic() - started
            wait_until(
                lambda: count(factory, "Completed", "Quick") == OTHERS,
                timeout=120,
                interval=0.5,
                what="every other request to complete",
            )
            # Then the work ran exactly three times, each time in a new pool process
            runs = attempts.read_text().split()
            assert len(runs) == DEATHS, runs
            assert len(set(runs)) == DEATHS, runs
            # And its request is Faulted with a replayable dead letter naming the deaths, the
            # activity and the task
            with transaction(factory, write=False) as session:
                (letter,) = session.scalars(
                    select(DeadLetter).where(DeadLetter.request_id == poisoned)
                )
                session.expunge(letter)
                task_row = session.scalars(
                    select(OutboxRow).where(OutboxRow.task_name == RUN_TASK)
                ).one()
                deaths, row_state = task_row.deaths, task_row.state
            assert (letter.kind, letter.reason, letter.activity_id) == (
                "request",
                "WorkerDied",
                "poison",
            )
            assert letter.error == (
                f"the worker died {DEATHS} times running it "
                f"(activity 'poison', task 'poison.{kind}')"
            )
            assert (deaths, row_state) == (DEATHS, "dead")
            assert letter.replayable
            # And every other request completed, and the worker's main process lived throughout
            assert count(factory, "Completed", "Quick") == OTHERS
            assert worker.proc is not None
            assert worker.proc.poll() is None, worker.tail()
            log = worker.tail(5000)
            assert "Unrecoverable error" not in log
            # (the deaths as the broker counted them, once: the pool's own line about each dead
            # process is not printed every time, so the product's record is what is checked)
            assert log.count(f"dead-lettered: {letter.error}") == 1, log
            # When the cause is fixed and an operator replays the dead letter
            switch.unlink()
            with transaction(factory) as session:
                replayed = dead_letter_admin.replay(session, letter.id, source="test")
            publisher.publish(list(replayed.outbox_ids))
            # Then the work runs once more, and the request completes
            wait_until(
                lambda: request_status(factory, poisoned) == "Completed",
                timeout=60,
                interval=0.5,
                what="the replayed request to complete",
            )
            assert len(attempts.read_text().split()) == DEATHS + 1
            assert worker.proc.poll() is None
            print(
                f"\npoison {kind} on {backend}: dead-lettered {faulted_after:.1f}s after its "
                f"submission, after {deaths} deaths; {OTHERS} other requests completed; "
                "replay ran it once more and completed it"
            )
        except AssertionError:
            print(worker.tail(120))
            raise
        finally:
            worker.stop()
            dispose_engines()
