"""Invariant 4 for the tasks and jobs without a run-twice test elsewhere: ``run_child``,
``run_task`` and the purge job, each delivered or run twice, act once (SQLite and PostgreSQL).

As in test_runtime_inprocess, tasks are called directly and a recording sender stands in for
Celery, so each test decides which delivery happens when.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import func, select, update

from broker.adapters.locks import FileLockProvider
from broker.names import RUN_CHILD, RUN_TASK
from broker.runtime import ids
from broker.runtime.admin import recovery
from broker.runtime.failures import dead_letters
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.steps import runner, usertasks
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import (
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    WorkflowInstance,
    utcnow,
)
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import prepare, runtime_env, submit_request
from tests.support.sink import Sink
from tests.support.workflows import (
    activity,
    literal,
    obj,
    post_to,
    set_output,
    workflow,
    write_workflow,
)

#: what the RunTask test's task did, by payload (the task runs in this process)
CALLS: list[Any] = []
counting_app = Celery("run-twice-tests", set_as_current=False)


@counting_app.task(name="runtwice.count")  # type: ignore[untyped-decorator]
def count_call(payload: Any) -> dict[str, Any]:
    CALLS.append(payload)
    return {"calls": len(CALLS)}


@pytest.fixture
def rt(database_url: str, tmp_path: Path, sink: Sink) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    dispatch = activity(
        "dispatch",
        "Elsa.DispatchWorkflow",
        workflowDefinitionId=literal("child"),
        waitForCompletion=literal(True),
        input=obj({"n": 1}),
    )
    write_workflow(folder, workflow("parent", [dispatch], request_type="Parent"))
    write_workflow(folder, workflow("child", [post_to("call", sink.url("/child"))]))
    run_task = activity(
        "task", "Elsa.RunTask", taskName=literal("runtwice.count"), payload=obj({"n": 21})
    )
    write_workflow(
        folder,
        workflow("task-call", [run_task, set_output("out", "done", True)], request_type="TaskCall"),
    )
    settings = Settings.from_env(
        runtime_env(
            tmp_path / "var",
            database_url=database_url,
            workflows=folder,
            BROKER_TASK_MODULES=__name__,
        )
    )
    factory, registry = prepare(settings)
    CALLS.clear()
    yield Runtime(
        settings,
        factory=factory,
        registry=registry,
        sender=RecordingSender(),
        locks=FileLockProvider(tmp_path / "locks"),
    )
    dispose_engines()


def rows_sent(rt: Runtime, task_name: str) -> list[OutboxRow]:
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    return [row for row in sender.sent if row.task_name == task_name]


def started(rt: Runtime, request_type: str) -> str:
    """A request whose first step ran (its run_request delivered once); answers its id."""
    request_id = submit_request(rt.factory, rt.registry, request_type, publisher=rt.publisher)
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    assert runner.run_request(rt, request_id, sender.sent[-1].id) is Outcome.DONE
    return request_id


def test_run_child_delivered_twice_starts_the_child_once(rt: Runtime, sink: Sink) -> None:
    # Given a parent that dispatched a child (its run_child row is out)
    started(rt, "Parent")
    [row] = rows_sent(rt, RUN_CHILD)
    instance_id = str(row.args["instance_id"])
    # When the run_child message is delivered twice
    first = runner.run_child(rt, instance_id, row.id)
    again = runner.run_child(rt, instance_id, row.id)
    # Then the child ran once: one call, and the second delivery found the work done
    assert (first, again) == (Outcome.DONE, Outcome.SKIPPED)
    assert len(sink.calls) == 1
    with transaction(rt.factory, write=False) as session:
        child = session.get(WorkflowInstance, instance_id)
        assert child is not None
        assert child.sub_status == "Finished"


def test_run_task_delivered_twice_calls_the_task_once_and_queues_one_result(rt: Runtime) -> None:
    # Given a workflow waiting on a RunTask call (its run_task row is out)
    started(rt, "TaskCall")
    [row] = rows_sent(rt, RUN_TASK)
    args: dict[str, Any] = dict(row.args)

    def deliver() -> Any:
        return usertasks.run_task(rt, counting_app, outbox_id=row.id, **args)

    # When the run_task message is delivered twice
    first, again = deliver(), deliver()
    # Then the task ran once, and one result waits for the bookmark
    assert CALLS == [{"n": 21}]
    assert (first, again) == ({"calls": 1}, None)
    item_id = ids.queue_item_id_for("task", args["instance_id"], args["bookmark_id"])
    with transaction(rt.factory, write=False) as session:
        assert session.scalar(select(func.count()).select_from(BookmarkQueueItem)) == 1
        assert session.get(BookmarkQueueItem, item_id) is not None


@dataclasses.dataclass(frozen=True)
class Counts:
    letters: int
    states: int


def counts(rt: Runtime) -> Counts:
    with transaction(rt.factory, write=False) as session:
        letters = session.scalar(select(func.count()).select_from(DeadLetter)) or 0
        states = (
            session.scalar(
                select(func.count())
                .select_from(WorkflowInstance)
                .where(WorkflowInstance.state.is_not(None))
            )
            or 0
        )
    return Counts(int(letters), int(states))


def test_the_purge_run_twice_removes_once_and_then_finds_nothing(rt: Runtime) -> None:
    # Given a long-finished instance, an old dead letter and a recent one
    started(rt, "Parent")
    long_ago = utcnow() - dt.timedelta(seconds=rt.settings.result_retention + 5)
    with transaction(rt.factory) as session:
        session.execute(
            update(WorkflowInstance)
            .where(WorkflowInstance.sub_status == "Suspended")
            .values(status="Finished", sub_status="Finished", finished_at=long_ago)
        )
        dead_letters.record(session, dead_letter_id="old", kind="outbox", reason="Undeliverable")
        dead_letters.record(session, dead_letter_id="new", kind="outbox", reason="Undeliverable")
        session.flush()
        session.execute(
            update(DeadLetter)
            .where(DeadLetter.id == "old")
            .values(created_at=utcnow() - dt.timedelta(seconds=rt.settings.dead_letter_ttl + 5))
        )
    # And a stored file past its retention, and a fresh one
    rt.files.put("old-file", b"o", filename="o.txt", content_type="text/plain")
    rt.files.put("new-file", b"n", filename="n.txt", content_type="text/plain")
    aged = (utcnow() - dt.timedelta(seconds=rt.settings.file_retention + 5)).timestamp()
    for part in ("old-file.bin", "old-file.json"):
        os.utime(rt.files.folder / part, (aged, aged))
    before = counts(rt)
    # When the purge job runs twice (two beats, or a redelivery)
    first = recovery.purge(rt)
    after_first = counts(rt)
    second = recovery.purge(rt)
    # Then the first run removed the old letter, the old state and the old file, the second
    # removed nothing
    assert (first.dead_letters, first.states, first.files) == (1, 1, 1)
    assert (second.dead_letters, second.states, second.outbox_rows, second.queue_items) == (
        0,
        0,
        0,
        0,
    )
    assert second.files == 0
    assert rt.files.read("new-file")[1] == b"n"
    assert after_first == Counts(before.letters - 1, before.states - 1)
    assert counts(rt) == after_first
