"""Workflow instances, activity executions and runtime administration in the Elsa API."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.engine.run.results import JournalEntry
from broker.registry import WorkflowRegistry
from broker.runtime.persist import journal
from broker.store.models import ActivityExecution, Bookmark, DeadLetter, WorkflowInstance

Client = Callable[[str | None], FlaskClient]
T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def console_database(database_url: str) -> str:
    """These routes touch the store: every test runs on SQLite and on PostgreSQL."""
    return database_url


@pytest.fixture
def instance_id(session_factory: sessionmaker[Session], registry: WorkflowRegistry) -> str:
    """A suspended invoice instance: it received the invoice, sent the e-mail, waits."""
    invoice = registry.get_definition("invoice-process")
    assert invoice is not None
    with session_factory.begin() as session:
        session.add(
            WorkflowInstance(
                id="inst-1",
                definition_id="invoice-process",
                definition_version_id=invoice.version_id,
                version=invoice.version,
                correlation_id="corr-1",
                name="Invoice process",
                status="Running",
                sub_status="Suspended",
                state={
                    "variables": {"AutoApproveLimit": 1000},
                    "bookmarks": [
                        {
                            "id": "bm-1",
                            "name": "Elsa.Event",
                            "activityId": "wait-approval",
                            "activityInstanceId": "ai-3",
                            "payload": {"eventName": "approval"},
                        }
                    ],
                },
                created_at=T0,
                updated_at=T0,
            )
        )
        entries = [
            JournalEntry(
                "receive", "ai-1", "Elsa.Http.HttpEndpoint", "ReceiveInvoice", "Started", None, T0
            ),
            JournalEntry(
                "receive",
                "ai-1",
                "Elsa.Http.HttpEndpoint",
                "ReceiveInvoice",
                "Completed",
                "Done",
                T0,
            ),
            JournalEntry("small-enough", "ai-2", "Elsa.FlowDecision", None, "Started", None, T0),
            JournalEntry(
                "small-enough",
                "ai-2",
                "Elsa.FlowDecision",
                None,
                "Completed",
                "False",
                T0,
                inputs={"condition": False},
            ),
            JournalEntry(
                "wait-approval", "ai-3", "Elsa.Event", "WaitForApproval", "Started", None, T0
            ),
        ]
        journal.append(session, "inst-1", entries, sequence=1)
    return "inst-1"


def test_list_filters_by_sub_status_definition_and_correlation(
    client_as: Client, instance_id: str
) -> None:
    client = client_as("viewer")
    found = client.get("/elsa/api/workflow-instances?subStatus=Suspended").get_json()
    assert found["totalCount"] == 1
    summary = found["items"][0]
    assert (summary["id"], summary["status"], summary["subStatus"]) == (
        instance_id,
        "Running",
        "Suspended",
    )
    body = {"definitionIds": ["invoice-process"], "correlationId": "corr-1", "page": 0}
    assert client.post("/elsa/api/workflow-instances", json=body).get_json()["totalCount"] == 1
    none = client.post("/elsa/api/workflow-instances", json={"status": "Finished"})
    assert none.get_json() == {"items": [], "totalCount": 0}
    assert client.get("/elsa/api/workflow-instances?searchTerm=corr-").get_json()["totalCount"] == 1


@pytest.mark.parametrize(
    ("filters", "found"),
    [
        ([{"column": "CreatedAt", "operator": "Is", "timestamp": "2026-12-01T00:00:00Z"}], 1),
        ([{"column": "CreatedAt", "operator": "IsNot", "timestamp": "2026-12-01"}], 0),
        ([{"column": "CreatedAt", "operator": "GreaterThan", "timestamp": "2026-12-01"}], 0),
        ([{"column": "updatedAt", "operator": 2, "timestamp": "2026-12-01T12:30:00Z"}], 1),
        (
            [
                {
                    "column": "CreatedAt",
                    "operator": "LessThan",
                    "timestamp": "2026-12-01T11:30-01:00",
                }
            ],
            1,
        ),
        (
            [{"column": "FinishedAt", "operator": "GreaterThanOrEqual", "timestamp": "2026-01-01"}],
            0,
        ),
    ],
)
def test_list_filters_by_the_date_filters_studio_sends(
    client_as: Client, instance_id: str, filters: list[dict[str, object]], found: int
) -> None:
    body = {"page": 0, "pageSize": 10, "isSystem": False, "timestampFilters": filters}
    page = client_as("viewer").post("/elsa/api/workflow-instances", json=body).get_json()
    assert page["totalCount"] == found


def test_list_refuses_malformed_filters_and_has_no_system_workflows(
    client_as: Client, instance_id: str
) -> None:
    client = client_as("viewer")
    url = "/elsa/api/workflow-instances"
    assert client.post(url, json={"isSystem": True}).get_json()["totalCount"] == 0
    for body, field in [
        ({"timestampFilters": [{"column": "Nope", "timestamp": "2026-12-01"}]}, "column"),
        ({"timestampFilters": [{"column": "CreatedAt", "operator": 9}]}, "operator"),
        ({"timestampFilters": [{"column": "CreatedAt", "timestamp": "soon"}]}, "timestamp"),
        ({"page": "first"}, "page"),
        ({"hasIncidents": "maybe"}, "hasIncidents"),
    ]:
        response = client.post(url, json=body)
        assert response.status_code == 400, body
        assert field in response.get_json()["errors"]["generalErrors"][0]


def test_get_answers_the_instance_with_its_workflow_state(
    client_as: Client, instance_id: str
) -> None:
    body = client_as("viewer").get(f"/elsa/api/workflow-instances/{instance_id}").get_json()
    state = body["workflowState"]
    assert state["subStatus"] == "Suspended"
    assert state["bookmarks"][0]["activityNodeId"] == "flow:wait-approval"
    assert client_as("viewer").get("/elsa/api/workflow-instances/nope").status_code == 404


def test_journal_pages_records_with_node_ids(client_as: Client, instance_id: str) -> None:
    client = client_as("viewer")
    body = client.get(f"/elsa/api/workflow-instances/{instance_id}/journal?page=0&pageSize=2")
    page = body.get_json()
    assert page["totalCount"] == 5
    assert [r["eventName"] for r in page["items"]] == ["Started", "Completed"]
    assert page["items"][0]["nodeId"] == "flow:receive"
    decided = client.get(f"/elsa/api/workflow-instances/{instance_id}/journal?skip=3&take=1")
    assert decided.get_json()["items"][0]["activityState"] == {"Condition": False}


def test_journal_filters_as_studio_asks_and_answers_an_activity_s_last_entry(
    client_as: Client, instance_id: str
) -> None:
    client = client_as("viewer")
    url = f"/elsa/api/workflow-instances/{instance_id}/journal"
    # Studio's viewer: the nodes of the flowchart it shows, without container types
    body = {
        "filter": {
            "activityNodeIds": ["flow:small-enough", "flow:wait-approval"],
            "excludedActivityTypes": ["Elsa.Event"],
            "activityIds": None,
            "eventNames": None,
        }
    }
    page = client.post(f"{url}?skip=0&take=109", json=body).get_json()
    assert page["totalCount"] == 2
    assert [(r["activityId"], r["eventName"]) for r in page["items"]] == [
        ("small-enough", "Started"),
        ("small-enough", "Completed"),
    ]
    completed = client.post(url, json={"filter": {"eventNames": ["Completed"]}, "take": 1})
    assert completed.get_json()["totalCount"] == 2
    assert [r["activityId"] for r in completed.get_json()["items"]] == ["receive"]
    nothing = client.post(url, json={"filter": {"activityNodeIds": []}}).get_json()
    assert nothing == {"items": [], "totalCount": 0}
    bad = client.post(url, json={"filter": {"eventNames": "Completed"}})
    assert bad.status_code == 400
    assert "'filter.eventNames'" in bad.get_json()["errors"]["generalErrors"][0]
    # The last entry of one activity
    last = client.get(f"{url}/small-enough").get_json()
    assert (last["eventName"], last["sequence"], last["nodeId"]) == (
        "Completed",
        4,
        "flow:small-enough",
    )
    assert client.get(f"{url}/nope").status_code == 404


def test_variables(client_as: Client, instance_id: str) -> None:
    body = client_as("viewer").get(f"/elsa/api/workflow-instances/{instance_id}/variables")
    items = body.get_json()["items"]
    assert items == [{"id": "auto-approve-limit", "name": "AutoApproveLimit", "value": 1000}]


def test_activity_executions_from_the_journal(client_as: Client, instance_id: str) -> None:
    client = client_as("viewer")
    records = client.get(
        f"/elsa/api/activity-executions/list?workflowInstanceId={instance_id}"
    ).get_json()["items"]
    by_activity = {r["activityId"]: r for r in records}
    assert by_activity["small-enough"]["status"] == "Completed"
    assert by_activity["small-enough"]["payload"]["Outcomes"] == ["False"]
    # the inputs it evaluated, under the descriptor's names, as Studio shows them
    assert by_activity["small-enough"]["activityState"] == {"Condition": False}
    assert by_activity["receive"]["activityState"] is None
    assert by_activity["wait-approval"]["status"] == "Running"
    assert by_activity["wait-approval"]["hasBookmarks"] is True
    summaries = client.get(
        "/elsa/api/activity-execution-summaries/list"
        f"?workflowInstanceId={instance_id}&activityNodeId=flow:receive"
    ).get_json()
    assert summaries["count"] == 1
    assert summaries["items"][0]["completedAt"] is not None
    one = client.get("/elsa/api/activity-executions/by-id?id=ai-2").get_json()
    assert one["activityNodeId"] == "flow:small-enough"
    report = client.post(
        "/elsa/api/activity-executions/report", json={"workflowInstanceId": instance_id}
    ).get_json()
    blocked = {s["activityId"]: s["isBlocked"] for s in report["stats"]}
    assert blocked == {"receive": False, "small-enough": False, "wait-approval": True}


def test_cancel_needs_an_operator_then_delete_removes_the_finished_instance(
    client_as: Client, instance_id: str
) -> None:
    url = f"/elsa/api/workflow-instances/{instance_id}"
    # A designer may neither cancel nor delete
    assert (
        client_as("designer").post(f"/elsa/api/cancel/workflow-instances/{instance_id}").status_code
        == 403
    )
    assert client_as("designer").delete(url).status_code == 403
    cancelled = client_as("operator").post(f"/elsa/api/cancel/workflow-instances/{instance_id}")
    assert cancelled.status_code == 200
    assert cancelled.get_json()["subStatus"] == "Cancelled"
    assert client_as("operator").delete(url).status_code == 204
    assert client_as("viewer").get(url).status_code == 404
    assert client_as("operator").delete(url).status_code == 404


def test_deleting_a_running_instance_cancels_it_first_and_leaves_no_records(
    client_as: Client, instance_id: str, session_factory: sessionmaker[Session]
) -> None:
    # Given a running instance (waiting, with bookmarks and journal rows)
    url = f"/elsa/api/workflow-instances/{instance_id}"
    assert client_as("viewer").get(url).get_json()["status"] == "Running"
    # When an operator deletes it, as Elsa's API does for a running instance
    assert client_as("operator").delete(url).status_code == 204
    # Then it is gone with its bookmarks and journal
    assert client_as("viewer").get(url).status_code == 404
    with session_factory() as session:
        for model in (Bookmark, ActivityExecution):
            left = session.scalars(select(model).where(model.instance_id == instance_id)).all()
            assert left == [], model


def test_bookmark_dead_letters_and_runtime_pause(
    client_as: Client, session_factory: sessionmaker[Session]
) -> None:
    with session_factory.begin() as session:
        session.add(DeadLetter(id="dl-1", kind="bookmark", reason="Failed", name="approval"))
    viewer, operator = client_as("viewer"), client_as("operator")
    page = viewer.get("/elsa/api/bookmark-queue/dead-letters").get_json()
    assert page["totalCount"] == 1
    assert viewer.get("/elsa/api/bookmark-queue/dead-letters/dl-1").status_code == 200
    assert viewer.delete("/elsa/api/bookmark-queue/dead-letters/dl-1").status_code == 403
    assert operator.delete("/elsa/api/bookmark-queue/dead-letters/dl-1").status_code == 204
    assert viewer.get("/elsa/api/bookmark-queue/dead-letters/dl-1").status_code == 404
    # the runtime: viewers read, operators pause and resume
    assert viewer.post("/elsa/api/workflow-runtime/pause").status_code == 403
    paused = operator.post("/elsa/api/admin/workflow-runtime/pause").get_json()
    assert paused["state"]["isAcceptingNewWork"] is False
    # a second pause changes nothing: paused since the first
    again = operator.post("/elsa/api/admin/workflow-runtime/pause").get_json()
    assert again["state"]["pausedAt"] == paused["state"]["pausedAt"]
    assert viewer.get("/elsa/api/workflow-runtime/status").get_json()["paused"] is True
    resumed = operator.post("/elsa/api/workflow-runtime/resume").get_json()
    assert resumed["paused"] is False
