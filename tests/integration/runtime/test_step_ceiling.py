"""The step ceiling (``BROKER_STEP_TIME_LIMIT``): a step that runs too long ends as a fault.

In process, on SQLite and PostgreSQL: the step's watchdog records the fault at the limit while the
step is still running, and the step's late result is dropped. With a real ``celery -A tasks
worker``: scripts stuck in the JavaScript engine fault within the ceiling, the watchdog ends the
stuck pool process, and the same worker completes the next request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.activities import activity as python_activity
from broker.adapters.locks import FileLockProvider
from broker.names import RUN_ACTIVITY, RUN_CHILD, RUN_REQUEST, STEP_KILL_GRACE
from broker.runtime import ids
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.steps import activities, runner
from broker.runtime.steps.ceiling import FAULT_CODE
from broker.runtime.steps.heartbeat import OVERDUE_EXIT
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import (
    ActivityExecution,
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    Request,
    WorkflowInstance,
)
from broker.wiring.runtime import Runtime, make_publisher
from tests.integration.runtime.conftest import backend_urls
from tests.support.doubles import RecordingSender
from tests.support.runtime import event_types, prepare, request_status, runtime_env, submit_request
from tests.support.stack.roster import running_worker
from tests.support.waits import wait_until
from tests.support.workflows import activity, literal, set_output, workflow, write_workflow

REDOS = "/^(a+)+$/.test('a'.repeat(40) + 'b')"
ESCAPE = "}); while(true){} (function(){"
LOOP = "while (true) {}"


def script_workflow(definition_id: str, request_type: str, script: str) -> dict[str, object]:
    return workflow(
        definition_id,
        [
            activity("js", "Elsa.RunJavaScript", script=literal(script)),
            set_output("out", "result", "unreachable"),
        ],
        request_type=request_type,
    )


@python_activity("Ceiling.Slow", category="Test", run="task", time_limit=0.5)
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "late"


def write_workflows(folder: Path) -> None:
    write_workflow(
        folder,
        workflow(
            "slow-call",
            [activity("slow", "Ceiling.Slow", seconds=literal(1.5))],
            request_type="SlowCall",
        ),
    )
    write_workflow(folder, script_workflow("redos", "Redos", REDOS))
    write_workflow(folder, script_workflow("escape", "Escape", ESCAPE))
    write_workflow(folder, script_workflow("loop", "Loop", LOOP))
    write_workflow(
        folder, workflow("quick", [set_output("out", "result", "ok")], request_type="Quick")
    )
    write_workflow(
        folder,
        workflow("stuck-child", [activity("js", "Elsa.RunJavaScript", script=literal(LOOP))]),
    )
    write_workflow(
        folder,
        workflow(
            "waiting-parent",
            [
                activity(
                    "dispatch",
                    "Elsa.DispatchWorkflow",
                    workflowDefinitionId=literal("stuck-child"),
                    waitForCompletion=literal(True),
                ),
                set_output("out", "result", "parent went on"),
            ],
            request_type="WaitingParent",
        ),
    )


@pytest.fixture
def rt(database_url: str, tmp_path: Path) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    write_workflows(folder)
    settings = Settings.from_env(
        runtime_env(
            tmp_path / "var",
            database_url=database_url,
            workflows=folder,
            # the script outlives the ceiling, then ends on its own (no process to kill here)
            BROKER_STEP_TIME_LIMIT="0.5",
            BROKER_JS_TIME_LIMIT="1.5",
        )
    )
    factory, registry = prepare(settings)
    yield Runtime(
        settings,
        factory=factory,
        registry=registry,
        sender=RecordingSender(),
        locks=FileLockProvider(tmp_path / "locks"),
    )
    dispose_engines()


def submit(rt: Runtime, request_type: str) -> tuple[str, str]:
    request_id = submit_request(rt.factory, rt.registry, request_type, publisher=rt.publisher)
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    return request_id, sender.sent[-1].id


def test_a_step_past_the_ceiling_faults_while_it_still_runs(rt: Runtime) -> None:
    # Given a request whose script loops until the JavaScript limit, past the step ceiling
    request_id, outbox_id = submit(rt, "Loop")
    # When its step runs
    outcome = runner.run_request(rt, request_id, outbox_id)
    # Then the watchdog faulted it at the ceiling, and the step's late result was dropped
    assert outcome is Outcome.STALE
    with transaction(rt.factory, write=False) as session:
        request = session.get(Request, request_id)
        assert request is not None
        assert request.status == "Faulted"
        assert request.error_detail is not None
        assert "exceeded its time limit of 0.5s" in request.error_detail
        instance = session.get(WorkflowInstance, ids.instance_id_for_request(request_id))
        assert instance is not None
        assert (instance.status, instance.sub_status) == ("Finished", "Faulted")
        assert instance.fault is not None
        assert instance.fault["code"] == FAULT_CODE
        # the heartbeat stopped at the ceiling though the script ran on for a second more
        assert instance.heartbeat_at is not None
        assert instance.finished_at is not None
        assert instance.heartbeat_at <= instance.finished_at
        row = session.get(OutboxRow, outbox_id)
        assert row is not None
        assert row.state == "done"
        letter = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).one()
        assert letter.kind == "request"
        assert letter.reason == FAULT_CODE
        assert letter.activity_id == "js"  # the activity the step was stuck in
        assert letter.replayable
    assert event_types(rt.factory, request_id) == [
        "RequestSubmitted",
        "RequestProcessing",
        "RequestFaulted",
    ]
    # And a redelivery of the same message runs nothing
    assert runner.run_request(rt, request_id, outbox_id) is Outcome.SKIPPED


def test_a_task_activity_call_past_its_time_limit_faults_and_its_late_answer_is_dropped(
    rt: Runtime,
) -> None:
    # Given a request whose task-mode activity (time_limit=0.5) takes 1.5 s, its call scheduled
    request_id, outbox_id = submit(rt, "SlowCall")
    runner.run_request(rt, request_id, outbox_id)
    with transaction(rt.factory, write=False) as session:
        call = session.scalars(select(OutboxRow).where(OutboxRow.task_name == RUN_ACTIVITY)).one()
        session.expunge(call)
    # When the call runs (in this process: no pool process to end)
    late = activities.run_activity(
        rt,
        outbox_id=call.id,
        type_name="Ceiling.Slow",
        inputs=call.args["inputs"],
        instance_id=call.args["instance_id"],
        bookmark_id=call.args["bookmark_id"],
    )
    # Then the watchdog answered at the limit with the fault; the call's late answer was dropped
    assert late is None
    with transaction(rt.factory, write=False) as session:
        (item,) = session.scalars(
            select(BookmarkQueueItem).where(BookmarkQueueItem.instance_id == call.instance_id)
        )
        assert item.payload == {
            "fault": "activity 'Ceiling.Slow' exceeded its time limit of 0.5s and was stopped",
            "code": activities.TIME_LIMIT_CODE,
        }
        row = session.get(OutboxRow, call.id)
        assert row is not None
        assert row.state == "done"


def test_the_dead_letter_of_a_first_step_replays_the_request_from_its_start(rt: Runtime) -> None:
    # Given a request faulted by the ceiling in its first step (no state was ever saved)
    request_id, outbox_id = submit(rt, "Loop")
    runner.run_request(rt, request_id, outbox_id)
    with transaction(rt.factory) as session:
        letter = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).one()
        # When an operator replays its dead letter
        replayed = dead_letter_admin.replay(session, letter.id)
    # Then the request is Processing again and its first step is published once more
    assert request_status(rt.factory, request_id) == "Processing"
    with transaction(rt.factory, write=False) as session:
        row = session.get(OutboxRow, replayed.new_id)
        assert row is not None
        assert (row.task_name, row.args) == (RUN_REQUEST, {"request_id": request_id})
    # And running it faults again at the ceiling (the script did not change), with a fresh letter
    assert runner.run_request(rt, request_id, replayed.new_id) is Outcome.STALE
    assert request_status(rt.factory, request_id) == "Faulted"
    with transaction(rt.factory, write=False) as session:
        letters = session.scalars(
            select(DeadLetter)
            .where(DeadLetter.request_id == request_id)
            .order_by(DeadLetter.created_at)
        ).all()
        assert [(d.id == letter.id, d.replayable) for d in letters] == [
            (True, False),
            (False, True),
        ]
        fresh = letters[1].id
    # And that one replays in turn
    with transaction(rt.factory) as session:
        again = dead_letter_admin.replay(session, fresh)
    assert again.new_id != replayed.new_id
    assert request_status(rt.factory, request_id) == "Processing"


def test_a_child_past_the_ceiling_faults_and_its_waiting_parent_is_told(rt: Runtime) -> None:
    # Given a parent that dispatched a child and waits for it
    request_id, outbox_id = submit(rt, "WaitingParent")
    assert runner.run_request(rt, request_id, outbox_id) is Outcome.DONE
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    [child_row] = [row for row in sender.sent if row.task_name == RUN_CHILD]
    # When the child's first step runs past the ceiling
    child_id = str(child_row.args["instance_id"])
    assert runner.run_child(rt, child_id, child_row.id) is Outcome.STALE
    # Then the child is Faulted, and the parent's bookmark gets a ChildCompleted stimulus
    with transaction(rt.factory, write=False) as session:
        child = session.get(WorkflowInstance, child_id)
        assert child is not None
        assert child.sub_status == "Faulted"
        items = session.scalars(
            select(BookmarkQueueItem).where(BookmarkQueueItem.name == "ChildCompleted")
        ).all()
        assert len(items) == 1
        assert items[0].instance_id == ids.instance_id_for_request(request_id)
        assert items[0].options == {"childInstanceId": child_id, "childSubStatus": "Faulted"}
        # And the child's journal says why
        events = session.scalars(
            select(ActivityExecution.event_name).where(ActivityExecution.instance_id == child_id)
        ).all()
        assert FAULT_CODE in events


def test_a_step_within_the_ceiling_is_untouched(rt: Runtime) -> None:
    request_id, outbox_id = submit(rt, "Quick")
    assert runner.run_request(rt, request_id, outbox_id) is Outcome.DONE
    assert request_status(rt.factory, request_id) == "Completed"


# A real worker ------------------------------------------------------------------------------------

CEILING = 3.0
#: how long past the ceiling the test allows for the fault to be visible (a loaded machine)
SLACK = 10.0


def wait_status(factory: Any, request_id: str, status: str, *, timeout: float) -> float:
    """Wait for the request to reach ``status``; answers the seconds it took."""
    started = time.monotonic()
    wait_until(
        lambda: request_status(factory, request_id) == status,
        timeout=timeout,
        what=f"request {request_id} to be {status}",
    )
    return time.monotonic() - started


@pytest.fixture(params=["embedded", "production"])
def worker_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """SQLite with the filesystem transport, or PostgreSQL with Redis (see conftest)."""
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    yield from backend_urls(str(request.param), var_dir)


@pytest.mark.slow
def test_stuck_scripts_fault_within_the_ceiling_and_the_worker_takes_the_next_request(
    tmp_path: Path, worker_urls: dict[str, str]
) -> None:
    # Given one worker process with one pool child, a 3 s step ceiling, and a JavaScript limit
    # so high that only the ceiling can stop a stuck script
    folder = tmp_path / "wf"
    write_workflows(folder)
    env = runtime_env(
        tmp_path / "var",
        workflows=folder,
        BROKER_STEP_TIME_LIMIT=str(CEILING),
        BROKER_JS_TIME_LIMIT="600",
        **worker_urls,
    )
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    publisher = make_publisher(settings, factory)
    try:
        with running_worker(env, tmp_path / "worker.log", concurrency=1) as worker:
            warm_up = submit_request(factory, registry, "Quick", publisher=publisher)
            wait_status(factory, warm_up, "Completed", timeout=120)
            for request_type, expected in (
                ("Redos", "exceeded its time limit of 3s"),
                ("Escape", "unexpected token"),
                ("Loop", "exceeded its time limit of 3s"),
            ):
                # When a stuck (or escaping) script is submitted
                request_id = submit_request(factory, registry, request_type, publisher=publisher)
                # Then it ends as a fault within the ceiling, saying why
                took = wait_status(factory, request_id, "Faulted", timeout=CEILING + SLACK)
                with transaction(factory, write=False) as session:
                    request = session.get(Request, request_id)
                    assert request is not None
                    assert request.error_detail is not None
                    assert expected in request.error_detail, request.error_detail
                # And the same worker then takes and completes the next request: a stuck pool
                # process is ended at the ceiling (Celery's hard limit, STEP_KILL_GRACE seconds
                # later, is the backstop) and replaced
                quick = submit_request(factory, registry, "Quick", publisher=publisher)
                freed = wait_status(
                    factory, quick, "Completed", timeout=CEILING + STEP_KILL_GRACE + SLACK
                )
                print(f"{request_type}: faulted after {took:.1f}s, next done after {freed:.1f}s")
            assert worker.proc is not None
            assert worker.proc.poll() is None
            # the stuck pool processes were ended by their watchdog at the ceiling (and replaced)
            log = worker.log.read_text(errors="replace")
            assert log.count(f"exited with 'exitcode {OVERDUE_EXIT}'") >= 2, worker.tail()
    finally:
        registry.stop()
