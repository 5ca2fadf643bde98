"""Every fault writes a request dead letter, and replaying it runs the failed activity again.

In process, on SQLite and PostgreSQL: tasks are run by ``drain`` instead of a worker, so each test
chooses when the fixed cause (an allowlist) takes effect.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from broker.names import RUN_REQUEST
from broker.outbound.http_client import OutboundHttp
from broker.runtime import ids
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.persist import journal
from broker.runtime.steps import callbacks
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, OutboxRow, Request, WorkflowInstance
from broker.wiring.runtime import Runtime
from tests.support.runtime import (
    drain,
    event_types,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.sink import Sink
from tests.support.workflows import (
    activity,
    literal,
    parent,
    set_output,
    sink_workflow,
    workflow,
    write_workflow,
)


@pytest.fixture
def settings(database_url: str, tmp_path: Path, sink: Sink) -> Iterator[Settings]:
    dispose_engines()
    folder = tmp_path / "wf"
    write_workflow(folder, sink_workflow("call", "Call", sink.url("/effect")))
    write_workflow(
        folder,
        workflow(
            "refuse",
            [
                activity(
                    "fail",
                    "Elsa.Fault",
                    code=literal("LedgerRejected"),
                    message=literal("the ledger rejected the invoice"),
                ),
                set_output("out", "never", True),
            ],
            request_type="Refuse",
        ),
    )
    write_workflow(
        folder,
        workflow(
            "bad-input",
            [
                activity(
                    "say",
                    "Elsa.WriteLine",
                    text={
                        "typeName": "String",
                        "expression": {"type": "JavaScript", "value": "noSuchFunction()"},
                    },
                )
            ],
            request_type="BadInput",
        ),
    )
    write_workflow(folder, parent("failing-child"))
    write_workflow(
        folder,
        workflow("failing-child", [activity("boom", "Elsa.Fault", message=literal("child"))]),
    )
    # No allowlist: the sink on loopback is refused, as a private address is in production.
    env = runtime_env(
        tmp_path / "var", database_url=database_url, workflows=folder, BROKER_HTTP_ALLOWLIST=""
    )
    yield Settings.from_env(env)
    dispose_engines()


@pytest.fixture
def rt(settings: Settings, tmp_path: Path) -> Runtime:
    runtime: Runtime = in_process_runtime(settings, tmp_path / "locks")
    return runtime


def letters_of(rt: Runtime, request_id: str) -> list[DeadLetter]:
    with transaction(rt.factory, write=False) as session:
        found = session.scalars(
            select(DeadLetter)
            .where(DeadLetter.request_id == request_id)
            .order_by(DeadLetter.created_at)
        ).all()
        session.expunge_all()
        return list(found)


def replay(rt: Runtime, letter_id: str) -> None:
    with transaction(rt.factory) as session:
        dead_letter_admin.replay(session, letter_id, source="test")


def test_a_request_faulted_by_a_refused_url_has_a_dead_letter_and_its_replay_completes_it(
    rt: Runtime, sink: Sink
) -> None:
    # Given a request whose HTTP call goes to an address outside the allowlist
    request_id = submit_request(rt.factory, rt.registry, "Call")
    drain(rt)
    # Then it is Faulted at once (a refusal is not retried), nothing was sent
    assert request_status(rt.factory, request_id) == "Faulted"
    assert sink.calls == []
    # ... and a replayable request dead letter names the reason and the activity
    (letter,) = letters_of(rt, request_id)
    assert (letter.kind, letter.reason, letter.activity_id, letter.replayable) == (
        "request",
        "Faulted",
        "call",
        True,
    )
    assert "BROKER_HTTP_ALLOWLIST" in (letter.error or "")
    # When the operator allowlists the address and replays the dead letter
    rt._http = OutboundHttp(rt.settings, allowlist=["127.0.0.1:*"])
    replay(rt, letter.id)
    drain(rt)
    # Then the same record runs again from the failed call and completes
    assert request_status(rt.factory, request_id) == "Completed"
    assert len(sink.calls) == 1
    assert event_types(rt.factory, request_id)[-3:] == [
        "RequestFaulted",
        "RequestReplayed",
        "RequestCompleted",
    ]


def test_a_request_faulted_by_a_fault_activity_has_a_dead_letter_and_replay_runs_it_again(
    rt: Runtime,
) -> None:
    # Given a request whose workflow reaches a Fault activity
    request_id = submit_request(rt.factory, rt.registry, "Refuse")
    drain(rt)
    assert request_status(rt.factory, request_id) == "Faulted"
    (first,) = letters_of(rt, request_id)
    assert (first.reason, first.activity_id, first.error) == (
        "Faulted",
        "fail",
        "the ledger rejected the invoice",
    )
    # When an operator replays it
    replay(rt, first.id)
    drain(rt)
    # Then the Fault activity ran again (from where it failed, not from the start) and faulted
    # again, with a new dead letter; the first one is spent
    instance_id = ids.instance_id_for_request(request_id)
    with transaction(rt.factory, write=False) as session:
        runs = journal.attempts_of(session, instance_id, "fail")
    assert len(runs) == 2
    assert request_status(rt.factory, request_id) == "Faulted"
    spent, fresh = letters_of(rt, request_id)
    assert (spent.id, spent.replayable, fresh.replayable) == (first.id, False, True)
    assert event_types(rt.factory, request_id)[-3:] == [
        "RequestFaulted",
        "RequestReplayed",
        "RequestFaulted",
    ]


def test_a_failed_input_faults_with_elsas_wording_and_the_client_reads_the_cause(
    rt: Runtime,
) -> None:
    # Given a request whose WriteLine's text is a script that throws
    request_id = submit_request(rt.factory, rt.registry, "BadInput")
    drain(rt)
    # Then the request is Faulted, and its error and dead letter carry Elsa's wrapper and the
    # script's own error after it, so a client can act on it
    assert request_status(rt.factory, request_id) == "Faulted"
    with transaction(rt.factory, write=False) as session:
        detail = session.scalar(select(Request.error_detail).where(Request.id == request_id))
    assert detail is not None
    assert detail.startswith("Failed to evaluate activity input 'Text'")
    assert "noSuchFunction" in detail
    (letter,) = letters_of(rt, request_id)
    assert letter.error == detail


def test_a_faulted_child_has_its_own_dead_letter(rt: Runtime) -> None:
    # Given a request whose child workflow faults
    request_id = submit_request(rt.factory, rt.registry, "Parent")
    drain(rt)
    # Then the child's fault has a replayable dead letter naming the child and its activity
    parent_id = ids.instance_id_for_request(request_id)
    with transaction(rt.factory, write=False) as session:
        child = session.scalars(
            select(WorkflowInstance).where(WorkflowInstance.parent_id == parent_id)
        ).one()
        letter = session.scalars(select(DeadLetter).where(DeadLetter.instance_id == child.id)).one()
        assert (child.sub_status, letter.kind, letter.reason, letter.activity_id) == (
            "Faulted",
            "request",
            "Faulted",
            "boom",
        )
        assert letter.replayable


def test_a_remote_executor_that_reports_a_fault_leaves_a_replayable_dead_letter(
    rt: Runtime,
) -> None:
    # Given a request the remote executor reports Faulted
    request_id = submit_request(rt.factory, rt.registry, "Call")
    with transaction(rt.factory) as session:
        callbacks.complete_from_callback(session, request_id, "Faulted", None, "remote boom")
    assert request_status(rt.factory, request_id) == "Faulted"
    (letter,) = letters_of(rt, request_id)
    assert (letter.reason, letter.error) == ("Faulted", "remote boom")
    # When it is replayed, Then the request is dispatched again
    replay(rt, letter.id)
    assert request_status(rt.factory, request_id) == "Processing"
    with transaction(rt.factory, write=False) as session:
        row = session.get(OutboxRow, ids.derive("replay", letter.id))
        assert row is not None
        assert row.task_name == RUN_REQUEST
