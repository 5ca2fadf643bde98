"""Long-running workflows over the real stack: events, timers, pause, cancellation, dead letters.

Every test talks to the public listener over mutual TLS and lets the real worker and beat do the
work; the database is read only to look at timestamps and rows a client cannot see.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import delete, select

from broker.runtime import ids
from broker.store.db import transaction
from broker.store.models import (
    Bookmark,
    BookmarkQueueItem,
    OutboxRow,
    Request,
    Timer,
    WorkflowInstance,
)
from tests.e2e.live import DEV, OTHER, READER, LiveStack, running_stack

pytestmark = pytest.mark.slow

#: a short bookmark-queue TTL for the dead-letter tests (their own stack)
SHORT_TTL = "2"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with running_stack(tmp_path_factory.mktemp("live")) as stack:
        yield stack


@pytest.fixture(scope="module")
def short_ttl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with running_stack(
        tmp_path_factory.mktemp("live-ttl"), BROKER_BOOKMARK_QUEUE_TTL=SHORT_TTL
    ) as stack:
        yield stack


def instance_id(request_id: str) -> str:
    return ids.instance_id_for_request(request_id)


def queue_item(stack: LiveStack, item_id: str) -> BookmarkQueueItem | None:
    with transaction(stack.factory, write=False) as session:
        item = session.get(BookmarkQueueItem, item_id)
        if item is not None:
            session.expunge(item)
        return item


def seconds(later: dt.datetime, earlier: dt.datetime) -> float:
    return (later - earlier).total_seconds()


# Events -------------------------------------------------------------------------------------------


def test_small_invoice_completes_at_once_with_one_ledger_post(live: LiveStack) -> None:
    # Given a small invoice
    keys = {"InvoiceNumber": "INV-S1", "VendorCode": "V-1"}
    # When it is submitted
    request_id = live.submit("InvoiceProcess", keys, {"amount": 250})
    # Then it completes without waiting, auto-approved, after one post to the ledger
    view = live.wait_status(request_id, "Completed")
    assert view["result"] == {"status": "Completed", "decision": "auto-approved"}
    assert view["workflow"]["subStatus"] == "Finished"
    posts = [body for body in live.sink.bodies["/ledger"] if body["invoiceNumber"] == "INV-S1"]
    assert posts == [{"invoiceNumber": "INV-S1", "vendorCode": "V-1", "amount": 250}]


def test_large_invoice_waits_for_the_approval_event_and_carries_the_decision(
    live: LiveStack,
) -> None:
    # Given a large invoice, which waits for a person's approval
    keys = {"InvoiceNumber": "INV-L1", "VendorCode": "V-2"}
    request_id = live.submit("InvoiceProcess", keys, {"amount": 50_000})
    view = live.wait_suspended(request_id)
    assert view["result"] is None
    # When the approval event names its correlation id
    response = live.event("approval", request_id, {"decision": "approved-by-cfo"})
    assert response.status == 202
    assert response.body["queueItemId"]
    # Then it completes with the decision the event carried, and never posted to the ledger
    view = live.wait_status(request_id, "Completed")
    assert view["result"] == {"status": "Completed", "decision": "approved-by-cfo"}
    assert not [b for b in live.sink.bodies["/ledger"] if b["invoiceNumber"] == "INV-L1"]


def test_event_sent_before_the_workflow_reaches_its_wait_is_not_lost(live: LiveStack) -> None:
    # Given a workflow that waits for "go" only after a one-second delay
    request_id = live.submit("LateWait")
    # When "go" arrives at once, before there is any bookmark to match
    response = live.event("go", request_id)
    assert response.status == 202
    # Then the stimulus stays queued and resumes the workflow once it suspends on the wait
    view = live.wait_status(request_id, "Completed", timeout=30)
    assert view["result"] == {"result": "went"}
    with transaction(live.factory, write=False) as session:
        request = session.get(Request, request_id)
        timer = session.scalars(
            select(Timer).where(Timer.instance_id == instance_id(request_id))
        ).one()
        assert request is not None
        assert request.completed_at is not None
        # It completed after the delay, so the event did wait in the queue.
        assert request.completed_at >= timer.due_at


def test_event_for_another_clients_correlation_id_resumes_nothing(live: LiveStack) -> None:
    # Given DevClient's request waiting for "approval"
    request_id = live.submit("Approval")
    live.wait_suspended(request_id)
    # When ClientB sends "approval" naming DevClient's correlation id
    response = live.event("approval", request_id, {"decision": "forged"}, client=OTHER)
    assert response.status == 202
    item_id = response.body["queueItemId"]
    # Then the queue job looks at it more than once and matches nothing
    interval = float(live.env["BROKER_BOOKMARK_QUEUE_INTERVAL"])

    def looked_at_twice() -> bool:
        item = queue_item(live, item_id)
        assert item is not None
        return seconds(item.next_attempt_at, item.created_at) > 2 * interval

    live.wait_for(looked_at_twice, timeout=15, what="the queue to visit the item")
    item = queue_item(live, item_id)
    assert item is not None
    assert item.delivery_attempts == 0
    view = live.request(request_id)
    assert view["status"] == "Processing"
    assert view["workflow"]["subStatus"] == "Suspended"
    # And ClientB cannot read DevClient's request either
    assert live.call(OTHER, "GET", f"/requests/{request_id}").status == 403
    # When the owner sends the event
    live.event("approval", request_id, {"decision": "real"})
    # Then it resumes, and the forged stimulus is still unmatched
    live.wait_status(request_id, "Completed")
    item = queue_item(live, item_id)
    assert item is not None
    assert item.delivery_attempts == 0


# Timers -------------------------------------------------------------------------------------------


def timer_of(stack: LiveStack, request_id: str) -> Timer:
    with transaction(stack.factory, write=False) as session:
        timer = session.scalars(
            select(Timer).where(Timer.instance_id == instance_id(request_id))
        ).one()
        session.expunge(timer)
        return timer


def instance_row(stack: LiveStack, request_id: str) -> WorkflowInstance:
    with transaction(stack.factory, write=False) as session:
        instance = session.get(WorkflowInstance, instance_id(request_id))
        assert instance is not None
        session.expunge(instance)
        return instance


def request_row(stack: LiveStack, request_id: str) -> Request:
    with transaction(stack.factory, write=False) as session:
        request = session.get(Request, request_id)
        assert request is not None
        session.expunge(request)
        return request


def test_delay_of_two_seconds_fires_after_its_due_time(live: LiveStack) -> None:
    # Given a workflow that delays for two seconds
    request_id = live.submit("Delayed")
    # When it runs to its end
    view = live.wait_status(request_id, "Completed", timeout=30)
    assert view["result"] == {"result": "later"}
    # Then the timer was due two seconds after the step that reached the Delay started, fired
    # once at or after that, and the request completed after it (how soon is a benchmark's
    # business, not a test's: a loaded machine may take longer)
    timer, request = timer_of(live, request_id), request_row(live, request_id)
    started = instance_row(live, request_id).created_at
    assert timer.fired_at is not None
    assert request.completed_at is not None
    assert seconds(timer.due_at, started) >= 1.9
    assert timer.fired_at >= timer.due_at
    assert request.completed_at >= timer.fired_at
    assert seconds(request.completed_at, request.submitted_at) >= 2.0


def test_delay_fires_when_worker_and_beat_were_restarted_in_between(live: LiveStack) -> None:
    # Given a request suspended on its two-second delay
    request_id = live.submit("Delayed")
    live.wait_suspended(request_id)
    timer = timer_of(live, request_id)
    assert timer.fired_at is None
    # When the worker and the beat are stopped and started again before the timer is due
    live.worker.stop()
    for index in range(1, live.beats + 1):
        live.beat(index).stop()
    live.start_worker()
    for index in range(1, live.beats + 1):
        live.start_beat(index)
    # Then the timer row survived and fires once, not before it was due, and the request
    # completes after it (the timer cannot fire while no beat runs)
    live.wait_status(request_id, "Completed", timeout=30)
    fired, request = timer_of(live, request_id), request_row(live, request_id)
    assert fired.id == timer.id
    assert fired.fired_at is not None
    assert request.completed_at is not None
    assert fired.fired_at >= fired.due_at
    assert request.completed_at >= fired.fired_at
    assert seconds(request.completed_at, request.submitted_at) >= 2.0


# Pause and resume ---------------------------------------------------------------------------------


def test_pause_refuses_new_requests_holds_queued_work_and_resume_completes_it(
    live: LiveStack,
) -> None:
    # Given a request waiting on a timer and another waiting on an event
    delayed = live.submit("Delayed")
    approval = live.submit("Approval")
    live.wait_suspended(delayed)
    live.wait_suspended(approval)
    try:
        # When an operator pauses the runtime
        paused = live.call(DEV, "POST", "/admin/workflow-runtime/pause")
        assert paused.status == 200
        assert paused.body["paused"] is True
        # Then new requests are refused with 503 and Retry-After
        refused = live.call(DEV, "POST", "/requests", {"requestType": "Approval", "keys": {}})
        assert refused.status == 503
        assert refused.headers.get("Retry-After")
        # And stimuli still queue, but the work they cause is held
        assert live.event("approval", approval).status == 202
        live.wait_for(
            lambda: timer_of(live, delayed).fired_at is not None,
            timeout=10,
            what="the timer to fire",
        )

        def held() -> bool:
            with transaction(live.factory, write=False) as session:
                rows = session.scalars(
                    select(OutboxRow).where(
                        OutboxRow.instance_id.in_([instance_id(delayed), instance_id(approval)]),
                        OutboxRow.task_name == "broker.resume_instance",
                    )
                ).all()
                return len(rows) == 2 and all(r.state == "pending" for r in rows)

        live.wait_for(held, timeout=10, what="both resumes to be held back")
        status = live.call(DEV, "GET", "/admin/workflow-runtime/status").body
        assert status["paused"] is True
        assert status["pending"] >= 2
        drained = live.wait_for(
            lambda: live.call(DEV, "GET", "/admin/workflow-runtime/status").body["drained"],
            timeout=10,
            what="the runtime to drain",
        )
        assert drained is True
        # Several relay runs later nothing has run
        time.sleep(5 * float(live.env["BROKER_OUTBOX_RELAY_INTERVAL"]))
        for request_id in (delayed, approval):
            assert live.request(request_id)["status"] == "Processing"
    finally:
        # When the operator resumes
        resumed = live.call(DEV, "POST", "/admin/workflow-runtime/resume")
    assert resumed.status == 200
    assert resumed.body["paused"] is False
    # Then the held work runs and new requests are accepted again
    live.wait_status(delayed, "Completed")
    live.wait_status(approval, "Completed")
    assert live.submit("SinkCall")


def test_pause_needs_the_manage_scope(live: LiveStack) -> None:
    # Given clients without manage:workflow-runtime
    for client in (OTHER, READER):
        # When they try to pause
        response = live.call(client, "POST", "/admin/workflow-runtime/pause")
        # Then they are refused and the runtime keeps running
        assert response.status == 403
    assert live.call(READER, "GET", "/admin/workflow-runtime/status").body["paused"] is False


# Cancellation -------------------------------------------------------------------------------------


def children_of(stack: LiveStack, parent_id: str) -> list[WorkflowInstance]:
    with transaction(stack.factory, write=False) as session:
        rows = list(
            session.scalars(select(WorkflowInstance).where(WorkflowInstance.parent_id == parent_id))
        )
        session.expunge_all()
        return rows


def test_cancel_of_a_parent_cancels_its_waiting_child(live: LiveStack) -> None:
    # Given a parent waiting for a child that waits for an event
    request_id = live.submit("Parent")
    live.wait_suspended(request_id)
    parent_id = instance_id(request_id)
    children = live.wait_for(
        lambda: [c for c in children_of(live, parent_id) if c.sub_status == "Suspended"],
        timeout=20,
        what="the child to suspend",
    )
    child = children[0]
    # When the client cancels the request
    response = live.call(DEV, "POST", f"/requests/{request_id}/cancel")
    # Then the request, the parent and the child are Cancelled and their bookmarks are gone
    assert response.status == 202
    assert response.body["status"] == "Cancelled"
    view = live.request(request_id)
    assert view["status"] == "Cancelled"
    assert view["workflow"]["subStatus"] == "Cancelled"
    child_view = live.call(DEV, "GET", f"/admin/workflow-instances/{child.id}").body
    assert child_view["status"] == "Finished"
    assert child_view["subStatus"] == "Cancelled"
    with transaction(live.factory, write=False) as session:
        left = session.scalars(
            select(Bookmark).where(Bookmark.instance_id.in_([parent_id, child.id]))
        ).all()
        assert left == []
    events = live.call(DEV, "GET", f"/requests/{request_id}/events").body
    assert [e["eventType"] for e in events].count("RequestCancelled") == 1
    # And the child's event no longer resumes it: its step never runs
    live.event("child-go", child.correlation_id or request_id)
    time.sleep(5 * float(live.env["BROKER_BOOKMARK_QUEUE_INTERVAL"]))
    assert live.sink.bodies["/child"] == []
    # And a second cancel conflicts, as does another client's
    assert live.call(DEV, "POST", f"/requests/{request_id}/cancel").status == 409
    assert live.call(OTHER, "POST", f"/requests/{request_id}/cancel").status == 403


# Dead letters (a stack with a two-second bookmark-queue TTL) -------------------------------------


def bookmark_letters(stack: LiveStack, **query: str) -> list[dict[str, Any]]:
    suffix = "&".join(f"{k}={v}" for k, v in query.items())
    response = stack.call(DEV, "GET", f"/admin/bookmark-queue/dead-letters?{suffix}")
    assert response.status == 200, response
    return list(response.body["items"])


def letter_for(stack: LiveStack, source_id: str, *, timeout: float = 20) -> dict[str, Any]:
    return dict(
        stack.wait_for(
            lambda: next((d for d in bookmark_letters(stack) if d["sourceId"] == source_id), None),
            timeout=timeout,
            what=f"a dead letter for queue item {source_id}",
        )
    )


def test_unmatched_event_expires_into_a_dead_letter_that_replays_once(short_ttl: LiveStack) -> None:
    stack = short_ttl
    # Given a request waiting for "first", and a "second" event sent too early
    request_id = stack.submit("TwoStep")
    stack.wait_suspended(request_id)
    early = stack.event("second", request_id, {"secret": "do-not-show"})
    item_id = early.body["queueItemId"]
    # When nothing matches it within the TTL
    letter = letter_for(stack, item_id)
    # Then it became an Expired dead letter, and the item left the queue
    assert letter["reason"] == "Expired"
    assert letter["replayable"] is True
    assert queue_item(stack, item_id) is None
    # When the workflow moves on to wait for "second" and an operator replays the letter
    stack.event("first", request_id)
    stack.wait_request(
        request_id,
        lambda v: (
            v["workflow"]["subStatus"] == "Suspended" and _waits_for(stack, request_id, "second")
        ),
        what="waiting for second",
    )
    replayed = stack.call(DEV, "POST", f"/admin/bookmark-queue/dead-letters/{letter['id']}/replay")
    # Then a new queue item resumes it, and the letter is no longer replayable
    assert replayed.status == 200
    assert replayed.body["replayed"] is True
    assert replayed.body["queueItemId"] != item_id
    view = stack.wait_status(request_id, "Completed")
    assert view["result"] == {"result": "both"}
    again = stack.call(DEV, "POST", f"/admin/bookmark-queue/dead-letters/{letter['id']}/replay")
    assert again.status == 409
    shown = stack.call(DEV, "GET", f"/admin/bookmark-queue/dead-letters/{letter['id']}")
    assert shown.body["replayable"] is False
    assert shown.body["replayedAt"]


def _waits_for(stack: LiveStack, request_id: str, event: str) -> bool:
    with transaction(stack.factory, write=False) as session:
        bookmarks = session.scalars(
            select(Bookmark).where(Bookmark.instance_id == instance_id(request_id))
        ).all()
        return any((b.payload or {}).get("eventName") == event for b in bookmarks)


def test_failing_stimulus_is_dead_lettered_after_max_attempts_and_can_be_deleted(
    short_ttl: LiveStack,
) -> None:
    stack = short_ttl
    # Given a waiting request whose instance row was lost (a damaged store)
    request_id = stack.submit("Approval")
    stack.wait_suspended(request_id)
    with transaction(stack.factory) as session:
        session.execute(
            delete(WorkflowInstance).where(WorkflowInstance.id == instance_id(request_id))
        )
    # When its event arrives, matching a bookmark whose instance does not exist
    item_id = stack.event("approval", request_id).body["queueItemId"]
    # Then processing fails three times and the item becomes a Failed dead letter
    letter = letter_for(stack, item_id)
    assert letter["reason"] == "Failed"
    assert letter["attempts"] == int(
        stack.env.get("BROKER_BOOKMARK_QUEUE_MAX_DELIVERY_ATTEMPTS", "3")
    )
    assert "does not exist" in letter["error"]
    # When an operator deletes it
    path = f"/admin/bookmark-queue/dead-letters/{letter['id']}"
    deleted = stack.call(DEV, "DELETE", path)
    # Then it is gone
    assert deleted.status == 204
    assert stack.call(DEV, "GET", path).status == 404
    assert stack.call(DEV, "DELETE", path).status == 404
    assert stack.call(DEV, "POST", f"{path}/replay").status == 404


def test_dead_letter_admin_checks_scopes_and_hides_payloads(short_ttl: LiveStack) -> None:
    stack = short_ttl
    # Given an expired stimulus carrying a secret
    request_id = stack.submit("Approval")
    stack.wait_suspended(request_id)
    item_id = stack.event("no-such-wait", request_id, {"token": "s3cr3t-value"}).body["queueItemId"]
    letter = letter_for(stack, item_id)
    path = f"/admin/bookmark-queue/dead-letters/{letter['id']}"
    # When clients with and without scopes look at it
    listing = stack.call(READER, "GET", "/admin/bookmark-queue/dead-letters?pageSize=500")
    shown = stack.call(READER, "GET", path)
    # Then a reader sees it without its payload, newest first
    assert listing.status == 200
    assert shown.status == 200
    assert "s3cr3t-value" not in listing.text
    assert "s3cr3t-value" not in shown.text
    assert not {"payload", "data", "options", "input"} & set(shown.body)
    created = [item["createdAt"] for item in listing.body["items"]]
    assert created == sorted(created, reverse=True)
    # And the instance filter narrows the list
    assert bookmark_letters(stack, workflowInstanceId="no-such-instance") == []
    # And a reader may neither replay nor delete, a client without scopes not even look
    assert stack.call(READER, "POST", f"{path}/replay").status == 403
    assert stack.call(READER, "DELETE", path).status == 403
    assert stack.call(OTHER, "GET", "/admin/bookmark-queue/dead-letters").status == 403
    assert stack.call(OTHER, "GET", path).status == 403
    assert stack.call(DEV, "GET", path).body["replayable"] is True
    # And paging splits the list
    first = stack.call(DEV, "GET", "/admin/bookmark-queue/dead-letters?page=0&pageSize=1").body
    assert len(first["items"]) == 1
    assert first["totalCount"] >= 1


def test_faulted_request_dead_letter_replays_the_same_record(short_ttl: LiveStack) -> None:
    stack = short_ttl
    # Given a request whose downstream keeps failing until its retries run out
    stack.sink.drop["/broken"] = -1
    request_id = stack.submit("Broken")
    stack.wait_status(request_id, "Faulted")
    listing = stack.call(DEV, "GET", "/admin/dead-letters?kind=request&pageSize=500").body
    letter = next(d for d in listing["items"] if d["requestId"] == request_id)
    assert letter["kind"] == "request"
    assert letter["replayable"] is True
    # When the downstream recovers and an operator replays the letter (a reader may not)
    stack.sink.drop["/broken"] = 0
    path = f"/admin/dead-letters/{letter['id']}"
    assert stack.call(READER, "POST", f"{path}/replay").status == 403
    replayed = stack.call(DEV, "POST", f"{path}/replay")
    # Then the same request goes back to Processing and completes; a second replay conflicts
    assert replayed.status == 200
    assert replayed.body["replayed"] is True
    view = stack.wait_status(request_id, "Completed")
    assert view["result"] == {"result": {"ok": True}}
    events = [e["eventType"] for e in stack.call(DEV, "GET", f"/requests/{request_id}/events").body]
    assert events.count("RequestReplayed") == 1
    assert events[-1] == "RequestCompleted"
    assert stack.call(DEV, "POST", f"{path}/replay").status == 409
    assert stack.call(OTHER, "GET", path).status == 403
