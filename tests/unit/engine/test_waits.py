"""Blocking activities suspend; their state survives JSON and resumes like an uninterrupted run."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from broker.engine.run.results import DispatchWorkflow, RunTask
from tests.unit.engine.conftest import NOW, Harness

WAITS = [
    "wait-event",
    "wait-signal",
    "wait-delay",
    "wait-timer",
    "wait-cron",
    "wait-start-at",
    "wait-run-task",
    "wait-dispatch",
]


@pytest.mark.parametrize("name", WAITS)
def test_blocking_activity_resumes_after_a_json_round_trip(harness: Harness, name: str) -> None:
    # Given a run suspended at the blocking activity
    first = harness.start(name, input={"keys": {"k": "1"}})
    assert (first.status, first.sub_status) == ("Running", "Suspended")
    assert first.write_lines == ("before",)
    [bookmark] = first.bookmarks
    # When the state goes through JSON (as the runtime stores it) and the bookmark is resumed
    stored = json.loads(json.dumps(first.state))
    resumed = harness.engine.resume(stored, bookmark_id=bookmark.id, input={"answer": 1})
    # Then it continues exactly like a resume of the in-memory state
    direct = harness.engine.resume(first.state, bookmark_id=bookmark.id, input={"answer": 1})
    assert resumed.write_lines == direct.write_lines == ("after",)
    assert resumed.output == direct.output == {"Got": "done"}
    assert resumed.state == direct.state
    assert (resumed.status, resumed.sub_status) == ("Finished", "Finished")


def test_event_bookmark_names_the_event_and_passes_the_payload_on(harness: Harness) -> None:
    first = harness.start("wait-event")
    [bookmark] = first.bookmarks
    assert (bookmark.name, dict(bookmark.payload)) == ("Elsa.Event", {"eventName": "approval"})
    assert len(bookmark.hash) == 64
    done = harness.engine.resume(first.state, bookmark_id=bookmark.id, input={"ok": True})
    assert done.state["variables"]["Got"] == {"ok": True}


def test_signal_received_waits_like_an_event(harness: Harness) -> None:
    [bookmark] = harness.start("wait-signal").bookmarks
    assert (bookmark.name, dict(bookmark.payload)) == ("Elsa.Event", {"eventName": "approval"})


def test_delay_bookmark_is_due_after_the_time_span(harness: Harness) -> None:
    [bookmark] = harness.start("wait-delay").bookmarks
    assert bookmark.due_at is not None
    assert (bookmark.due_at - NOW).total_seconds() == 300


def test_run_task_emits_a_command_bound_to_its_bookmark(harness: Harness) -> None:
    first = harness.start("wait-run-task")
    [command] = first.commands
    assert isinstance(command, RunTask)
    assert (command.task_name, command.payload) == ("tasks.echo", {"n": 1})
    assert command.bookmark_id == first.bookmarks[0].id


def test_dispatch_with_wait_chooses_the_child_id_deterministically(harness: Harness) -> None:
    first = harness.start("wait-dispatch", instance_id="parent")
    again = harness.start("wait-dispatch", instance_id="parent")
    [command] = first.commands
    assert isinstance(command, DispatchWorkflow)
    assert command.child_instance_id == again.commands[0].child_instance_id  # type: ignore[union-attr]
    # Elsa's child input and properties carry the parent's instance id; the properties say the
    # parent waits
    assert command.definition_id == "sequence"
    assert dict(command.input) == {"a": 1, "ParentInstanceId": "parent"}
    assert dict(command.properties) == {"ParentInstanceId": "parent", "WaitForCompletion": True}
    assert command.wait_for_completion
    assert command.bookmark_id == first.bookmarks[0].id


def test_resuming_an_unknown_bookmark_is_refused(harness: Harness) -> None:
    from broker.engine.run.errors import UnknownBookmark

    first = harness.start("wait-event")
    with pytest.raises(UnknownBookmark):
        harness.engine.resume(first.state, bookmark_id="nope")


def test_resuming_a_finished_instance_is_refused(harness: Harness) -> None:
    from broker.engine.run.errors import InstanceFinished

    # Given a suspended instance that was cancelled (finished) since
    first = harness.start("wait-event")
    cancelled = harness.engine.cancel(first.state)
    # When it is resumed at its old bookmark, Then the engine refuses, naming the instance
    with pytest.raises(InstanceFinished, match="has finished") as refused:
        harness.engine.resume(cancelled.state, bookmark_id=first.bookmarks[0].id)
    assert refused.value.instance_id == first.state["instanceId"]


def test_retrying_an_instance_that_only_waits_is_refused(harness: Harness) -> None:
    from broker.engine.run.errors import NothingToRetry

    # Given an instance suspended at a bookmark, with nothing faulted
    first = harness.start("wait-event")
    # When it is retried, Then the engine refuses
    with pytest.raises(NothingToRetry, match="has nothing to retry"):
        harness.engine.retry(first.state)


def test_cancel_ends_a_suspended_workflow(harness: Harness) -> None:
    first = harness.start("wait-event")
    cancelled = harness.engine.cancel(first.state)
    assert (cancelled.status, cancelled.sub_status) == ("Finished", "Cancelled")
    assert cancelled.bookmarks == ()


def test_a_cron_activity_waits_for_the_next_time_its_expression_names(harness: Harness) -> None:
    # Given the clock at 12:00:00 and "every 10 seconds" (seconds first, as Elsa)
    first = harness.start("wait-cron")
    [bookmark] = first.bookmarks
    # Then it waits for 12:00:10, the next mark strictly after now
    assert bookmark.name == "Elsa.Cron"
    assert bookmark.due_at == NOW + dt.timedelta(seconds=10)
    assert dict(bookmark.payload)["cronExpression"] == "*/10 * * * * *"
