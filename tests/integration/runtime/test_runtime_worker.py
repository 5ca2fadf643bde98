"""The runtime end to end with a real worker process, on both backends (see conftest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from broker.errors import Conflict, Unauthenticated
from broker.runtime import ids
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.bookmarks.queue import enqueue_stimulus
from broker.runtime.persist import journal
from broker.runtime.steps import callbacks
from broker.runtime.steps.callbacks import complete_from_callback
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import DeadLetter, Request, WorkflowInstance
from broker.wiring.runtime import make_publisher
from tests.integration.runtime.conftest import Stack
from tests.support.runtime import (
    event_types,
    prepare,
    request_status,
    runtime_env,
    submit_request,
    wait_for_status,
)
from tests.support.sink import Sink
from tests.support.stack.roster import running_worker
from tests.support.waits import wait_until
from tests.support.workflows import sink_workflow, write_workflow

pytestmark = pytest.mark.slow
WAIT = 60.0


def wait_status(stack: Stack, request_id: str, status: str) -> None:
    wait_for_status(stack.factory, request_id, status, tail=stack.worker.tail, timeout=WAIT)


def instance_of(stack: Stack, request_id: str) -> WorkflowInstance:
    with transaction(stack.factory, write=False) as session:
        found = session.get(WorkflowInstance, ids.instance_id_for_request(request_id))
        assert found is not None
        return found


def test_requests_complete_with_one_effect_each(stack: Stack) -> None:
    # Given five submissions published on the fast path
    request_ids = [
        submit_request(
            stack.factory, stack.registry, "SinkCall", payload={"n": n}, publisher=stack.publisher
        )
        for n in range(5)
    ]
    # When the worker runs them
    for request_id in request_ids:
        wait_status(stack, request_id, "Completed")
    # Then each went Queued -> Processing -> Completed with its audit trail and one effect
    for request_id in request_ids:
        assert event_types(stack.factory, request_id) == [
            "RequestSubmitted",
            "RequestProcessing",
            "RequestCompleted",
        ]
        instance = instance_of(stack, request_id)
        assert instance.sub_status == "Finished"
        assert instance.output == {"result": {"ok": True}}
    keys = stack.sink.keys("/effect")
    for request_id in request_ids:
        instance_id = ids.instance_id_for_request(request_id)
        assert len([k for k in keys if k.startswith(instance_id)]) == 1


def test_relay_publishes_rows_the_fast_path_never_sent(stack: Stack) -> None:
    # Given a committed request whose fast-path publish never happened (a crash after commit)
    request_id = submit_request(stack.factory, stack.registry, "SinkCall", publisher=None)
    # When the beat's relay runs
    # Then the request still completes
    wait_status(stack, request_id, "Completed")


def test_transient_failures_are_retried_until_the_call_succeeds(stack: Stack) -> None:
    # Given a sink that fails twice per key before it succeeds
    stack.sink.drop["/flaky"] = 2
    request_id = submit_request(
        stack.factory, stack.registry, "FlakyCall", publisher=stack.publisher
    )
    # When the worker runs and retries it
    wait_status(stack, request_id, "Completed")
    # Then the journal shows three attempts of the call, resumed at the failing activity
    with transaction(stack.factory, write=False) as session:
        attempts = journal.attempts_of(session, ids.instance_id_for_request(request_id), "call")
    assert attempts == [1, 2, 3]


def test_exhausted_retries_fault_the_request_and_replay_completes_it(stack: Stack) -> None:
    # Given a sink that always fails
    stack.sink.drop["/broken"] = -1
    request_id = submit_request(
        stack.factory, stack.registry, "BrokenCall", publisher=stack.publisher
    )
    # When the attempts run out
    wait_status(stack, request_id, "Faulted")
    # Then a replayable request dead letter names the failed activity
    with transaction(stack.factory, write=False) as session:
        letter = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).one()
        assert (letter.kind, letter.activity_id, letter.replayable) == ("request", "call", True)
        assert letter.attempts == 3
    # When the sink is fixed and an operator replays the dead letter
    stack.sink.drop["/broken"] = 0
    with transaction(stack.factory) as session:
        replayed = dead_letter_admin.replay(session, letter.id)
    stack.publisher.publish([replayed.new_id])
    # Then the same record completes, with the replay in its audit trail
    wait_status(stack, request_id, "Completed")
    assert event_types(stack.factory, request_id)[-3:] == [
        "RequestFaulted",
        "RequestReplayed",
        "RequestCompleted",
    ]
    # And the dead letter cannot be replayed twice
    with transaction(stack.factory) as session, pytest.raises(Conflict):
        dead_letter_admin.replay(session, letter.id)


def test_a_fault_activity_leaves_a_dead_letter_whose_replay_runs_it_again(stack: Stack) -> None:
    # Given a request whose workflow reaches a Fault activity, run by a real worker
    request_id = submit_request(stack.factory, stack.registry, "Refuse", publisher=stack.publisher)
    wait_status(stack, request_id, "Faulted")
    # Then a replayable request dead letter names the reason and the activity
    with transaction(stack.factory, write=False) as session:
        letter = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).one()
        assert (letter.kind, letter.reason, letter.activity_id, letter.replayable) == (
            "request",
            "Faulted",
            "fail",
            True,
        )
    # When an operator replays it
    with transaction(stack.factory) as session:
        replayed = dead_letter_admin.replay(session, letter.id)
    stack.publisher.publish([replayed.new_id])
    # Then the worker runs the Fault activity again, which faults the request again, with a
    # fresh dead letter
    wait_until(
        lambda: (
            event_types(stack.factory, request_id)[-2:] == ["RequestReplayed", "RequestFaulted"]
        ),
        timeout=WAIT,
        what="the replayed request to fault again",
    )
    with transaction(stack.factory, write=False) as session:
        runs = journal.attempts_of(session, ids.instance_id_for_request(request_id), "fail")
        letters = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).all()
    assert len(runs) == 2
    assert sorted(d.replayable for d in letters) == [False, True]


def test_an_event_resumes_a_suspended_request(stack: Stack) -> None:
    # Given a request waiting for the event "approval"
    request_id = submit_request(
        stack.factory, stack.registry, "Approval", publisher=stack.publisher
    )
    wait_until(
        lambda: _sub_status(stack, request_id) == "Suspended", timeout=WAIT, what="suspension"
    )
    assert request_status(stack.factory, request_id) == "Processing"
    # When the event arrives for its correlation id
    with transaction(stack.factory) as session:
        enqueue_stimulus(
            session,
            item_id=ids.new_id(),
            name="approval",
            payload={"by": "ops"},
            correlation_id=request_id,
            client_key="testclient",
        )
    # Then the workflow resumes and completes
    wait_status(stack, request_id, "Completed")
    with transaction(stack.factory, write=False) as session:
        assert session.get(Request, request_id).result == {"decision": "approved"}


def test_a_stimulus_that_arrives_before_the_suspension_is_kept(stack: Stack) -> None:
    # Given an event queued for a request before its workflow even started
    request_id = submit_request(stack.factory, stack.registry, "Approval", publisher=None)
    with transaction(stack.factory) as session:
        enqueue_stimulus(
            session,
            item_id=ids.new_id(),
            name="approval",
            payload=None,
            correlation_id=request_id,
            client_key="testclient",
        )
    # When the relay starts the workflow and it suspends on the event
    # Then the queued stimulus still resumes it
    wait_status(stack, request_id, "Completed")


def test_a_parent_waits_for_its_dispatched_child(stack: Stack) -> None:
    # Given a workflow that dispatches a child and waits for it
    request_id = submit_request(stack.factory, stack.registry, "Parent", publisher=stack.publisher)
    # When both run on the worker
    wait_status(stack, request_id, "Completed")
    # Then the child ran as its own instance, and the parent resumed after it
    parent_id = ids.instance_id_for_request(request_id)
    with transaction(stack.factory, write=False) as session:
        children = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.parent_id == parent_id)
        ).all()
        assert [(c.definition_id, c.sub_status) for c in children] == [("child", "Finished")]
        assert session.get(Request, request_id).result == {"parent": "done"}
    assert any(k.startswith(children[0].id) for k in stack.sink.keys("/child"))


def test_bulk_dispatch_waits_for_every_child(stack: Stack) -> None:
    # Given a workflow that dispatches three children and waits for all of them
    request_id = submit_request(stack.factory, stack.registry, "Bulk", publisher=stack.publisher)
    # When they all run
    wait_status(stack, request_id, "Completed")
    # Then three child instances finished, each chosen before dispatch (one sink key each)
    parent_id = ids.instance_id_for_request(request_id)
    with transaction(stack.factory, write=False) as session:
        children = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.parent_id == parent_id)
        ).all()
    assert sorted(c.sub_status for c in children) == ["Finished"] * 3
    keys = stack.sink.keys("/child")
    assert all(sum(k.startswith(c.id) for k in keys) == 1 for c in children)


def test_a_published_event_resumes_the_workflow_waiting_for_it(stack: Stack) -> None:
    # Given a workflow that publishes "ping" (correlated to itself) and then waits for "ping"
    request_id = submit_request(
        stack.factory, stack.registry, "SelfSignal", publisher=stack.publisher
    )
    # When the event goes through the outbox step and the bookmark queue
    wait_status(stack, request_id, "Completed")
    # Then the wait was resumed by it
    with transaction(stack.factory, write=False) as session:
        assert session.get(Request, request_id).result == {"signal": "received"}


def test_run_task_calls_a_listed_celery_task_and_resumes_with_its_result(stack: Stack) -> None:
    # Given a workflow that calls the Celery task "sample.double" with {"n": 21}
    request_id = submit_request(
        stack.factory, stack.registry, "TaskCall", publisher=stack.publisher
    )
    # When the worker runs the task and the bookmark queue resumes the workflow
    wait_status(stack, request_id, "Completed")
    # Then the task's return value reached the workflow
    with transaction(stack.factory, write=False) as session:
        assert session.get(Request, request_id).result == {"result": {"doubled": 42}}


def test_a_delay_is_resumed_by_its_timer(stack: Stack) -> None:
    request_id = submit_request(stack.factory, stack.registry, "Delayed", publisher=stack.publisher)
    wait_until(
        lambda: _sub_status(stack, request_id) == "Suspended", timeout=WAIT, what="suspension"
    )
    wait_status(stack, request_id, "Completed")


def test_remote_execution_waits_for_the_callback(stack: Stack) -> None:
    # Given a workflow whose executor is a remote Elsa server
    request_id = submit_request(stack.factory, stack.registry, "Remote", publisher=stack.publisher)
    # When the worker dispatches it
    wait_until(
        lambda: "RequestDispatched" in event_types(stack.factory, request_id),
        timeout=WAIT,
        what="dispatch",
    )
    # Then Elsa received the contract body and the request stays Processing
    body = next(b for b in stack.sink.bodies["/elsa"] if b["correlationId"] == request_id)
    assert body["definitionId"] == "remote"
    # with a token of this request's first dispatch, never the callback secret itself
    assert body["callbackToken"] == callbacks.token_for("test-secret", request_id, 1)
    assert "test-secret" not in json.dumps(body)
    assert body["callbackUrl"].endswith(f"/internal/requests/{request_id}/result")
    assert request_status(stack.factory, request_id) == "Processing"
    with transaction(stack.factory, write=False) as session:
        assert session.get(Request, request_id).remote_attempt == 1
    # When the callback reports completion, and then a late duplicate reports a fault
    with transaction(stack.factory) as session:
        complete_from_callback(
            session, request_id, "Completed", {"remote": True}, None, attempt=1, webhook_id="m1"
        )
    with transaction(stack.factory) as session, pytest.raises(Conflict):
        complete_from_callback(session, request_id, "Faulted", None, "late")
    # Then the first result stands
    with transaction(stack.factory, write=False) as session:
        record = session.get(Request, request_id)
        assert (record.status, record.result) == ("Completed", {"remote": True})


def test_a_repeated_remote_dispatch_gets_a_new_token_and_the_old_one_stops_working(
    stack: Stack,
) -> None:
    # Given a remote Elsa server that answers the next dispatch with 503
    with stack.sink.lock:
        stack.sink.fail["/elsa"] = stack.sink.attempts[("/elsa", None)] + 1
    try:
        request_id = submit_request(
            stack.factory, stack.registry, "Remote", publisher=stack.publisher
        )
        # When the worker retries the dispatch until it is accepted
        wait_until(
            lambda: "RequestDispatched" in event_types(stack.factory, request_id),
            timeout=WAIT,
            what="dispatch after a retry",
        )
    finally:
        stack.sink.fail.pop("/elsa", None)
    # Then each POST carried the token of its own attempt
    tokens = [
        b["callbackToken"] for b in stack.sink.bodies["/elsa"] if b["correlationId"] == request_id
    ]
    assert tokens == [callbacks.token_for("test-secret", request_id, n) for n in (1, 2)]
    # And a callback of the first attempt is refused, while the current one's finishes it
    with transaction(stack.factory) as session, pytest.raises(Unauthenticated):
        complete_from_callback(session, request_id, "Completed", 1, None, attempt=1, webhook_id="a")
    assert request_status(stack.factory, request_id) == "Processing"
    with transaction(stack.factory) as session:
        complete_from_callback(session, request_id, "Completed", 2, None, attempt=2, webhook_id="b")
    assert request_status(stack.factory, request_id) == "Completed"


def _sub_status(stack: Stack, request_id: str) -> str | None:
    with transaction(stack.factory, write=False) as session:
        return session.scalar(
            select(WorkflowInstance.sub_status).where(
                WorkflowInstance.id == ids.instance_id_for_request(request_id)
            )
        )


def test_a_request_type_added_while_the_worker_runs_is_served(tmp_path: Path) -> None:
    # Given a worker watching an empty workflow folder
    var_dir, folder = tmp_path / "var", tmp_path / "wf"
    folder.mkdir()
    env = runtime_env(
        var_dir,
        database_url=f"sqlite:///{var_dir / 'broker.db'}",
        workflows=folder,
        BROKER_WATCH_WORKFLOWS="true",
    )
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    with Sink() as sink, running_worker(env, tmp_path / "worker.log") as worker:
        wait_until(lambda: "ready" in worker.tail(), timeout=WAIT, what="the worker")
        # When a workflow with its own queue is saved into the folder
        write_workflow(folder, sink_workflow("late", "LateType", sink.url("/late")))
        registry.load()
        wait_until(
            lambda: "starts consuming queue broker.latetype" in worker.tail(200),
            timeout=WAIT,
            what="the worker to pick up the new queue",
        )
        request_id = submit_request(
            factory, registry, "LateType", publisher=make_publisher(settings, factory)
        )
        # Then its requests are served without a restart
        wait_until(
            lambda: request_status(factory, request_id) == "Completed",
            timeout=WAIT,
            what="completion",
        )
    registry.stop()
