"""Poison work: deliveries that die are counted on their outbox row, and at the limit the work is
dead-lettered instead of run, and its replay runs it once more.

In process, on SQLite and PostgreSQL: a "death" is a delivery started (``deliveries.begin``)
that writes nothing more, its lease then run out; the tests with real worker processes that
segfault, run out of memory or call ``os._exit`` are in ``tests/chaos/test_chaos_poison.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import undefer

from broker.activities import activity as python_activity
from broker.names import DELIVER_WEBHOOK, RUN_ACTIVITY, RUN_REQUEST, RUN_TASK
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.bookmarks import queue as bookmark_queue
from broker.runtime.outbox import deliveries
from broker.runtime.outbox import rows as outbox
from broker.runtime.steps import poison, runner, usertasks
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, OutboxRow, WorkflowInstance, utcnow
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import (
    drain,
    event_types,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.workflows import activity, literal, obj, set_output, workflow, write_workflow

TASK = "poison.crash"


@python_activity("Poison.Charge", category="Test", run="task")
def charge(amount: float) -> float:
    return amount


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Iterator[Settings]:
    dispose_engines()
    folder = tmp_path / "wf"
    write_workflow(
        folder,
        workflow(
            "crash",
            [
                activity(
                    "crash",
                    "Elsa.RunTask",
                    taskName=literal(TASK),
                    payload=obj({"n": 1}),
                ),
                set_output("out", "result", "survived"),
            ],
            request_type="Crash",
        ),
    )
    write_workflow(folder, workflow("quick", [set_output("out", "result", "ok")], request_type="Q"))
    write_workflow(
        folder,
        workflow(
            "crash-activity",
            [activity("charge", "Poison.Charge", amount=literal(3))],
            request_type="CrashActivity",
        ),
    )
    env = runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    yield Settings.from_env(env)
    dispose_engines()


@pytest.fixture
def rt(settings: Settings, tmp_path: Path) -> Runtime:
    runtime: Runtime = in_process_runtime(settings, tmp_path / "locks")
    return runtime


def row_of(rt: Runtime, outbox_id: str) -> OutboxRow:
    with transaction(rt.factory, write=False) as session:
        row = session.get(OutboxRow, outbox_id, options=[undefer("*")])
        assert row is not None
        session.expunge(row)
        return row


def rows_named(rt: Runtime, task_name: str) -> list[OutboxRow]:
    with transaction(rt.factory, write=False) as session:
        rows = list(
            session.scalars(
                select(OutboxRow)
                .where(OutboxRow.task_name == task_name)
                .order_by(OutboxRow.created_at)
            )
        )
        session.expunge_all()
        return rows


def lease_runs_out(rt: Runtime, outbox_id: str) -> None:
    """Time passes without a heartbeat: the delivery's lease ends (what a dead process leaves)."""
    with transaction(rt.factory) as session:
        row = session.get(OutboxRow, outbox_id)
        assert row is not None
        row.lease_expires_at = utcnow() - dt.timedelta(seconds=1)


def begin(rt: Runtime, outbox_id: str, retries: int = 0) -> deliveries.Delivery:
    delivery = deliveries.begin(rt.factory, rt.settings, outbox_id, retries=retries)
    assert delivery is not None
    return delivery


def task_row_of_a_request(rt: Runtime) -> tuple[str, str]:
    """A Crash request run up to its RunTask call: (request id, the run_task row's id)."""
    request_id = submit_request(rt.factory, rt.registry, "Crash")
    (first,) = rows_named(rt, RUN_REQUEST)
    runner.run_request(rt, request_id, first.id)
    (task_row,) = rows_named(rt, RUN_TASK)
    return request_id, task_row.id


