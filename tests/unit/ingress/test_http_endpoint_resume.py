"""``/workflows/{path}`` resuming an instance that waits at an HttpEndpoint, in process: the call
becomes a bookmark queue item and a resume row in one transaction, only the owner's instances
answer, ``workflowInstanceId``/``correlationId`` narrow the match, and the resumed workflow's
response answers that call (the live stack shows the synchronous answer over mutual TLS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress.auth import PEER_CERT
from broker.runtime import ids
from broker.runtime.steps import runner
from broker.settings import Settings
from broker.store.models import BookmarkQueueItem, OutboxRow, WorkflowInstance
from broker.wiring.runtime import Runtime
from broker.wiring.web import create_public_app
from tests.support.doubles import RecordingPublisher, RecordingSender
from tests.support.ingress import Pki
from tests.support.services import PROJECT_ROOT

FIXTURE = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "triggers" / "approve-order.json"


class Stack:
    """The public app and an in-process runtime on one database; nothing runs by itself."""

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        pki: Pki,
        tmp_path: Path,
    ) -> None:
        folder = tmp_path / "wf"
        folder.mkdir()
        document = json.loads(FIXTURE.read_text(encoding="utf-8"))
        document["customProperties"]["requestType"] = "OpenType"  # ClientA may submit it
        (folder / FIXTURE.name).write_text(json.dumps(document), encoding="utf-8")
        self.settings = settings.replace(workflow_paths=(str(folder),), http_trigger_wait=0.0)
        self.factory = factory
        self.publisher = RecordingPublisher()
        app = create_public_app(self.settings, session_factory=factory, publisher=self.publisher)
        self.app, self.pki = app, pki
        self.rt = Runtime(self.settings, factory=factory, sender=RecordingSender())

    def client(self, name: str) -> FlaskClient:
        client = self.app.test_client()
        client.environ_base[PEER_CERT] = self.pki.der(name)  # type: ignore[assignment]
        return client

    def start_order(self, query: str = "") -> str:
        """Start an order (POST /workflows/orders) and run its first step: it then waits."""
        response = self.client("ClientA").post(f"/workflows/orders{query}", json={"id": 1})
        assert response.status_code == 202, response.get_json()
        request_id = str(response.get_json()["correlationId"])
        self.run_published()
        return request_id

    def run_published(self) -> None:
        """Run every row the ingress published, as the worker would."""
        for outbox_id in list(self.publisher.published):
            self.publisher.published.remove(outbox_id)
            with self.factory() as session:
                row = session.get_one(OutboxRow, outbox_id)
                name, args = row.task_name, dict(row.args or {})
            if name == "broker.run_request":
                runner.run_request(self.rt, args["request_id"], outbox_id)
            else:
                runner.resume_instance(
                    self.rt,
                    args["instance_id"],
                    outbox_id,
                    bookmark_id=args.get("bookmark_id"),
                    queue_item_id=args.get("queue_item_id"),
                )

    def state(self, request_id: str) -> dict[str, Any]:
        with self.factory() as session:
            instance = session.get_one(WorkflowInstance, ids.instance_id_for_request(request_id))
            return {"status": instance.status, **dict(instance.state or {})}


def make_stack(
    ingress_settings: Settings, session_factory: sessionmaker[Session], pki: Pki, tmp_path: Path
) -> Stack:
    return Stack(ingress_settings, session_factory, pki, tmp_path)


def test_a_call_no_trigger_serves_resumes_the_instance_waiting_at_that_endpoint(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
) -> None:
    stack = make_stack(ingress_settings, session_factory, pki, tmp_path)
    # Given an order waiting at POST /workflows/orders/approve
    request_id = stack.start_order()
    assert stack.state(request_id)["subStatus"] == "Suspended"
    # When its owner calls that path (no worker runs: the wait bound is 0)
    response = stack.client("ClientA").post("/workflows/orders/approve", json={"ok": True})
    # Then the call is queued durably: a bookmark queue item addressed to the waiting bookmark,
    # and its resume row, published at once
    assert response.status_code == 202
    assert response.get_json()["correlationId"] == request_id
    [outbox_id] = stack.publisher.published
    with session_factory() as session:
        row = session.get_one(OutboxRow, outbox_id)
        item = session.get_one(BookmarkQueueItem, row.args["queue_item_id"])
        assert (row.task_name, row.args["instance_id"]) == (
            "broker.resume_instance",
            ids.instance_id_for_request(request_id),
        )
        assert item.bookmark_id == row.args["bookmark_id"]
        assert item.payload["body"] == {"ok": True}
        item_id = item.id
    # And when the resume runs, the workflow answers that very call
    stack.run_published()
    state = stack.state(request_id)
    assert state["subStatus"] == "Finished"
    response_written = state["httpResponse"]
    assert (response_written["statusCode"], response_written["content"]) == (201, {"ok": True})
    assert response_written["requestId"] == item_id


def test_only_the_owner_resumes_and_a_second_call_finds_nothing_waiting(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
) -> None:
    stack = make_stack(ingress_settings, session_factory, pki, tmp_path)
    stack.start_order()
    # Another client's call matches none of its own instances: 404, nothing queued
    assert stack.client("ClientB").post("/workflows/orders/approve", json={}).status_code == 404
    assert stack.publisher.published == []
    # The owner's resumes it; once it ran, a second call finds nothing waiting
    assert stack.client("ClientA").post("/workflows/orders/approve", json={}).status_code == 202
    stack.run_published()
    assert stack.client("ClientA").post("/workflows/orders/approve", json={}).status_code == 404


def test_the_correlation_id_or_the_instance_id_picks_one_of_several_waiting(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    pki: Pki,
    tmp_path: Path,
) -> None:
    stack = make_stack(ingress_settings, session_factory, pki, tmp_path)
    # Given three orders waiting, started with Elsa's correlationId selector
    first = stack.start_order("?correlationId=order-1")
    second = stack.start_order("?correlationId=order-2")
    third = stack.start_order("?correlationId=order-3")
    client = stack.client("ClientA")
    # When a call names none of them, then it is ambiguous (Elsa's message), nothing queued
    ambiguous = client.post("/workflows/orders/approve", json={})
    assert ambiguous.status_code == 409
    assert ambiguous.get_json()["error"] == "The call is ambiguous and matches multiple workflows."
    assert len(ambiguous.get_json()["workflows"]) == 3
    # When one names the second by correlation id (query) and the third by instance id (header)
    by_correlation = client.post("/workflows/orders/approve?correlationId=order-2", json={})
    by_instance = client.post(
        "/workflows/orders/approve",
        json={},
        headers={"X-Workflow-Instance-ID": ids.instance_id_for_request(third)},
    )
    assert (by_correlation.status_code, by_instance.status_code) == (202, 202)
    stack.run_published()
    # Then exactly those two went on
    statuses = [stack.state(r)["subStatus"] for r in (first, second, third)]
    assert statuses == ["Suspended", "Finished", "Finished"]
