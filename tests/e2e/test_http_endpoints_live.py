"""HttpEndpoints in the middle of a workflow and inbound webhook events, through the real runtime:
gunicorn over mutual TLS, a Celery worker and a beat.

The workflows are ``tests/fixtures/workflows/triggers``: Elsa's SimpleHttpApiWorkflow (ported
from ResumeSpecificHttpWorkflowInstanceTests), an order that waits for its approval call and
answers it, and a workflow a webhook event starts. Only generous upper time bounds are asserted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from broker.runtime import ids
from broker.store.db import transaction
from broker.store.models import Request, WorkflowInstance
from tests.e2e.live import DEV, OTHER, LiveStack, running_stack
from tests.support.services import PROJECT_ROOT

pytestmark = pytest.mark.slow

TRIGGERS = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "triggers"
FILES = ("simple-http-api.json", "approve-order.json", "webhook-trigger.json")
WAIT = 60.0


def sub_status(stack: LiveStack, request_id: str) -> str | None:
    with transaction(stack.factory, write=False) as session:
        instance = session.get(WorkflowInstance, ids.instance_id_for_request(request_id))
        return instance.sub_status if instance is not None else None


def suspended(stack: LiveStack, request_id: str) -> None:
    stack.wait_for(
        lambda: sub_status(stack, request_id) == "Suspended",
        timeout=WAIT,
        interval=0.2,
        what=f"request {request_id} to wait at its endpoint",
    )


def test_a_mid_workflow_endpoint_waits_for_its_call_and_answers_it(tmp_path: Path) -> None:
    root = tmp_path / "stack"
    (root / "workflows").mkdir(parents=True)
    for name in FILES:
        shutil.copy(TRIGGERS / name, root / "workflows" / name)
    with running_stack(root, beats=1) as stack:
        # ResumeSpecificHttpWorkflowInstanceTests: start three instances, each named by its
        # correlation id (Elsa's correlationId selector) ...
        started = {}
        for n in (1, 2, 3):
            answer = stack.call(DEV, "GET", f"/workflows/simple-http-api/start?correlationId=c{n}")
            assert answer.status == 202, answer  # it waits: no response written (yet)
            started[n] = answer.body["correlationId"]
        for request_id in started.values():
            suspended(stack, request_id)
        # ... then resume the second one: 200, and only that one went on
        resumed = stack.call(DEV, "GET", "/workflows/simple-http-api/resume?correlationId=c2")
        assert resumed.status == 200, resumed
        assert resumed.body["correlationId"] == started[2]
        stack.wait_for(
            lambda: sub_status(stack, started[2]) == "Finished",
            timeout=WAIT,
            interval=0.2,
            what="the second instance to finish",
        )
        assert [sub_status(stack, started[n]) for n in (1, 3)] == ["Suspended", "Suspended"]
        # And by workflowInstanceId (the other selector) the third one
        instance = ids.instance_id_for_request(started[3])
        by_id = stack.call(
            DEV, "GET", f"/workflows/simple-http-api/resume?workflowInstanceId={instance}"
        )
        assert by_id.status == 200, by_id
        # A call that matches two waiting instances is ambiguous, as Elsa says
        second = stack.call(DEV, "GET", "/workflows/simple-http-api/start?correlationId=c4")
        suspended(stack, second.body["correlationId"])
        ambiguous = stack.call(DEV, "GET", "/workflows/simple-http-api/resume")
        assert ambiguous.status == 409, ambiguous
        assert ambiguous.body["error"] == "The call is ambiguous and matches multiple workflows."

        # An order waits for its approval call; that call gets the response written after it
        order = stack.call(DEV, "POST", "/workflows/orders", {"id": 42})
        assert order.status == 202, order
        suspended(stack, order.body["correlationId"])
        # (another client's call finds none of its own instances waiting)
        assert stack.call(OTHER, "POST", "/workflows/orders/approve", {"ok": 1}).status == 404
        approved = stack.call(DEV, "POST", "/workflows/orders/approve", {"approvedBy": "ann"})
        assert approved.status == 201, approved
        assert approved.body == {"approvedBy": "ann"}
        assert approved.headers["Content-Type"].startswith("application/json")

        # An inbound webhook event (mTLS client) starts the workflow its trigger names
        queued = stack.call(
            DEV, "POST", "/webhook-events", {"eventType": "order.shipped", "payload": {"id": 9}}
        )
        assert queued.status == 202, queued

        def shipped() -> Request | None:
            with transaction(stack.factory, write=False) as session:
                found = session.scalars(
                    select(Request).where(Request.definition_id == "webhook-trigger")
                ).first()
                if found is not None:
                    session.expunge(found)
                return found

        stack.wait_for(
            lambda: (r := shipped()) is not None and r.status == "Completed",
            timeout=WAIT,
            interval=0.3,
            what="the webhook-started request to complete",
        )
        started_by_hook = shipped()
        assert started_by_hook is not None
        assert started_by_hook.client_id == DEV
        assert started_by_hook.result == {"shipment": {"id": 9}}