def test_a_delivery_whose_lease_ran_out_unfinished_counts_as_one_death(rt: Runtime) -> None:
    # Given a queued piece of work
    request_id = submit_request(rt.factory, rt.registry, "Q")
    (row,) = rows_named(rt, RUN_REQUEST)
    # When a first delivery starts it (committed before the work runs) and its process dies
    first = begin(rt, row.id)
    assert (first.busy, first.deaths, first.poisoned) == (False, 0, False)
    assert row_of(rt, row.id).started_at is not None
    lease_runs_out(rt, row.id)
    # Then the next delivery finds the start still open and counts the death
    second = begin(rt, row.id)
    assert (second.busy, second.deaths, second.poisoned) == (False, 1, False)
    # And when that delivery records its result, the start is closed and the count stays
    runner.run_request(rt, request_id, row.id)
    stored = row_of(rt, row.id)
    assert (stored.state, stored.started_at, stored.deaths) == ("done", None, 1)
    assert request_status(rt.factory, request_id) == "Completed"


def test_a_second_delivery_while_the_first_is_alive_leaves_the_row_alone(rt: Runtime) -> None:
    # Given a delivery running (its lease live: the heartbeat beats it)
    submit_request(rt.factory, rt.registry, "Q")
    (row,) = rows_named(rt, RUN_REQUEST)
    first = begin(rt, row.id)
    # When the same message is delivered again meanwhile
    second = begin(rt, row.id)
    # Then that delivery is told the row is busy, counts no death and changes nothing
    assert (second.busy, second.deaths, second.poisoned) == (True, 0, False)
    stored = row_of(rt, row.id)
    assert (stored.started_at, stored.deaths) == (first.started_at, 0)


def test_a_celery_retry_after_its_attempt_raised_takes_the_start_over_without_a_death(
    rt: Runtime,
) -> None:
    # Given an attempt that started and raised (say, the database went away) without closing
    submit_request(rt.factory, rt.registry, "Q")
    (row,) = rows_named(rt, RUN_REQUEST)
    begin(rt, row.id, retries=0)
    # When Celery's retry of that message starts (a death sends no retry)
    retry = begin(rt, row.id, retries=1)
    # Then it runs the work, and nothing died
    assert (retry.busy, retry.deaths) == (False, 0)
    assert row_of(rt, row.id).start_retries == 1


def test_a_delivery_that_raised_closes_its_start_and_is_no_death(rt: Runtime) -> None:
    # Given a delivery that started and raised, and closed its start on the way out
    submit_request(rt.factory, rt.registry, "Q")
    (row,) = rows_named(rt, RUN_REQUEST)
    deliveries.end_quietly(rt.factory, begin(rt, row.id))
    # When the relay publishes the row again after its lease
    lease_runs_out(rt, row.id)
    later = begin(rt, row.id)
    # Then no death was counted
    assert later.deaths == 0


def test_the_relay_counts_the_death_of_a_delivery_whose_lease_ran_out(rt: Runtime) -> None:
    # Given a delivery that started and died (its message lost with it, as filesystem:// does)
    submit_request(rt.factory, rt.registry, "Q")
    (row,) = rows_named(rt, RUN_REQUEST)
    begin(rt, row.id)
    lease_runs_out(rt, row.id)
    # When the relay publishes the row again
    sender = RecordingSender()
    report = outbox.relay(rt.settings, rt.factory, sender, rt.locks)
    # Then it counted the death and closed the dead start, so the next delivery starts afresh
    assert report.published == 1
    assert sender.ids == [row.id]
    stored = row_of(rt, row.id)
    assert (stored.deaths, stored.started_at) == (1, None)
    assert begin(rt, row.id).deaths == 1


