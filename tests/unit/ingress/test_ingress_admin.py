"""The admin API in process: scopes, dead letters of every kind, instances, runtime pause."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.store.models import (
    ActivityExecution,
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    Request,
    RequestEvent,
    WorkflowInstance,
)
from tests.support.doubles import RecordingPublisher

ClientAs = Callable[[str], FlaskClient]


@pytest.fixture
def seeded(session_factory: sessionmaker[Session]) -> sessionmaker[Session]:
    with session_factory.begin() as session:
        session.add(
            Request(
                id="r-1",
                client_id="ClientA",
                client_key="clienta",
                request_type="OpenType",
                request_type_key="opentype",
                keys={},
                status="Faulted",
                error_detail="boom",
                instance_id="i-1",
            )
        )
        session.add(
            WorkflowInstance(
                id="i-1",
                definition_id="open-type",
                definition_version_id="v1",
                version=1,
                request_id="r-1",
                status="Finished",
                sub_status="Faulted",
            )
        )
        session.add(
            WorkflowInstance(
                id="i-2",
                definition_id="other",
                definition_version_id="v2",
                version=1,
                status="Running",
                sub_status="Suspended",
            )
        )
        session.add(
            ActivityExecution(
                instance_id="i-1",
                sequence=1,
                activity_id="a",
                activity_type="Elsa.WriteLine",
                event_name="Faulted",
                payload={"input": "secret"},
            )
        )
        session.add(
            DeadLetter(
                id="b-1",
                kind="bookmark",
                reason="Expired",
                instance_id="i-2",
                client_key="clienta",
                name="Approved",
                data={
                    "name": "Approved",
                    "correlationId": "r-9",
                    "payload": {"password": "hunter2"},
                },
            )
        )
        session.add(
            DeadLetter(
                id="q-1",
                kind="request",
                reason="Exhausted",
                request_id="r-1",
                instance_id="i-1",
                data={"input": "secret"},
            )
        )
        session.add(
            DeadLetter(
                id="o-1",
                kind="outbox",
                reason="Undeliverable",
                data={"taskName": "broker.run_request", "args": {"id": "x"}},
            )
        )
    return session_factory


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("GET", "/admin/bookmark-queue/dead-letters", "read:bookmark-queue:dead-letters"),
        (
            "POST",
            "/admin/bookmark-queue/dead-letters/b-1/replay",
            "replay:bookmark-queue:dead-letters",
        ),
        ("DELETE", "/admin/bookmark-queue/dead-letters/b-1", "delete:bookmark-queue:dead-letters"),
        ("GET", "/admin/dead-letters", "read:dead-letters"),
        ("POST", "/admin/dead-letters/q-1/replay", "replay:dead-letters"),
        ("GET", "/admin/workflow-instances", "read:workflow-instances"),
        ("POST", "/admin/workflow-instances/i-2/cancel", "cancel:workflow-instances"),
        ("GET", "/admin/workflow-runtime/status", "read:workflow-runtime"),
        ("POST", "/admin/workflow-runtime/pause", "manage:workflow-runtime"),
    ],
)
def test_admin_endpoint_without_its_scope_is_403_naming_it(
    client_as: ClientAs, seeded: sessionmaker[Session], method: str, path: str, scope: str
) -> None:
    response = client_as("ClientA").open(path, method=method)
    assert response.status_code == 403
    assert response.get_json()["scope"] == scope
    assert scope in response.get_json()["error"]


def test_dead_letter_views_never_show_data(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    admin = client_as("Admin")
    listed = admin.get("/admin/bookmark-queue/dead-letters").get_data(as_text=True)
    one = admin.get("/admin/dead-letters/q-1").get_json()
    assert "hunter2" not in listed
    assert "data" not in one
    assert "secret" not in str(one)
    assert one["kind"] == "request"


def test_bookmark_dead_letters_page_and_filter(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    admin = client_as("Admin")
    page = admin.get("/admin/bookmark-queue/dead-letters?page=0&pageSize=10").get_json()
    assert (page["totalCount"], [i["id"] for i in page["items"]]) == (1, ["b-1"])
    other = admin.get("/admin/bookmark-queue/dead-letters?workflowInstanceId=nope").get_json()
    assert other["items"] == []
    # A request dead letter is not a bookmark dead letter
    assert admin.get("/admin/bookmark-queue/dead-letters/q-1").status_code == 404


def test_bookmark_replay_enqueues_a_new_item_once(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    admin = client_as("Admin")
    # When an operator replays the dead letter
    first = admin.post("/admin/bookmark-queue/dead-letters/b-1/replay")
    second = admin.post("/admin/bookmark-queue/dead-letters/b-1/replay")
    # Then one new queue item carries the stimulus, and the repeat is refused
    assert first.status_code == 200
    body = first.get_json()
    assert (body["replayed"], body["reason"]) == (True, "Expired")
    assert second.status_code == 409
    with seeded() as session:
        item = session.get(BookmarkQueueItem, body["queueItemId"])
        letter = session.get(DeadLetter, "b-1")
    assert item is not None
    assert (item.name, item.correlation_id, item.client_key) == ("Approved", "r-9", "clienta")
    assert letter is not None
    assert not letter.replayable


def test_bookmark_dead_letter_delete_is_204_then_404(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    admin = client_as("Admin")
    assert admin.delete("/admin/bookmark-queue/dead-letters/b-1").status_code == 204
    assert admin.delete("/admin/bookmark-queue/dead-letters/b-1").status_code == 404


def test_request_dead_letter_replay_reopens_the_faulted_request(
    client_as: ClientAs, seeded: sessionmaker[Session], publisher: RecordingPublisher
) -> None:
    response = client_as("Admin").post("/admin/dead-letters/q-1/replay")
    assert response.status_code == 200
    outbox_id = response.get_json()["queueItemId"]
    with seeded() as session:
        record = session.get(Request, "r-1")
        events = session.scalars(select(RequestEvent.event_type)).all()
        row = session.get(OutboxRow, outbox_id)
    assert record is not None
    assert record.status == "Processing"
    assert events == ["RequestReplayed"]
    assert row is not None
    assert row.state == "pending"
    assert publisher.published == [outbox_id]


def test_dead_letters_filter_by_kind_and_refuse_an_unknown_kind(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    admin = client_as("Admin")
    outbox = admin.get("/admin/dead-letters?kind=outbox").get_json()["items"]
    both = admin.get("/admin/dead-letters").get_json()["items"]
    assert [i["id"] for i in outbox] == ["o-1"]
    assert {i["id"] for i in both} == {"o-1", "q-1"}
    assert admin.get("/admin/dead-letters?kind=bookmark").status_code == 400


def test_instances_list_get_journal_and_cancel(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    admin = client_as("Admin")
    suspended = admin.get("/admin/workflow-instances?status=Suspended").get_json()
    assert [i["id"] for i in suspended["items"]] == ["i-2"]
    by_definition = admin.get("/admin/workflow-instances?definitionId=open-type").get_json()
    assert [i["id"] for i in by_definition["items"]] == ["i-1"]
    assert admin.get("/admin/workflow-instances/i-1").get_json()["subStatus"] == "Faulted"
    journal = admin.get("/admin/workflow-instances/i-1/journal").get_json()["items"]
    assert [(j["activityId"], j["eventName"]) for j in journal] == [("a", "Faulted")]
    assert "secret" not in str(journal)
    cancelled = admin.post("/admin/workflow-instances/i-2/cancel")
    assert cancelled.status_code == 202
    assert cancelled.get_json()["subStatus"] == "Cancelled"
    assert admin.post("/admin/workflow-instances/i-2/cancel").status_code == 409
    assert admin.get("/admin/workflow-instances/none").status_code == 404


def test_pause_blocks_submissions_until_resume(client_as: ClientAs) -> None:
    admin = client_as("Admin")
    assert admin.get("/admin/workflow-runtime/status").get_json()["paused"] is False
    assert admin.post("/admin/workflow-runtime/pause").get_json()["paused"] is True
    paused = admin.post("/requests", json={"requestType": "OpenType"})
    assert paused.status_code == 503
    assert paused.get_json()["code"] == "runtime_paused"
    assert admin.post("/admin/workflow-runtime/resume").get_json()["paused"] is False
    assert admin.post("/requests", json={"requestType": "OpenType"}).status_code == 202


def test_admin_actions_are_in_the_operator_audit(
    client_as: ClientAs, seeded: sessionmaker[Session]
) -> None:
    # When an admin client cancels an instance, pauses and resumes the runtime
    admin = client_as("Admin")
    assert admin.post("/admin/workflow-instances/i-2/cancel").status_code == 202
    admin.post("/admin/workflow-runtime/pause")
    admin.post("/admin/workflow-runtime/resume")
    # Then each is in the operator audit, by that client, newest first
    from broker.store import operator_actions

    with seeded() as session:
        items, _ = operator_actions.list_page(session, page=0, page_size=10)
    assert [(i["actor"], i["action"], i["target"]) for i in items] == [
        ("client:Admin", "runtime.resume", "workflow runtime"),
        ("client:Admin", "runtime.pause", "workflow runtime"),
        ("client:Admin", "instance.cancel", "i-2"),
    ]
