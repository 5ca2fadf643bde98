"""The runner, recovery, bookmark queue and purge in-process, on SQLite and PostgreSQL.

No worker and no transport: tasks are called directly and a recording sender stands in for Celery,
so each test controls exactly which delivery happens when.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text, update

from broker.adapters.locks import FileLockProvider
from broker.engine.run.ports import EmailMessage, HttpRequest, HttpResponse
from broker.errors import Conflict, RetryLater
from broker.runtime import ids
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.admin import recovery
from broker.runtime.bookmarks import queue as bookmarks
from broker.runtime.failures import dead_letters
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.requests.cancellation import cancel
from broker.runtime.requests.queries import request_view
from broker.runtime.requests.transitions import finish_request
from broker.runtime.steps import effects, runner
from broker.runtime.steps import step as steps
from broker.runtime.steps.heartbeat import process_heartbeat
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import (
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    Request,
    WorkflowInstance,
    utcnow,
)
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import event_types, prepare, request_status, runtime_env, submit_request
from tests.support.services import PROJECT_ROOT
from tests.support.sink import Sink
from tests.support.waits import wait_until
from tests.support.workflows import (
    activity,
    literal,
    set_output,
    sink_workflow,
    workflow,
    write_workflow,
)

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "workflows"


@pytest.fixture
def rt(database_url: str, tmp_path: Path, sink: Sink) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    write_workflow(folder, sink_workflow("call", "Call", sink.url("/effect")))
    write_workflow(
        folder,
        workflow(
            "approval",
            [
                activity("wait", "Elsa.Event", eventName=literal("approval")),
                set_output("out", "decision", "approved"),
            ],
            request_type="Approval",
        ),
    )
    write_workflow(folder, json.loads((FIXTURES / "correlate-rename.json").read_text()))
    settings = Settings.from_env(
        runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
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


def sent(rt: Runtime) -> list[OutboxRow]:
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    return sender.sent


def submit(rt: Runtime, request_type: str) -> tuple[str, str]:
    """A submitted request and the id of its run_request row (published on the fast path)."""
    request_id = submit_request(rt.factory, rt.registry, request_type, publisher=rt.publisher)
    return request_id, sent(rt)[-1].id


def test_a_redelivered_task_finds_its_work_done(rt: Runtime, sink: Sink) -> None:
    # Given a request whose task ran to completion
    request_id, row_id = submit(rt, "Call")
    assert runner.run_request(rt, request_id, row_id) is Outcome.DONE
    # When the same message is delivered again
    again = runner.run_request(rt, request_id, row_id)
    # Then nothing runs twice
    assert again is Outcome.SKIPPED
    assert len(sink.calls) == 1
    assert event_types(rt.factory, request_id) == [
        "RequestSubmitted",
        "RequestProcessing",
        "RequestCompleted",
    ]


def test_a_step_redone_after_a_crash_replays_its_completed_call_instead_of_calling_again(
    rt: Runtime, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a step that called the sink and then died before it was saved
    request_id, row_id = submit(rt, "Call")
    save = steps.save_step

    def die(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the worker died")

    monkeypatch.setattr(steps, "save_step", die)
    with pytest.raises(RuntimeError):
        runner.run_request(rt, request_id, row_id)
    assert len(sink.calls) == 1
    assert request_status(rt.factory, request_id) == "Queued"
    # When the task is delivered again
    monkeypatch.setattr(steps, "save_step", save)
    outcome = runner.run_request(rt, request_id, row_id)
    # Then the step completes with the recorded response: the sink was not called a second time
    assert outcome is Outcome.DONE
    assert request_status(rt.factory, request_id) == "Completed"
    assert len(sink.calls) == 1


def test_recorded_effects_replay_completed_outcomes_and_retry_transient_failures(
    rt: Runtime,
) -> None:
    # Given an HTTP client that fails transiently once, and a mailer, both recorded for i1
    class Flaky:
        calls = 0

        def send(self, request: HttpRequest) -> HttpResponse:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RetryLater("503 from the server")
            return HttpResponse(200, {"X": "1"}, b"\x00raw", {"ok": True})

    class Outbox:
        sent: list[EmailMessage] = []

        def send(self, message: EmailMessage) -> None:
            Outbox.sent.append(message)

    http = effects.RecordedHttp(Flaky(), rt.factory, "i1")
    mailer = effects.RecordedMailer(Outbox(), rt.factory, "i1")
    request = HttpRequest("POST", "http://127.0.0.1/x", idempotency_key="i1:a1")
    message = EmailMessage(to=("a@example.org",), subject="s", body="b", message_id="<i1.m@b>")
    # When the call fails transiently, Then nothing is recorded and the next try calls again
    with pytest.raises(RetryLater):
        http.send(request)
    first = http.send(request)
    # When the same call and the same e-mail come again (a redone step)
    again = http.send(request)
    mailer.send(message)
    mailer.send(message)
    # Then the recorded response answers, byte for byte, and nothing is sent twice
    assert Flaky.calls == 2
    assert again == first
    assert again.body == b"\x00raw"
    assert len(Outbox.sent) == 1
    # And a call without an idempotency key is never replayed
    effects.RecordedHttp(Flaky(), rt.factory, "i1").send(HttpRequest("GET", "http://127.0.0.1/y"))
    assert Flaky.calls == 3


def test_a_busy_instance_postpones_the_row_instead_of_running_it(rt: Runtime) -> None:
    # Given another worker holding the instance's lock
    request_id, row_id = submit(rt, "Call")
    instance_id = ids.instance_id_for_request(request_id)
    held = rt.locks.acquire(f"instance:{instance_id}", ttl=30, timeout=0)
    assert held is not None
    try:
        steps.LOCK_WAIT_SECONDS, saved_wait = 0.1, steps.LOCK_WAIT_SECONDS
        # When the task arrives
        outcome = runner.run_request(rt, request_id, row_id)
    finally:
        steps.LOCK_WAIT_SECONDS = saved_wait
        held.release()
    # Then its row goes back to pending, due a little later, for the relay
    assert outcome is Outcome.BUSY
    with transaction(rt.factory, write=False) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        assert row.state == "pending"
        assert row.available_at > utcnow()
    assert request_status(rt.factory, request_id) == "Queued"


def test_a_cancelled_request_is_never_resumed_or_changed(rt: Runtime) -> None:
    # Given a request suspended on an event, then cancelled by its client
    request_id, row_id = submit(rt, "Approval")
    runner.run_request(rt, request_id, row_id)
    with transaction(rt.factory) as session:
        cancel(session, request_id, client_id=None, source="test")
        bookmarks.enqueue_stimulus(
            session, item_id="late-event", name="approval", payload=None, correlation_id=request_id
        )
    # When the late event is processed and delivered
    with transaction(rt.factory) as session:
        report, _ = bookmarks.process_due_items(session, rt.settings)
    assert report.matched == 0  # the cancelled instance's bookmarks are gone
    # Then the request stays Cancelled, and a terminal status never changes again
    assert request_status(rt.factory, request_id) == "Cancelled"
    with transaction(rt.factory) as session:
        assert (
            finish_request(session, request_id, sub_status="Finished", output=1, error=None) is None
        )
    assert request_status(rt.factory, request_id) == "Cancelled"


def test_an_event_resumes_only_the_bookmark_it_names(rt: Runtime) -> None:
    # Given two requests suspended on the same event name
    first, first_row = submit(rt, "Approval")
    second, second_row = submit(rt, "Approval")
    runner.run_request(rt, first, first_row)
    runner.run_request(rt, second, second_row)
    # When an event arrives for the first one's correlation id
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id="ev-1", name="approval", payload={"ok": 1}, correlation_id=first
        )
    with transaction(rt.factory) as session:
        report, written = bookmarks.process_due_items(session, rt.settings)
    assert report.matched == 1
    (resume,) = _rows(rt, written)
    outcome = runner.resume_instance(
        rt,
        resume.args["instance_id"],
        resume.id,
        bookmark_id=resume.args["bookmark_id"],
        queue_item_id=resume.args["queue_item_id"],
    )
    # Then only that request completes
    assert outcome is Outcome.DONE
    assert request_status(rt.factory, first) == "Completed"
    assert request_status(rt.factory, second) == "Processing"
    # And the same stimulus delivered twice resumes nothing more
    again = runner.resume_instance(
        rt,
        resume.args["instance_id"],
        resume.id,
        bookmark_id=resume.args["bookmark_id"],
        queue_item_id=resume.args["queue_item_id"],
    )
    assert again is Outcome.SKIPPED


def test_correlate_and_set_name_are_saved_and_the_bookmarks_follow_the_new_id(
    rt: Runtime,
) -> None:
    # Given a workflow that correlates itself as order-42, names itself, then waits for "paid"
    request_id, row = submit(rt, "Renamed")
    runner.run_request(rt, request_id, row)
    # Then the instance row and the request's view show the new correlation id and name
    with transaction(rt.factory, write=False) as session:
        instance = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.request_id == request_id)
        ).one()
        assert (instance.correlation_id, instance.name) == ("order-42", "Order 42")
        shown = request_view(session, session.get_one(Request, request_id))
        assert shown["correlationId"] == request_id
        assert shown["workflow"]["instanceCorrelationId"] == "order-42"
        assert shown["workflow"]["instanceName"] == "Order 42"
    # When "paid" arrives for the old correlation id (the request id), it matches nothing
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id="ev-old", name="paid", payload=None, correlation_id=request_id
        )
    with transaction(rt.factory) as session:
        report, written = bookmarks.process_due_items(session, rt.settings)
    assert (report.matched, written) == (0, [])
    # And for the new one it resumes the instance to completion
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id="ev-new", name="paid", payload=None, correlation_id="order-42"
        )
    with transaction(rt.factory) as session:
        report, written = bookmarks.process_due_items(session, rt.settings)
    assert report.matched == 1
    (resume,) = _rows(rt, written)
    runner.resume_instance(
        rt,
        resume.args["instance_id"],
        resume.id,
        bookmark_id=resume.args["bookmark_id"],
        queue_item_id=resume.args["queue_item_id"],
    )
    assert request_status(rt.factory, request_id) == "Completed"


def _rows(rt: Runtime, row_ids: list[str]) -> list[OutboxRow]:
    with transaction(rt.factory, write=False) as session:
        rows = list(session.scalars(select(OutboxRow).where(OutboxRow.id.in_(row_ids))))
        session.expunge_all()
        return rows


def test_an_unmatched_stimulus_waits_then_expires_into_a_dead_letter(rt: Runtime) -> None:
    # Given a stimulus no bookmark waits for
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(session, item_id="orphan", name="nobody", payload={"x": 1})
    # When the queue is processed within the TTL, it waits
    with transaction(rt.factory) as session:
        report, _ = bookmarks.process_due_items(session, rt.settings)
    assert report.waiting == 1
    # When it is older than the TTL
    with transaction(rt.factory) as session:
        item = session.get(BookmarkQueueItem, "orphan")
        assert item is not None
        item.created_at = utcnow() - dt.timedelta(seconds=rt.settings.bookmark_queue_ttl + 1)
        item.next_attempt_at = utcnow()
    with transaction(rt.factory) as session:
        report, _ = bookmarks.process_due_items(session, rt.settings)
    # Then it is a bookmark dead letter named Expired, and gone from the queue
    assert report.expired == 1
    with transaction(rt.factory, write=False) as session:
        letter = session.scalars(select(DeadLetter).where(DeadLetter.source_id == "orphan")).one()
        assert (letter.kind, letter.reason, letter.name) == ("bookmark", "Expired", "nobody")
        assert session.get(BookmarkQueueItem, "orphan") is None


def test_recovery_redispatches_stalled_instances_and_forgotten_requests(
    rt: Runtime, sink: Sink
) -> None:
    long_ago = utcnow() - dt.timedelta(seconds=rt.settings.inactivity_threshold + 5)
    # Given a queued request whose row was lost
    forgotten, forgotten_row = submit(rt, "Call")
    # And an instance with a retry scheduled, whose retry row was lost
    sink.drop["/effect"] = 1
    retrying, retrying_row = submit(rt, "Call")
    runner.run_request(rt, retrying, retrying_row)
    retrying_instance = ids.instance_id_for_request(retrying)
    with transaction(rt.factory) as session:
        session.execute(
            update(OutboxRow)
            .where(OutboxRow.id.in_([forgotten_row]) | (OutboxRow.instance_id == retrying_instance))
            .values(state="done")
        )
        session.execute(update(Request).values(updated_at=long_ago))
        session.execute(update(WorkflowInstance).values(heartbeat_at=long_ago))
    # When recovery runs twice
    with transaction(rt.factory) as session:
        first = recovery.redispatch_stalled(session, rt.settings)
    with transaction(rt.factory) as session:
        second = recovery.redispatch_stalled(session, rt.settings)
    # Then each got one new row, and the second run added nothing
    rows = {r.task_name: r for r in _rows(rt, first)}
    assert set(rows) == {"broker.run_request", "broker.resume_instance"}
    assert rows["broker.run_request"].args == {"request_id": forgotten}
    assert rows["broker.resume_instance"].args == {"instance_id": retrying_instance, "retry": 2}
    assert second == []
    # And both complete from their new rows (the sink works again)
    sink.drop["/effect"] = 0
    runner.run_request(rt, forgotten, rows["broker.run_request"].id)
    resume = rows["broker.resume_instance"]
    runner.resume_instance(rt, retrying_instance, resume.id, retry=2)
    assert request_status(rt.factory, forgotten) == "Completed"
    assert request_status(rt.factory, retrying) == "Completed"


def test_a_first_step_that_was_never_saved_runs_again(rt: Runtime, sink: Sink) -> None:
    # Given a first step that crashed after its instance row was written (checkpoint 0)
    request_id, row_id = submit(rt, "Call")
    instance_id = ids.instance_id_for_request(request_id)
    with transaction(rt.factory) as session:
        session.add(
            WorkflowInstance(
                id=instance_id,
                definition_id="call",
                definition_version_id="x",
                version=1,
                request_id=request_id,
                status="Running",
                sub_status="Executing",
                checkpoint=0,
            )
        )
    # When the row is delivered again
    outcome = runner.run_request(rt, request_id, row_id)
    # Then the step runs and is saved
    assert outcome is Outcome.DONE
    assert request_status(rt.factory, request_id) == "Completed"
    assert len(sink.calls) == 1


def test_replaying_a_request_that_is_not_faulted_conflicts(rt: Runtime) -> None:
    request_id, row_id = submit(rt, "Call")
    runner.run_request(rt, request_id, row_id)
    with transaction(rt.factory) as session:
        dead_letters.record(
            session,
            dead_letter_id="dl-1",
            kind="request",
            reason="Exhausted",
            request_id=request_id,
            instance_id=ids.instance_id_for_request(request_id),
        )
    with pytest.raises(Conflict), transaction(rt.factory) as session:
        dead_letter_admin.replay(session, "dl-1")
    assert request_status(rt.factory, request_id) == "Completed"


def test_purge_clears_old_state_but_keeps_what_replay_needs(rt: Runtime) -> None:
    # Given a long-finished instance and an old dead letter
    done, done_row = submit(rt, "Call")
    runner.run_request(rt, done, done_row)
    long_ago = utcnow() - dt.timedelta(seconds=rt.settings.result_retention + 5)
    with transaction(rt.factory) as session:
        session.execute(update(WorkflowInstance).values(finished_at=long_ago))
        dead_letters.record(session, dead_letter_id="old", kind="outbox", reason="Undeliverable")
        session.flush()
        session.execute(
            update(DeadLetter).values(
                created_at=utcnow() - dt.timedelta(seconds=rt.settings.dead_letter_ttl + 5)
            )
        )
    # When the purge runs
    with transaction(rt.factory) as session:
        report = recovery.purge_old(session, rt.settings)
    # Then the old dead letter and the finished state are gone; the request record stays
    assert report.dead_letters == 1
    assert report.states == 1
    with transaction(rt.factory, write=False) as session:
        instance = session.get(WorkflowInstance, ids.instance_id_for_request(done))
        assert instance is not None
        assert instance.state is None
        record: Any = session.get(Request, done)
        assert record.status == "Completed"


def test_a_request_cancelled_while_its_first_step_runs_unsaved_keeps_nothing_of_it(
    rt: Runtime, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a first step whose start is not written yet (it would be after 30 s), busy on a call
    monkeypatch.setattr(steps, "OPEN_DELAY_SECONDS", 30.0)
    sink.delay["/effect"] = 1.0
    request_id, row_id = submit(rt, "Call")
    outcome: list[Outcome] = []
    worker = threading.Thread(
        target=lambda: outcome.append(runner.run_request(rt, request_id, row_id))
    )
    worker.start()
    try:
        wait_until(lambda: "/effect" in sink.arrived, timeout=10, what="the call")
        assert request_status(rt.factory, request_id) == "Queued"
        # When the client cancels it
        with transaction(rt.factory) as session:
            cancel(session, request_id, client_id=None, source="api")
    finally:
        worker.join(15)
    # Then the step's result is dropped: the request stays Cancelled, never Processing, and no
    # instance row was written
    assert outcome == [Outcome.STALE]
    assert request_status(rt.factory, request_id) == "Cancelled"
    assert event_types(rt.factory, request_id) == ["RequestSubmitted", "RequestCancelled"]
    with transaction(rt.factory, write=False) as session:
        assert session.get(WorkflowInstance, ids.instance_id_for_request(request_id)) is None


def test_steps_running_together_share_the_process_heartbeat_thread(
    rt: Runtime, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two requests whose steps each take a second and a half, and a watch on new threads
    sink.delay["/effect"] = 1.5
    submitted = [submit(rt, "Call") for _ in range(2)]
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    workers = [
        threading.Thread(target=runner.run_request, args=(rt, request_id, row_id))
        for request_id, row_id in submitted
    ]
    for worker in workers:
        worker.start()
    monkeypatch.setattr(threading.Thread, "start", start)
    try:
        # When both run long enough to be beaten (their start is written by the heartbeat)
        for request_id, _ in submitted:
            wait_until(
                lambda r=request_id: request_status(rt.factory, r) == "Processing",  # type: ignore[misc]
                timeout=10,
                what="the start to be written",
            )
    finally:
        for worker in workers:
            worker.join(15)
    # Then both completed, beaten by the one heartbeat thread of the process: no thread was
    # started per step (at most the process's heartbeat, on its first step; the sink serves each
    # call on a thread of its own)
    assert [request_status(rt.factory, r) for r, _ in submitted] == ["Completed", "Completed"]
    ours = [name for name in started if not name.endswith("(process_request_thread)")]
    assert ours in ([], ["heartbeat"])
    # (other tests may have left heartbeats of their own: only the process's is asked about)
    thread = process_heartbeat().thread
    assert thread is not None
    assert thread.is_alive()


def test_a_step_that_runs_long_holds_no_transaction_open_while_it_runs(
    rt: Runtime, sink: Sink
) -> None:
    # Given a step whose HTTP call takes two seconds, on PostgreSQL (where a short step reads,
    # runs and saves in one transaction)
    if rt.settings.database_url.startswith("sqlite"):
        pytest.skip("on SQLite the read part always ends before the engine runs")
    sink.delay["/effect"] = 2.0
    request_id, row_id = submit(rt, "Call")
    worker = threading.Thread(target=runner.run_request, args=(rt, request_id, row_id))
    worker.start()
    try:
        wait_until(lambda: "/effect" in sink.arrived, timeout=10, what="the call")
        time.sleep(0.8)
        # When it is still running, Then no session of the database sits idle in a transaction
        with transaction(rt.factory, write=False) as session:
            idle = session.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
                    " AND now() - state_change > interval '0.4 seconds'"
                )
            ).scalar_one()
        assert idle == 0
    finally:
        worker.join(15)
    # And the step completed
    assert request_status(rt.factory, request_id) == "Completed"


def test_a_running_step_heartbeats_and_keeps_its_row_leased(rt: Runtime, sink: Sink) -> None:
    # Given a step whose HTTP call takes three seconds
    sink.delay["/effect"] = 3.0
    request_id, row_id = submit(rt, "Call")
    instance_id = ids.instance_id_for_request(request_id)
    with transaction(rt.factory) as session:
        session.execute(
            update(OutboxRow)
            .where(OutboxRow.id == row_id)
            .values(state="dispatched", lease_expires_at=utcnow())
        )
    worker = threading.Thread(target=runner.run_request, args=(rt, request_id, row_id))
    worker.start()
    try:
        wait_until(lambda: "/effect" in sink.arrived, timeout=10, what="the call")

        # Then, the step running long, its start is written while it runs: the instance row
        # exists and the client sees Processing
        def opened() -> WorkflowInstance | None:
            with transaction(rt.factory, write=False) as session:
                found = session.get(WorkflowInstance, instance_id)
                if found is not None:
                    session.expunge(found)
                return found

        instance = wait_until(opened, timeout=5, what="the start to be written")
        assert request_status(rt.factory, request_id) == "Processing"
        started = instance.heartbeat_at

        # When it runs, Then the instance's heartbeat moves and the row's lease is extended
        def beaten() -> bool:
            with transaction(rt.factory, write=False) as session:
                current = session.get(WorkflowInstance, instance_id)
                row = session.get(OutboxRow, row_id)
                assert current is not None
                assert row is not None
                return bool(
                    current.heartbeat_at
                    and started
                    and current.heartbeat_at > started
                    and row.lease_expires_at
                    and row.lease_expires_at > utcnow()
                )

        wait_until(beaten, timeout=10, what="a heartbeat")
    finally:
        worker.join(15)
    assert request_status(rt.factory, request_id) == "Completed"