def test_work_that_killed_its_worker_three_times_is_dead_lettered_and_its_replay_runs_it_again(
    rt: Runtime,
) -> None:
    # Given a request waiting for its RunTask call, whose task kills its worker each time
    request_id, task_row = task_row_of_a_request(rt)
    for death in range(rt.settings.max_worker_deaths):
        delivery = begin(rt, task_row)
        assert (delivery.deaths, delivery.poisoned) == (death, False)
        lease_runs_out(rt, task_row)
    # When the next delivery starts
    delivery = begin(rt, task_row)
    # Then it is told the work is poison, and it dead-letters it instead of running it
    assert (delivery.deaths, delivery.poisoned) == (3, True)
    assert poison.bury(rt, delivery) == "request"
    assert poison.bury(rt, delivery) is None  # (twice: once)
    assert row_of(rt, task_row).state == "dead"
    # And the request is Faulted, naming the deaths, the activity and the task
    assert request_status(rt.factory, request_id) == "Faulted"
    with transaction(rt.factory, write=False) as session:
        (letter,) = session.scalars(select(DeadLetter).where(DeadLetter.request_id == request_id))
        session.expunge(letter)
        instance = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.request_id == request_id)
        ).one()
        fault = dict(instance.fault or {})
    expected = f"the worker died 3 times running it (activity 'crash', task '{TASK}')"
    assert (letter.kind, letter.reason, letter.error, letter.activity_id) == (
        "request",
        "WorkerDied",
        expected,
        "crash",
    )
    assert letter.replayable
    assert (fault["code"], fault["activityId"]) == ("WorkerDied", "crash")
    assert "RequestFaulted" in event_types(rt.factory, request_id)
    # When an operator replays the dead letter
    with transaction(rt.factory) as session:
        replayed = dead_letter_admin.replay(session, letter.id, source="test")
    # Then the request is open again, and the same task is published once more as a new row,
    # its count of deaths at 0
    assert request_status(rt.factory, request_id) == "Processing"
    new = row_of(rt, replayed.new_id)
    old = row_of(rt, task_row)
    assert (new.task_name, new.args, new.deaths, new.state) == (RUN_TASK, old.args, 0, "pending")
    # And when it runs this time (the cause fixed) the request completes with its result
    assert begin(rt, new.id).poisoned is False
    usertasks.run_task(
        rt,
        _App({TASK: _Task(lambda payload: {"n": payload["n"], "fixed": True})}),
        outbox_id=new.id,
        task_name=TASK,
        payload=new.args["payload"],
        instance_id=new.args["instance_id"],
        bookmark_id=new.args["bookmark_id"],
    )
    bookmark_queue.process_queue(rt)
    drain(rt)
    assert request_status(rt.factory, request_id) == "Completed"


def test_a_task_mode_activity_that_killed_its_worker_is_dead_lettered_naming_the_activity(
    rt: Runtime,
) -> None:
    # Given a request waiting for its task-mode Python activity, whose call killed its worker
    # three times
    request_id = submit_request(rt.factory, rt.registry, "CrashActivity")
    (first,) = rows_named(rt, RUN_REQUEST)
    runner.run_request(rt, request_id, first.id)
    (call,) = rows_named(rt, RUN_ACTIVITY)
    for _ in range(rt.settings.max_worker_deaths):
        begin(rt, call.id)
        lease_runs_out(rt, call.id)
    # When the next delivery buries it
    assert poison.bury(rt, begin(rt, call.id)) == "request"
    # Then its dead letter and the instance's fault name the activity
    with transaction(rt.factory, write=False) as session:
        (letter,) = session.scalars(select(DeadLetter).where(DeadLetter.request_id == request_id))
        session.expunge(letter)
    assert (letter.reason, letter.activity_id) == ("WorkerDied", "charge")
    assert letter.error == "the worker died 3 times running it (activity 'charge')"


