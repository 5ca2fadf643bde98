"""Chaos: a Python activity that never returns ends as a fault at its time limit, and the worker
keeps taking work.

A real ``celery -A tasks worker`` (prefork pool, two processes, with beat) runs quick requests
around one whose activity blocks in Python code (a ``time.sleep`` far past its limit): inline, in
the workflow's step, under ``BROKER_STEP_TIME_LIMIT``; in task mode, as its own Celery task,
under its declared ``time_limit``. At the limit the request faults, naming the limit, with a
replayable dead letter; the step's watchdog ends the blocked pool process at once (Celery's hard
limit, which sends signals, finds nothing left to kill) and the pool starts another; every other
request completes, round after round, and the activity ran once per stuck request.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.runtime.steps.heartbeat import OVERDUE_EXIT
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, Request
from broker.wiring.runtime import make_publisher
from tests.chaos.stuck_activities import TASK_TIME_LIMIT
from tests.integration.runtime.conftest import backend_urls
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import activity, literal, set_output, workflow, write_workflow

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(300)]

OTHERS = 60
ROUNDS = 2
CEILING = 3.0
#: how long the stuck activity would block: far past its limit and the pool's hard limit
BLOCK_SECONDS = 600
#: what each activity's fault says, and its dead letter's reason
EXPECTED = {
    "Stuck.Inline": (
        f"the workflow step exceeded its time limit of {CEILING:g}s",
        "StepTimeLimitExceeded",
    ),
    "Stuck.Task": (
        f"activity 'Stuck.Task' exceeded its time limit of {TASK_TIME_LIMIT:g}s",
        "Faulted",
    ),
    "Stuck.TaskGil": (
        f"activity 'Stuck.TaskGil' exceeded its time limit of {TASK_TIME_LIMIT:g}s",
        "Faulted",
    ),
}
#: the activities whose call holds the GIL: its watchdog cannot run, Celery's hard limit (the
#: longest task-mode limit plus STEP_KILL_GRACE) kills the process and the worker's main process
#: records the fault
HOLDS_THE_GIL = {"Stuck.TaskGil"}


def stuck_workflow(kind: str, stuck_while: Path, attempts: Path) -> dict[str, object]:
    return workflow(
        "stuck",
        [
            activity(
                "block",
                kind,
                seconds=literal(BLOCK_SECONDS),
                stuckWhile=literal(str(stuck_while)),
                attempts=literal(str(attempts)),
            ),
            set_output("out", "result", "unblocked"),
        ],
        request_type="Stuck",
    )


def all_are(factory: Any, request_ids: list[str], status: str) -> bool:
    return all(request_status(factory, r) == status for r in request_ids)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left for its parent to reap counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def logged(worker: Any, text: str, times: int) -> bool:
    return bool(worker.tail(5000).count(text) == times)


def submit_round(factory: Any, registry: Any, publisher: Any) -> tuple[str, list[str]]:
    """Quick requests submitted around one whose activity blocks."""
    others = [
        submit_request(factory, registry, "Quick", payload={"n": n}, publisher=publisher)
        for n in range(OTHERS // 2)
    ]
    stuck = submit_request(factory, registry, "Stuck", publisher=publisher)
    others += [
        submit_request(factory, registry, "Quick", payload={"n": n}, publisher=publisher)
        for n in range(OTHERS // 2, OTHERS)
    ]
    return stuck, others


@pytest.mark.parametrize(
    ("kind", "backend"),
    [
        ("Stuck.Inline", "embedded"),
        ("Stuck.Inline", "production"),
        ("Stuck.Task", "embedded"),
        ("Stuck.Task", "production"),
        ("Stuck.TaskGil", "embedded"),
    ],
)
def test_an_activity_blocked_past_its_time_limit_faults_and_the_worker_keeps_taking_work(
    kind: str, backend: str, tmp_path: Path
) -> None:
    dispose_engines()
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    stuck_while, attempts = tmp_path / "stuck", tmp_path / "attempts"
    stuck_while.touch()
    attempts.touch()
    folder = tmp_path / "wf"
    write_workflow(folder, stuck_workflow(kind, stuck_while, attempts))
    write_workflow(
        folder, workflow("quick", [set_output("out", "result", "ok")], request_type="Quick")
    )
    message, reason = EXPECTED[kind]
    for urls in backend_urls(backend, var_dir):
        env = runtime_env(
            var_dir,
            workflows=folder,
            BROKER_TASK_MODULES="tasks,tests.chaos.stuck_activities",
            BROKER_STEP_TIME_LIMIT=str(CEILING),
            BROKER_ACTIVITY_TIME_LIMIT=str(TASK_TIME_LIMIT),
            # a call holding the GIL beats no lease: the hard limit (the longest task-mode limit,
            # the example's 30 s, plus the grace) must come before the lease runs out
            BROKER_OUTBOX_LEASE="60",
            **urls,
        )
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        registry.stop()
        publisher = make_publisher(settings, factory)
        worker = worker_process(env, tmp_path / "worker.log", concurrency=2).start()
        try:
            rounds = 1 if kind in HOLDS_THE_GIL else ROUNDS  # (a round waits for the hard limit)
            for round_ in range(1, rounds + 1):
                # Given quick requests submitted around one whose activity blocks
                started = time.monotonic()
                stuck, others = submit_round(factory, registry, publisher)
                # When the worker runs them: the stuck request faults at the limit
                wait_until(
                    functools.partial(all_are, factory, [stuck], "Faulted"),
                    timeout=90,
                    interval=0.25,
                    what="the stuck request to fault",
                )
                faulted_after = time.monotonic() - started
                # And every other request completes
                wait_until(
                    functools.partial(all_are, factory, others, "Completed"),
                    timeout=90,
                    interval=0.5,
                    what=f"every other request of round {round_} to complete",
                )
                # Then the fault names the limit, with a replayable dead letter naming the activity
                with transaction(factory, write=False) as session:
                    request = session.get(Request, stuck)
                    assert request is not None
                    assert request.error_detail is not None
                    assert message in request.error_detail, request.error_detail
                    (letter,) = session.scalars(
                        select(DeadLetter).where(DeadLetter.request_id == stuck)
                    )
                    assert (letter.reason, letter.activity_id) == (reason, "block")
                    assert letter.replayable
                print(f"\n{kind} on {backend}, round {round_}: faulted after {faulted_after:.1f}s")
            # And the activity ran once per stuck request (no redelivery ran it again)
            runs = [line.split() for line in attempts.read_text().splitlines()]
            assert len(runs) == rounds, runs
            assert worker.proc is not None
            assert worker.proc.poll() is None, worker.tail()
            log = worker.tail(5000)
            assert "Unrecoverable error" not in log
            if kind in HOLDS_THE_GIL:
                # And Celery's hard limit killed each blocked pool process
                assert log.count("Hard time limit") == rounds, log
                return
            # And each blocked pool process was ended by its watchdog, not by Celery's hard
            # limit, with the child process the call had started
            exited = f"exited with 'exitcode {OVERDUE_EXIT}'"
            wait_until(
                functools.partial(logged, worker, exited, ROUNDS),
                timeout=30,
                what="the pool to report each ended process",
            )
            log = worker.tail(5000)
            assert log.count("ran past its time limit: its pool process exits") == ROUNDS, log
            assert "exited with 'signal" not in log  # (Celery's hard limit: SIGTERM, SIGKILL)
            assert "Hard time limit" not in log
            for _, child in runs:
                assert not alive(int(child)), f"the call's child process {child} outlived it"
        except AssertionError:
            print(worker.tail(150))
            raise
        finally:
            worker.stop()
            dispose_engines()