def test_a_first_step_that_killed_its_worker_before_writing_anything_is_replayable(
    rt: Runtime,
) -> None:
    # Given a request whose first step died three times before its instance was written
    request_id = submit_request(rt.factory, rt.registry, "Q")
    (row,) = rows_named(rt, RUN_REQUEST)
    for _ in range(3):
        begin(rt, row.id)
        lease_runs_out(rt, row.id)
    delivery = begin(rt, row.id)
    assert delivery.poisoned
    # When it is dead-lettered
    assert poison.bury(rt, delivery) == "request"
    # Then the request is Faulted without an instance
    assert request_status(rt.factory, request_id) == "Faulted"
    with transaction(rt.factory, write=False) as session:
        (letter,) = session.scalars(select(DeadLetter).where(DeadLetter.request_id == request_id))
        assert letter.instance_id is None
        assert letter.error == "the worker died 3 times running it"
        letter_id = letter.id
    # And its replay runs the first step once more, to completion
    with transaction(rt.factory) as session:
        dead_letter_admin.replay(session, letter_id, source="test")
    drain(rt)
    assert request_status(rt.factory, request_id) == "Completed"


def test_poison_work_that_serves_no_instance_becomes_an_outbox_dead_letter(rt: Runtime) -> None:
    # Given a webhook attempt (it serves no instance) that killed its worker three times
    with transaction(rt.factory) as session:
        outbox.enqueue(
            session,
            outbox_id="hook-1",
            task_name=DELIVER_WEBHOOK,
            queue="broker.webhooks",
            args={"delivery_id": "d-1"},
        )
    for _ in range(3):
        begin(rt, "hook-1")
        lease_runs_out(rt, "hook-1")
    # When it is dead-lettered
    assert poison.bury(rt, begin(rt, "hook-1")) == "outbox"
    # Then its letter says so, and its replay publishes the same task again
    with transaction(rt.factory, write=False) as session:
        (letter,) = session.scalars(select(DeadLetter).where(DeadLetter.source_id == "hook-1"))
        assert (letter.kind, letter.reason) == ("outbox", "WorkerDied")
        assert letter.error == "the worker died 3 times running it"
        letter_id = letter.id
    with transaction(rt.factory) as session:
        replayed = dead_letter_admin.replay(session, letter_id, source="test")
    new = row_of(rt, replayed.new_id)
    assert (new.task_name, new.args, new.deaths) == (DELIVER_WEBHOOK, {"delivery_id": "d-1"}, 0)


class _Task:
    """A registered task as ``usertasks.run_task`` looks it up (defined in a listed module)."""

    def __init__(self, body: Any) -> None:
        self.name = TASK
        self.run = body
        self.run.__module__ = "tasks.fixed"


class _App:
    def __init__(self, tasks: dict[str, _Task]) -> None:
        self.tasks = tasks


def test_on_the_schema_before_the_poison_columns_work_runs_and_nothing_is_counted(
    tmp_path: Path,
) -> None:
    # Given a database one revision behind (a rolling upgrade runs this code there a while)
    from alembic.script import ScriptDirectory

    from broker.store import db

    url = f"sqlite:///{tmp_path / 'old.db'}"
    head = ScriptDirectory.from_config(db.alembic_config()).get_revision(db.head_revision())
    assert isinstance(head.down_revision, str)
    db.upgrade(url, head.down_revision)
    factory = db.make_session_factory(db.make_engine(url))
    settings = Settings.from_env(runtime_env(tmp_path, database_url=url, workflows=tmp_path))
    # When a row is written, started, published by the relay and finished
    with transaction(factory) as session:
        outbox.enqueue(session, outbox_id="r1", task_name="t", queue="q", args={})
    started = deliveries.begin(factory, settings, "r1")
    sender = RecordingSender()
    outbox.relay(settings, factory, sender, _NoLocks())
    with transaction(factory) as session:
        assert outbox.mark_done(session, "r1")
    # Then all of it works, and no delivery was counted
    assert started is None
    assert sender.ids == ["r1"]
    db.dispose_engines()


class _NoLocks:
    """A lock provider whose locks are always free (one relay in this test)."""

    def acquire(self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0) -> Any:
        import contextlib

        class _Lock(contextlib.nullcontext[None]):
            name = ""

            def release(self) -> None: ...

            def extend(self, ttl: float | None = None) -> None: ...

            def owned(self) -> bool:
                return True

        return _Lock()

    def close(self) -> None: ...
